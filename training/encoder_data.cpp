// The data of an encoder's tasks: masked windows of a text, and labelled texts as rows
// (encoder_data.h).
#include "seqgrad/training/encoder_data.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "seqgrad/core/autograd.h"
#include "seqgrad/core/error.h"
#include "seqgrad/core/hash.h"
#include "seqgrad/core/ops.h"
#include "seqgrad/text/encoder_input.h"
#include "seqgrad/training/text_data.h"

namespace seqgrad::training {

using models::kCls;
using models::kFirstEncoderSymbol;
using models::kMask;
using models::kPad;
using models::kSep;

namespace {

models::EncoderModel& encoder_of(models::Model& model, const char* task) {
    auto* encoder = dynamic_cast<models::EncoderModel*>(&model);
    check(encoder != nullptr, task, "the model \"", model.config().model, "\" is not an encoder");
    return *encoder;
}

// A generator for draw `k` of a stream seeded by `seed`.
Generator draw(uint64_t seed, uint64_t k) {
    return Generator(splitmix64_mix(seed ^ splitmix64_mix(kSplitMixGamma * (k + 1))));
}

// The rows of a masked text: `<cls>`, the window, `<sep>`, then padding to `row_length`; the labels
// of the masked positions.
void masked_row(std::span<const int32_t> window, int64_t row_length, int64_t vocab, double rate, Generator& gen,
                int64_t* row, int64_t* labels) {
    const auto n = static_cast<int64_t>(window.size());
    std::fill_n(row, row_length, kPad);
    std::fill_n(labels, row_length, kPad);
    row[0] = kCls;
    std::copy(window.begin(), window.end(), row + 1);
    row[n + 1] = kSep;
    mask_tokens({row + 1, static_cast<size_t>(n)}, {labels + 1, static_cast<size_t>(n)}, rate, vocab, gen);
}

}  // namespace

void mask_tokens(std::span<int64_t> row, std::span<int64_t> labels, double rate, int64_t vocab, Generator& gen) {
    check(row.size() == labels.size() && !row.empty(), "mask_tokens", "needs a row and its labels, of one length");
    check(vocab > kFirstEncoderSymbol, "mask_tokens", "an encoder's vocabulary of ", vocab, " ids has no symbols");
    const auto masks = [&](size_t i) {
        labels[i] = row[i];
        const float what = gen.uniform();
        if (what < 0.8f) row[i] = kMask;
        else if (what < 0.9f)
            row[i] = kFirstEncoderSymbol +
                     static_cast<int64_t>(gen.below(static_cast<uint64_t>(vocab - kFirstEncoderSymbol)));
    };
    bool any = false;
    for (size_t i = 0; i < row.size(); ++i)
        if (gen.uniform() < rate) {
            masks(i);
            any = true;
        }
    if (!any) masks(static_cast<size_t>(gen.below(row.size())));
}

// ---- mlm ----

MaskedTextData::MaskedTextData() : TaskData(masked_evaluator()) {}

MaskedTextData prepare_masked_text(const TrainingOptions& options, const DataRequest& request) {
    TextData text = prepare_text(options, request, /*encoder=*/true);
    MaskedTextData data;
    static_cast<text::TextSides&>(data) = static_cast<const text::TextSides&>(text);
    data.report = std::move(text.report);
    data.train_text = std::move(text.train_text);
    data.dev_text = std::move(text.dev_text);
    data.mask_rate = options.mask_rate;
    data.seed = options.seed;
    data.report.push_back(detail::concat("masked: ", options.mask_rate * 100,
                                         "% of the positions (80% <mask>, 10% a random symbol, 10% unchanged)"));
    return data;
}

std::unique_ptr<BatchSource> MaskedTextData::batches(const TrainingOptions& options, int64_t longest) {
    check(options.batches.max_sentences > 0, "mlm",
          "a text's batches are windows: give batch_sentences (the rows of a step, --batch-size)");
    return std::make_unique<MaskedWindowStream>(std::move(train_text), longest, options.batches.max_sentences,
                                                target_vocab.size(), mask_rate, seed);
}

Tensor MaskedTextData::loss(models::Model& model, const Batch& batch, float) const {
    models::EncoderModel& encoder = encoder_of(model, "mlm");
    return encoder.mlm_loss(encoder.forward(batch.src), batch.labels);
}

void MaskedTextData::fit_config(models::ModelConfig& config) const { models::set_classes(config, 0); }

EvalResult MaskedTextData::evaluate(models::Model& model, Split, int64_t, int64_t longest,
                                    const models::DecodingOptions&, std::vector<std::vector<std::string>>*) const {
    // One fixed seed, the run's, apart from the training rows' draws.
    return masked_text_loss(model, dev_text, longest, 32, mask_rate, splitmix64_mix(seed ^ 0x6d61736b));
}

MaskedWindowStream::MaskedWindowStream(std::vector<int32_t> tokens, int64_t row_length, int64_t rows, int64_t vocab,
                                       double rate, uint64_t seed)
    : tokens_(std::move(tokens)), row_length_(row_length), rows_(rows), vocab_(vocab), rate_(rate), seed_(seed) {
    check(row_length >= 3 && rows >= 1, "MaskedWindowStream", "needs rows of 3 tokens or more and a row or more, got ",
          row_length, " and ", rows);
    check(static_cast<int64_t>(tokens_.size()) >= row_length - 2, "MaskedWindowStream", "a text of ", tokens_.size(),
          " tokens holds no window of ", row_length - 2);
    const int64_t per_batch = rows_ * (row_length_ - 2);
    batches_in_epoch_ = std::max<int64_t>(1, (static_cast<int64_t>(tokens_.size()) + per_batch - 1) / per_batch);
}

void MaskedWindowStream::restore(const BatchStreamState& state) {
    check(state.epoch >= 0 && state.next_batch >= 0 && state.next_batch < batches_in_epoch_, "MaskedWindowStream",
          "batch ", state.next_batch, " of epoch ", state.epoch, " is not one of its ", batches_in_epoch_);
    state_ = state;
}

Batch MaskedWindowStream::next() {
    const auto k = static_cast<uint64_t>(state_.epoch * batches_in_epoch_ + state_.next_batch);
    Generator gen = draw(seed_, k);
    const int64_t window = row_length_ - 2;
    const auto starts = static_cast<uint64_t>(static_cast<int64_t>(tokens_.size()) - window + 1);
    Batch batch;
    batch.src = IntTensor::zeros({rows_, row_length_});
    batch.tgt = IntTensor::zeros({rows_, 0});
    batch.labels = IntTensor::zeros({rows_, row_length_});
    for (int64_t r = 0; r < rows_; ++r) {
        const auto start = static_cast<int64_t>(gen.below(starts));
        masked_row({tokens_.data() + start, static_cast<size_t>(window)}, row_length_, vocab_, rate_, gen,
                   batch.src.data() + r * row_length_, batch.labels.data() + r * row_length_);
        batch.example_index.push_back(start);
    }
    batch.source_tokens = batch.src.numel();
    for (int64_t i = 0; i < batch.labels.numel(); ++i) batch.target_tokens += batch.labels.data()[i] != kPad ? 1 : 0;
    if (++state_.next_batch == batches_in_epoch_) {
        state_.next_batch = 0;
        ++state_.epoch;
    }
    return batch;
}

MaskedScores masked_text_loss(models::Model& model, const std::vector<int32_t>& text, int64_t row_length, int64_t rows,
                              double rate, uint64_t seed) {
    check(row_length >= 3 && rows >= 1, "masked_text_loss", "needs rows of 3 tokens or more and a row or more");
    check(!text.empty(), "masked_text_loss", "an empty text has nothing to predict");
    models::EncoderModel& encoder = encoder_of(model, "masked_text_loss");
    const auto n = static_cast<int64_t>(text.size());
    const int64_t window = row_length - 2;
    const int64_t vocab = model.config().vocab;
    NoGradGuard no_grad;
    Generator gen(seed);
    double nats = 0;
    int64_t masked = 0, right = 0;
    for (int64_t first = 0; first < n; first += rows * window) {
        const int64_t count = std::min(rows, (n - first + window - 1) / window);
        // Rows as long as the batch's first window (only the text's last may be shorter).
        const int64_t width = std::min(window, n - first) + 2;
        IntTensor tokens = IntTensor::zeros({count, width});
        IntTensor labels = IntTensor::zeros({count, width});
        for (int64_t r = 0; r < count; ++r) {
            const int64_t start = first + r * window, length = std::min(window, n - start);
            masked_row({text.data() + start, static_cast<size_t>(length)}, width, vocab, rate, gen,
                       tokens.data() + r * width, labels.data() + r * width);
        }
        const Tensor logits = encoder.mlm_logits(encoder.forward(tokens));  // [count, width, vocab]
        int64_t batch_masked = 0;
        for (int64_t i = 0; i < labels.numel(); ++i) {
            const int64_t label = labels.data()[i];
            if (label == kPad) continue;
            ++batch_masked;
            const float* row = logits.data() + i * vocab;
            right += std::max_element(row, row + vocab) - row == label ? 1 : 0;
        }
        nats += static_cast<double>(cross_entropy(logits, labels, kPad).item()) * static_cast<double>(batch_masked);
        masked += batch_masked;
    }
    MaskedScores scores;
    scores.loss = nats / static_cast<double>(masked);
    scores.accuracy = 100.0 * static_cast<double>(right) / static_cast<double>(masked);
    scores.masked = masked;
    return scores;
}

// ---- classify ----

ClassifyData::ClassifyData() : TaskData(class_evaluator()) {}

const EncodedLabelled& ClassifyData::split(Split split) const {
    return split == Split::train ? train : split == Split::dev ? dev : test;
}

namespace {

// Training batches of labelled rows, bucketed by length as pairs are (plan_batches); epoch e from
// (seed, e) alone. With `balance`, an epoch is as many rows as the data has, each of a class drawn
// uniformly and then a text of that class.
class LabelledStream : public BatchSource {
public:
    LabelledStream(EncodedLabelled data, int32_t classes, BatchOptions options, bool balance, uint64_t seed)
        : data_(std::move(data)), options_(options), balance_(balance), seed_(seed) {
        check(data_.size() > 0, "classify", "no labelled texts to train on");
        by_class_.resize(static_cast<size_t>(classes));
        for (int64_t i = 0; i < data_.size(); ++i)
            by_class_[static_cast<size_t>(data_.labels[static_cast<size_t>(i)])].push_back(i);
        std::erase_if(by_class_, [](const std::vector<int64_t>& rows) { return rows.empty(); });
        plan();
    }
    Batch next() override {
        const std::vector<int64_t>& rows = plan_[static_cast<size_t>(state_.next_batch)];
        Batch batch = make_batch(epoch_rows_, rows);
        const auto size = static_cast<int64_t>(rows.size());
        batch.tgt = IntTensor::zeros({size, 0});
        batch.labels = IntTensor::zeros({size});
        for (int64_t b = 0; b < size; ++b)
            batch.labels.data()[b] = data_.labels[static_cast<size_t>(batch.example_index[static_cast<size_t>(b)])];
        batch.target_tokens = size;
        if (++state_.next_batch == batches_in_epoch()) {
            ++state_.epoch;
            state_.next_batch = 0;
            plan();
        }
        return batch;
    }
    BatchStreamState state() const override { return state_; }
    void restore(const BatchStreamState& state) override {
        const BatchStreamState before = state_;
        state_ = state;
        plan();
        if (state.next_batch < 0 || state.next_batch >= batches_in_epoch()) {
            state_ = before;
            plan();
            throw Error(detail::concat("classify: batch ", state.next_batch, " of epoch ", state.epoch,
                                       " is not one of its ", plan_.size()));
        }
    }
    int64_t batches_in_epoch() const override { return static_cast<int64_t>(plan_.size()); }

private:
    // The current epoch's rows (each row's index the text's place in data_) and their batches.
    void plan() {
        Generator gen(splitmix64_mix(seed_ ^ splitmix64_mix(kSplitMixGamma + static_cast<uint64_t>(state_.epoch))));
        epoch_rows_ = EncodedPairs();
        const std::vector<int32_t> none;
        const auto add = [&](int64_t i) { epoch_rows_.add(data_.rows.source(i), none, i); };
        if (balance_) {
            for (int64_t n = 0; n < data_.size(); ++n) {
                const std::vector<int64_t>& rows = by_class_[gen.below(by_class_.size())];
                add(rows[gen.below(rows.size())]);
            }
        } else {
            for (int64_t i = 0; i < data_.size(); ++i) add(i);
        }
        plan_ = plan_batches(epoch_rows_, options_, gen);
    }

