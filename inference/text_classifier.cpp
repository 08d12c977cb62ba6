// A classifier's labels and a masked language model's guesses (text_classifier.h).
#include "seqgrad/inference/text_classifier.h"

#include <algorithm>
#include <numeric>

#include "seqgrad/core/autograd.h"
#include "seqgrad/core/error.h"
#include "seqgrad/core/ops.h"
#include "seqgrad/models/registry.h"
#include "seqgrad/text/encoder_input.h"
#include "seqgrad/text/utf8.h"

namespace seqgrad::inference {
namespace {

models::EncoderModel& encoder_of(const text::LoadedModel& loaded, const char* op) {
    auto* encoder = dynamic_cast<models::EncoderModel*>(loaded.model.get());
    check(encoder != nullptr, op, loaded.path, " holds a \"", loaded.model->config().model,
          "\" model, not an encoder (bert)");
    return *encoder;
}

int64_t longest_row(const text::LoadedModel& loaded) {
    return models::model_kind(loaded.model->config().model).max_length(loaded.model->config());
}

// The indices of the k largest of `values`, the largest first (ties: the lower index).
std::vector<int64_t> top_indices(const float* values, int64_t n, int64_t k) {
    std::vector<int64_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), int64_t{0});
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int64_t a, int64_t b) { return values[a] != values[b] ? values[a] > values[b] : a < b; });
    order.resize(static_cast<size_t>(k));
    return order;
}

}  // namespace

// Packed float32 classified the 64 texts of the BERT recipe's benchmark no faster at AVX-512
// (oneDNN's brgemm) and slower at AVX2 (seqgrad's panels: 19.6-19.9 ms against sgemm's 15.0-15.6).
void prepare_encoder_weights(text::LoadedModel& loaded, Precision precision) {
    if (precision == Precision::float32) loaded.model->unpack_weights();
    else loaded.model->pack_weights(precision);
}

TextClassifier::TextClassifier(const std::string& checkpoint, Precision precision)
    : TextClassifier(text::load_model(checkpoint), precision) {}

TextClassifier::TextClassifier(text::LoadedModel loaded, Precision precision) : loaded_(std::move(loaded)) {
    const models::EncoderModel& encoder = encoder_of(loaded_, "TextClassifier");
    check(encoder.classifies() && !loaded_.labels.empty(), "TextClassifier", loaded_.path,
          " holds an encoder that was not trained to classify (a masked language model: use MaskFiller)");
    prepare_encoder_weights(loaded_, precision);
}

std::vector<std::vector<LabelScore>> TextClassifier::classify(const std::vector<std::string>& texts,
                                                              int64_t top_k) const {
    const char* op = "TextClassifier";
    const auto classes = static_cast<int64_t>(loaded_.labels.size());
    check(top_k >= 1 && top_k <= classes, op, "top_k must be from 1 to the ", classes, " classes, got ", top_k);
    check(batch_size >= 1, op, "batch_size must be positive, got ", batch_size);
    const int64_t longest = longest_row(loaded_);
    std::vector<std::vector<int64_t>> rows;
    rows.reserve(texts.size());
    for (size_t i = 0; i < texts.size(); ++i) {
        const std::string& t = texts[i];
        check(text::is_utf8(t), op, "text ", i + 1, " is not valid UTF-8");
        const size_t tab = t.find('\t');
        const std::string_view first = std::string_view(t).substr(0, tab);
        check(!first.empty() && (tab == std::string::npos || tab + 1 < t.size()), op, "text ", i + 1,
              tab == std::string::npos ? " is empty" : " is a pair with an empty text");
        const std::vector<int64_t> a = text::encoder_ids(first, loaded_.target_tokenizer, loaded_.target_vocab);
        std::vector<int64_t> b;
        if (tab != std::string::npos)
            b = text::encoder_ids(std::string_view(t).substr(tab + 1), loaded_.target_tokenizer, loaded_.target_vocab);
        rows.push_back(text::encoder_row(
            a, tab == std::string::npos ? std::nullopt : std::optional<std::span<const int64_t>>(b), longest));
    }
    // Batches of rows of similar lengths: least padding.
    std::vector<size_t> order(rows.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return rows[a].size() < rows[b].size(); });
    std::vector<std::vector<LabelScore>> results(rows.size());
    const std::lock_guard<std::mutex> lock(mutex_);
    models::EncoderModel& encoder = encoder_of(loaded_, op);
    NoGradGuard no_grad;
    for (size_t start = 0; start < order.size(); start += static_cast<size_t>(batch_size)) {
        const size_t end = std::min(order.size(), start + static_cast<size_t>(batch_size));
        std::vector<std::vector<int64_t>> batch_rows;
        for (size_t i = start; i < end; ++i) batch_rows.push_back(std::move(rows[order[i]]));
        const IntTensor tokens = text::encoder_batch(batch_rows);
        const Tensor hidden = encoder.forward_first(tokens, models::encoder_segments(tokens));
        const Tensor p = softmax(encoder.class_logits(hidden), -1);
        for (size_t i = start; i < end; ++i) {
            const float* row = p.data() + static_cast<int64_t>(i - start) * classes;
            for (const int64_t c : top_indices(row, classes, top_k))
                results[order[i]].push_back({loaded_.labels[static_cast<size_t>(c)], row[c]});
        }
    }
    return results;
}

