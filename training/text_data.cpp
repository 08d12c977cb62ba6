// A language model's data: reading, splitting, tokenizing and encoding a text; training windows;
// the loss over a whole text (text_data.h).
#include "seqgrad/training/text_data.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <unordered_map>

#include "seqgrad/core/autograd.h"
#include "seqgrad/core/error.h"
#include "seqgrad/core/hash.h"
#include "seqgrad/text/utf8.h"
#include "seqgrad/training/text_file.h"

namespace seqgrad::training {
namespace {

const char* kOp = "text";

// The unit bits are counted per, and the length of `text` in it.
const char* unit_of(const text::Tokenizer& tokenizer) { return tokenizer.kind() == "byte" ? "byte" : "character"; }

int64_t units_in(std::string_view text, const text::Tokenizer& tokenizer) {
    if (tokenizer.kind() == "byte") return static_cast<int64_t>(text.size());
    int64_t n = 0;
    for (size_t at = 0; at < text.size(); ++n) {
        const size_t length = text::utf8_length(text, at);
        at += length > 0 ? length : 1;  // read_text_file has checked it; a stray byte counts as one
    }
    return n;
}

// The byte offset at which the first `fraction` of the text's units ends (on a code point's
// boundary when the units are characters).
size_t split_point(std::string_view text, const text::Tokenizer& tokenizer, double fraction) {
    const auto wanted = static_cast<int64_t>(static_cast<double>(units_in(text, tokenizer)) * fraction);
    if (tokenizer.kind() == "byte") return static_cast<size_t>(wanted);
    size_t at = 0;
    for (int64_t n = 0; n < wanted && at < text.size(); ++n) {
        const size_t length = text::utf8_length(text, at);
        at += length > 0 ? length : 1;
    }
    return at;
}

std::string thousands(int64_t n) {
    std::string digits = std::to_string(n), out;
    for (size_t i = 0; i < digits.size(); ++i) {
        if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
        out += digits[i];
    }
    return out;
}

std::vector<int32_t> encode(std::string_view text, const text::Tokenizer& tokenizer, const text::Vocabulary& vocab) {
    std::vector<int32_t> ids;
    ids.reserve(text.size());
    tokenizer.each_symbol(text,
                          [&](std::string_view symbol) { ids.push_back(static_cast<int32_t>(vocab.id(symbol))); });
    return ids;
}

// The file, checked as the tokenizer reads it: UTF-8 unless it reads bytes.
std::string read_for(const std::string& path, const std::string& tokens) {
    return read_text_file(path, /*require_utf8=*/tokens != "byte");
}

}  // namespace

text::Tokenizer text_tokenizer(const TrainingOptions& o, const std::string& training_text, const std::string& what) {
    if (o.tokens == "char") return text::Tokenizer::characters();
    if (o.tokens == "byte") return text::Tokenizer::bytes();
    check(o.tokens == "sentencepiece", kOp, "unknown tokens \"", o.tokens, "\" (char, byte or sentencepiece)");
    if (!o.spm_model.empty()) return text::Tokenizer::load_sentencepiece(o.spm_model);
    text::SentencePieceOptions spm;
    spm.model_type = o.spm_type;
    spm.vocab_size = o.spm_vocab_size;
    spm.seed = o.seed;
    size_t at = 0;  // the training text's lines, one at a time
    const auto next_line = [&](std::string& line) {
        while (at < training_text.size()) {
            const size_t end = std::min(training_text.find('\n', at), training_text.size());
            line.assign(training_text, at, end - at);
            at = end + 1;
            if (!line.empty()) return true;
        }
        return false;
    };
    try {
        return text::Tokenizer::train_sentencepiece(next_line, spm);
    } catch (const Error& e) {
        throw Error((what.empty() ? o.text : what) + ": " + e.what());
    }
}

text::Vocabulary vocabulary_of(std::unordered_map<std::string, int64_t> counts, const TrainingOptions& options,
                               bool encoder, const char* op, const std::string& where) {
    counts.erase(text::Vocabulary::kSpecials[models::kUnk]);
    for (const char* special : text::Vocabulary::kSpecials)
        check(!counts.count(special), op, where, " holds the special token ", special, " as a symbol");
    if (encoder)
        for (const char* special : text::Vocabulary::kEncoderSpecials)
            check(!counts.count(special), op, where, " holds the special token ", special, " as a symbol");
    return text::Vocabulary::from_counts({counts.begin(), counts.end()}, options.min_count, options.max_vocab, encoder);
}

TextData::TextData() : TaskData(text_evaluator()) {}

std::unique_ptr<BatchSource> TextData::batches(const TrainingOptions& options, int64_t longest) {
    check(options.batches.max_sentences > 0, kOp,
          "a text's batches are windows: give batch_sentences (the windows of a step, --batch-size)");
    return std::make_unique<WindowStream>(std::move(train_text), longest + 1, options.batches.max_sentences,
                                          options.seed);
}

EvalResult TextData::evaluate(models::Model& model, Split, int64_t, int64_t longest, const models::DecodingOptions&,
                              std::vector<std::vector<std::string>>*) const {
    return text_loss(model, dev_text, longest + 1, 32, dev_units, unit);
}

TextData prepare_text(const TrainingOptions& options, const DataRequest& request, bool encoder) {
    check(!options.text.empty(), kOp, "no text to train on: give \"text\" (--text FILE)");
    const std::string whole = read_for(options.text, options.tokens);
    check(!whole.empty(), kOp, options.text, ": the text is empty");
    std::string train_text, val_text;
    std::string where;
    if (options.val.empty()) {
        // nanoGPT's rule: the last 10% validates, in the order of the text.
        const text::Tokenizer counting = options.tokens == "byte" ? text::Tokenizer::bytes()
                                                                  : text::Tokenizer::characters();
        const size_t split = split_point(whole, counting, 0.9);
        train_text = whole.substr(0, split);
        val_text = whole.substr(split);
        where = "the last 10% of " + options.text;
    } else {
        train_text = whole;
        val_text = read_for(options.val, options.tokens);
        where = options.val;
    }
    TextData data;
    data.target_tokenizer = request.target_tokenizer ? *request.target_tokenizer : text_tokenizer(options, train_text);
    const text::Tokenizer& tokenizer = data.target_tokenizer;
    if (request.target_vocab) {
        data.target_vocab = *request.target_vocab;
        check(!encoder || data.target_vocab.for_encoder(), kOp,
              "the vocabulary given is not an encoder's (<cls>, <sep>, <mask> after the four special tokens)");
    } else {
        std::unordered_map<std::string, int64_t> counts;
        tokenizer.each_symbol(train_text, [&](std::string_view symbol) { ++counts[std::string(symbol)]; });
        data.target_vocab = vocabulary_of(std::move(counts), options, encoder, kOp, options.text + ": the text");
    }
    data.train_text = encode(train_text, tokenizer, data.target_vocab);
    data.dev_text = encode(val_text, tokenizer, data.target_vocab);
    data.dev_units = units_in(val_text, tokenizer);
    data.unit = unit_of(tokenizer);
    const int64_t window = request.max_target_length > 0 ? request.max_target_length + 1 : 2;
    check(!request.train || static_cast<int64_t>(data.train_text.size()) >= window, kOp, options.text,
          ": the training text has ", data.train_text.size(), " tokens, fewer than one window of ", window,
          " (the context and the token after it)");
    check(data.dev_text.size() >= 2, kOp, where, ": the validation text has ", data.dev_text.size(),
          " tokens; a loss needs at least 2");
    const auto unknown = std::count(data.dev_text.begin(), data.dev_text.end(), static_cast<int32_t>(models::kUnk));
    data.report.push_back(detail::concat("text ", options.text, ": ", thousands(units_in(train_text, tokenizer)), " ",
                                         data.unit, "s to train on, ", thousands(data.dev_units), " to validate on (",
                                         where, "); tokens: ", tokenizer.describe()));
    data.report.push_back(detail::concat("vocabulary: ", data.target_vocab.size(), " symbols; ",
                                         thousands(static_cast<int64_t>(data.train_text.size())), " training tokens, ",
                                         thousands(static_cast<int64_t>(data.dev_text.size())), " validation tokens (",
                                         unknown, " unknown)"));
    return data;
}

EncodedText encode_text(const std::string& path, const text::Tokenizer& tokenizer, const text::Vocabulary& vocab) {
    const std::string text = read_text_file(path, tokenizer.kind() != "byte");
    check(!text.empty(), kOp, path, ": the text is empty");
    EncodedText out;
    out.ids = encode(text, tokenizer, vocab);
    out.units = units_in(text, tokenizer);
    out.unit = unit_of(tokenizer);
    return out;
}

// ---- training windows ----

WindowStream::WindowStream(std::vector<int32_t> tokens, int64_t window, int64_t rows, uint64_t seed)
    : tokens_(std::move(tokens)), window_(window), rows_(rows), seed_(seed) {
    check(window >= 2 && rows >= 1, "WindowStream", "needs windows of 2 tokens or more and a row or more, got ", window,
          " and ", rows);
    check(static_cast<int64_t>(tokens_.size()) >= window, "WindowStream", "a text of ", tokens_.size(),
          " tokens holds no window of ", window);
    const int64_t per_batch = rows_ * (window_ - 1);  // tokens predicted
    batches_in_epoch_ = std::max<int64_t>(1, (static_cast<int64_t>(tokens_.size()) + per_batch - 1) / per_batch);
}

void WindowStream::restore(const BatchStreamState& state) {
    check(state.epoch >= 0 && state.next_batch >= 0 && state.next_batch < batches_in_epoch_, "WindowStream", "batch ",
          state.next_batch, " of epoch ", state.epoch, " is not one of its ", batches_in_epoch_);
    state_ = state;
}

Batch WindowStream::next() {
    const auto k = static_cast<uint64_t>(state_.epoch * batches_in_epoch_ + state_.next_batch);
    Generator gen(splitmix64_mix(seed_ ^ splitmix64_mix(kSplitMixGamma * (k + 1))));
    const auto starts = static_cast<uint64_t>(static_cast<int64_t>(tokens_.size()) - window_ + 1);
    Batch batch;
    batch.src = IntTensor::zeros({rows_, 0});
    batch.tgt = IntTensor::zeros({rows_, window_});
    for (int64_t r = 0; r < rows_; ++r) {
        const auto start = static_cast<int64_t>(gen.below(starts));
        std::copy_n(tokens_.data() + start, window_, batch.tgt.data() + r * window_);
        batch.example_index.push_back(start);
    }
    batch.target_tokens = rows_ * (window_ - 1);
    if (++state_.next_batch == batches_in_epoch_) {
        state_.next_batch = 0;
        ++state_.epoch;
    }
    return batch;
}

// ---- the loss over a whole text ----

TextScores text_loss(models::Model& model, const std::vector<int32_t>& text, int64_t window, int64_t rows,
                     int64_t units, const std::string& unit) {
    check(window >= 2 && rows >= 1, "text_loss", "needs windows of 2 tokens or more and a row or more");
    const auto n = static_cast<int64_t>(text.size());
    check(n >= 2, "text_loss", "a text of ", n, " tokens has nothing to predict");
    NoGradGuard no_grad;
    double nats = 0;
    int64_t predicted = 0;
    const int64_t stride = window - 1;  // windows overlap by the one token each one's first predicts from
    for (int64_t first = 0; first < n - 1; first += rows * stride) {
        const int64_t count = std::min(rows, (n - 1 - first + stride - 1) / stride);
        IntTensor batch = IntTensor::full({count, window}, models::kPad);  // a short last window: padded
        int64_t tokens = 0;
        for (int64_t r = 0; r < count; ++r) {
            const int64_t start = first + r * stride, length = std::min(window, n - start);
            std::copy_n(text.data() + start, length, batch.data() + r * window);
            tokens += length - 1;
        }
        // The mean over the batch's predicted tokens (padding ignored), back to a sum.
        const Tensor loss = model.loss(IntTensor::zeros({count, 0}), batch, 0.0f);
        nats += static_cast<double>(loss.item()) * static_cast<double>(tokens);
        predicted += tokens;
    }
    TextScores result;
    result.loss = nats / static_cast<double>(predicted);
    result.tokens = predicted;
    result.units = units;
    result.unit = unit;
    return result;
}

}  // namespace seqgrad::training