    EncodedLabelled data_;
    BatchOptions options_;
    bool balance_;
    uint64_t seed_;
    std::vector<std::vector<int64_t>> by_class_;  // the rows of each class that has any
    EncodedPairs epoch_rows_;
    std::vector<std::vector<int64_t>> plan_;
    BatchStreamState state_;
};

}  // namespace

std::unique_ptr<BatchSource> ClassifyData::batches(const TrainingOptions& options, int64_t) {
    return std::make_unique<LabelledStream>(std::move(train), static_cast<int32_t>(labels.size()), options.batches,
                                            balance == "sample", options.seed);
}

Tensor ClassifyData::loss(models::Model& model, const Batch& batch, float) const {
    models::EncoderModel& encoder = encoder_of(model, "classify");
    const IntTensor segments = pairs ? models::encoder_segments(batch.src) : IntTensor{};
    return encoder.class_loss(encoder.forward_first(batch.src, segments), batch.labels);
}

void ClassifyData::fit_config(models::ModelConfig& config) const {
    models::set_classes(config, static_cast<int64_t>(labels.size()));
}

std::vector<int32_t> classify(models::Model& model, const EncodedLabelled& texts, bool pairs, int64_t rows,
                              std::vector<std::vector<float>>* probabilities) {
    models::EncoderModel& encoder = encoder_of(model, "classify");
    check(encoder.classifies(), "classify",
          "the model has no classifier (n_classes 0): it was not trained to classify");
    const int64_t classes = encoder.classes();
    NoGradGuard no_grad;
    std::vector<int32_t> predicted(static_cast<size_t>(texts.size()));
    if (probabilities) probabilities->assign(static_cast<size_t>(texts.size()), {});
    BatchOptions options;
    options.max_sentences = rows;
    for (const Batch& batch : make_eval_batches(texts.rows, options)) {
        const IntTensor segments = pairs ? models::encoder_segments(batch.src) : IntTensor{};
        const Tensor logits = encoder.class_logits(encoder.forward_first(batch.src, segments));
        const Tensor p = probabilities ? softmax(logits, -1) : Tensor{};
        for (size_t b = 0; b < batch.example_index.size(); ++b) {
            const auto index = static_cast<size_t>(batch.example_index[b]);
            const float* row = logits.data() + static_cast<int64_t>(b) * classes;
            predicted[index] = static_cast<int32_t>(std::max_element(row, row + classes) - row);
            if (probabilities)
                (*probabilities)[index].assign(p.data() + static_cast<int64_t>(b) * classes,
                                               p.data() + static_cast<int64_t>(b + 1) * classes);
        }
    }
    return predicted;
}

ClassificationScores classification_scores_of(models::Model& model, const EncodedLabelled& texts, bool pairs,
                                              int64_t classes) {
    const std::vector<int32_t> predicted = classify(model, texts, pairs, 64);
    return classification_scores(texts.labels, predicted, static_cast<int32_t>(classes));
}

EvalResult ClassifyData::evaluate(models::Model& model, Split which, int64_t limit, int64_t,
                                  const models::DecodingOptions&, std::vector<std::vector<std::string>>*) const {
    const EncodedLabelled& texts = split(which);
    check(texts.size() > 0, "classify", "the ", split_name(which), " split has no texts");
    EncodedLabelled first;
    const EncodedLabelled* scored = &texts;
    if (limit > 0 && limit < texts.size()) {
        for (int64_t i = 0; i < limit; ++i) first.rows.add(texts.rows.source(i), {}, i);
        first.labels.assign(texts.labels.begin(), texts.labels.begin() + limit);
        scored = &first;
    }
    const ClassificationScores scores =
        classification_scores_of(model, *scored, pairs, static_cast<int64_t>(labels.size()));
    ClassifierScores result;
    result.accuracy = 100.0 * scores.accuracy;
    result.macro_f1 = 100.0 * scores.macro_f1;
    result.texts = scores.examples;
    return result;
}

EncodedLabelled encode_labelled(const LabelledTexts& texts, const text::Tokenizer& tokenizer,
                                const text::Vocabulary& vocab, int64_t max_length) {
    EncodedLabelled out;
    const bool pairs = !texts.second_texts.empty();
    std::vector<int32_t> row32;
    const std::vector<int32_t> none;
    for (int64_t i = 0; i < texts.size(); ++i) {
        const auto at = static_cast<size_t>(i);
        const std::vector<int64_t> first = text::encoder_ids(texts.texts[at], tokenizer, vocab);
        std::vector<int64_t> second;
        if (pairs) second = text::encoder_ids(texts.second_texts[at], tokenizer, vocab);
        bool truncated = false;
        const std::vector<int64_t> row =
            text::encoder_row(first, pairs ? std::optional<std::span<const int64_t>>(second) : std::nullopt, max_length,
                              &truncated);
        row32.assign(row.begin(), row.end());
        out.rows.add(row32, none, i);
        out.truncated += truncated ? 1 : 0;
    }
    out.labels = texts.labels;
    return out;
}

ClassifyData prepare_classify(const TrainingOptions& options, const DataRequest& request) {
    const char* op = "classify";
    check(options.train_files.size() == 1, op, "classify needs \"train\": one file of labelled texts, got ",
          options.train_files.size(), " files");
    check(options.dev_files.size() <= 1 && options.test_files.size() <= 1, op,
          "\"dev\" and \"test\" are one file of labelled texts each");
    LabelledFiles files;
    files.train = options.train_files.front();
    if (!options.dev_files.empty()) files.dev = options.dev_files.front();
    if (!options.test_files.empty()) files.test = options.test_files.front();
    files.skip_invalid = options.skip_invalid;
    LabelledData read = read_labelled(files);

    ClassifyData data;
    data.report = std::move(read.report);
    data.pairs = read.pairs;
    data.balance = options.class_balance;
    data.labels = read.labels.names();
    if (request.target_tokenizer) {
        data.target_tokenizer = *request.target_tokenizer;
    } else {
        std::string joined;  // the training texts, a line each, for a SentencePiece model to learn from
        if (options.tokens == "sentencepiece" && options.spm_model.empty())
            for (int64_t i = 0; i < read.train.size(); ++i) {
                joined += read.train.texts[static_cast<size_t>(i)] + "\n";
                if (read.pairs) joined += read.train.second_texts[static_cast<size_t>(i)] + "\n";
            }
        data.target_tokenizer = text_tokenizer(options, joined, files.train);
    }
    if (request.target_vocab) {
        data.target_vocab = *request.target_vocab;
        check(data.target_vocab.for_encoder(), op,
              "the vocabulary given is not an encoder's (<cls>, <sep>, <mask> after the four special tokens)");
    } else {
        std::unordered_map<std::string, int64_t> counts;
        const auto count = [&](const std::string& text) {
            data.target_tokenizer.each_symbol(text, [&](std::string_view symbol) { ++counts[std::string(symbol)]; });
        };
        for (int64_t i = 0; i < read.train.size(); ++i) {
            count(read.train.texts[static_cast<size_t>(i)]);
            if (read.pairs) count(read.train.second_texts[static_cast<size_t>(i)]);
        }
        data.target_vocab = vocabulary_of(std::move(counts), options, /*encoder=*/true, op, files.train + ": a text");
    }
    const int64_t longest = request.max_source_length;
    if (request.train) data.train = encode_labelled(read.train, data.target_tokenizer, data.target_vocab, longest);
    data.dev = encode_labelled(read.dev, data.target_tokenizer, data.target_vocab, longest);
    if (request.test) data.test = encode_labelled(read.test, data.target_tokenizer, data.target_vocab, longest);
    const int64_t truncated = data.train.truncated + data.dev.truncated + data.test.truncated;
    data.report.push_back(detail::concat(
        "vocabulary: ", data.target_vocab.size(), " symbols (", data.target_tokenizer.describe(), "); ",
        data.labels.size(), " classes",
        truncated > 0 ? detail::concat("; ", truncated, " rows cut to ", longest, " tokens") : std::string(),
        options.class_balance == "sample" ? "; classes drawn uniformly" : ""));
    return data;
}

}  // namespace seqgrad::training