MaskFiller::MaskFiller(const std::string& checkpoint, Precision precision)
    : MaskFiller(text::load_model(checkpoint), precision) {}

MaskFiller::MaskFiller(text::LoadedModel loaded, Precision precision) : loaded_(std::move(loaded)) {
    encoder_of(loaded_, "MaskFiller");
    check(loaded_.target_vocab.for_encoder(), "MaskFiller", loaded_.path, ": its vocabulary has no <mask>");
    prepare_encoder_weights(loaded_, precision);
}

std::vector<std::vector<TokenScore>> MaskFiller::fill(const std::string& text, int64_t top_k) const {
    const char* op = "MaskFiller";
    const int64_t vocab = loaded_.target_vocab.size(), symbols = vocab - models::kFirstEncoderSymbol;
    check(top_k >= 1 && top_k <= symbols, op, "top_k must be from 1 to the vocabulary's ", symbols, " symbols, got ",
          top_k);
    check(text::is_utf8(text), op, "the text is not valid UTF-8");
    int64_t masks = 0;
    const std::vector<int64_t> ids =
        text::encoder_ids_with_masks(text, loaded_.target_tokenizer, loaded_.target_vocab, &masks);
    check(masks > 0, op, "the text has no ", text::kMaskText, " to fill in");
    const int64_t longest = longest_row(loaded_);
    check(static_cast<int64_t>(ids.size()) + 2 <= longest, op, "the text is ", ids.size(),
          " tokens; the model reads rows of at most ", longest, " with its <cls> and <sep>");
    const std::vector<int64_t> row = text::encoder_row(ids, std::nullopt, longest);
    const IntTensor tokens = text::encoder_batch({row});
    const std::lock_guard<std::mutex> lock(mutex_);
    models::EncoderModel& encoder = encoder_of(loaded_, op);
    NoGradGuard no_grad;
    const Tensor p = softmax(encoder.mlm_logits(encoder.forward(tokens)), -1);  // [1, T, vocab]
    std::vector<std::vector<TokenScore>> results;
    for (size_t t = 0; t < row.size(); ++t) {
        if (row[t] != models::kMask) continue;
        const float* probabilities = p.data() + static_cast<int64_t>(t) * vocab + models::kFirstEncoderSymbol;
        std::vector<TokenScore> guesses;
        for (const int64_t s : top_indices(probabilities, symbols, top_k))
            guesses.push_back({loaded_.target_vocab.symbol(s + models::kFirstEncoderSymbol), probabilities[s]});
        results.push_back(std::move(guesses));
    }
    return results;
}

}  // namespace seqgrad::inference
