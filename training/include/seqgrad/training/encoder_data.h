// The data of an encoder's two tasks (task.h), in rows as the encoder reads them
// (text/encoder_input.h: `<cls> a <sep>`, or `<cls> a <sep> b <sep>` for a pair):
//
// - "mlm", a masked language model: a text read as the text task reads it (text_data.h), in an
//   encoder's vocabulary, cut into windows of the model's longest row less its <cls> and <sep>.
//   In each window a share of the positions (mask_rate, BERT's 15%) is chosen to be predicted: 80%
//   of them read as <mask>, 10% as a random symbol, 10% as they are. Training windows start at
//   positions, and are masked, from a generator seeded by (seed, batch) alone, so a resumed run
//   draws the same; the validation text is read whole, in consecutive windows masked from one fixed
//   seed, so that every evaluation scores the same masks. Judged by the masked positions' loss.
// - "classify": labelled texts or pairs of texts (labelled.h), tokenized as the options say, each a
//   row of at most the model's longest (the longer text cut first). Training batches are bucketed
//   by length as pairs are; with class_balance "sample" each row's class is drawn uniformly, then a
//   text of it. Judged by accuracy; macro-F1, each class's measures and the confusion matrix come
//   with it (classification_metrics.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "seqgrad/models/model.h"
#include "seqgrad/training/batching.h"
#include "seqgrad/training/classification_metrics.h"
#include "seqgrad/training/data.h"
#include "seqgrad/training/evaluate.h"
#include "seqgrad/training/labelled.h"
#include "seqgrad/training/options.h"
#include "seqgrad/training/task.h"

namespace seqgrad::training {

// ---- mlm ----

// Masks `row` in place as BERT does: each position with probability `rate` (one at random if none
// was drawn) gets its token in `labels`, then reads as <mask> (80%), a random symbol of the
// vocabulary's own (10%), or itself (10%). Positions not chosen keep <pad> in `labels`.
void mask_tokens(std::span<int64_t> row, std::span<int64_t> labels, double rate, int64_t vocab, Generator& gen);

// The data of a masked language model: the texts as ids of an encoder's vocabulary.
class MaskedTextData : public TaskData {
public:
    MaskedTextData();
    std::vector<int32_t> train_text, dev_text;
    double mask_rate = 0.15;
    uint64_t seed = 1;

    bool has_train_and_dev() const override { return !train_text.empty() && !dev_text.empty(); }
    std::string training_size() const override { return std::to_string(train_text.size()); }
    // Windows of `longest` - 2 tokens, batch_sentences rows a step, masked (MaskedWindowStream).
    std::unique_ptr<BatchSource> batches(const TrainingOptions& options, int64_t longest) override;
    // The masked positions' cross-entropy (models::EncoderModel::mlm_loss).
    Tensor loss(models::Model& model, const Batch& batch, float label_smoothing) const override;
    // No classifier: a classifier trained from this model (init_from) gets its own.
    void fit_config(models::ModelConfig& config) const override;
    // The whole validation text (masked_text_loss).
    EvalResult evaluate(models::Model& model, Split split, int64_t limit, int64_t longest,
                        const models::DecodingOptions& decoding,
                        std::vector<std::vector<std::string>>* predictions = nullptr) const override;
};

// A masked language model's data, read as prepare_text reads a text, into an encoder's vocabulary.
MaskedTextData prepare_masked_text(const TrainingOptions& options, const DataRequest& request);

// Training rows of a text: batch k holds `rows` rows `<cls> window <sep>` of `row_length` tokens,
// the windows at start positions uniform over the text, masked by mask_tokens; both from a
// generator seeded by (seed, k) alone. An epoch covers the text's tokens once.
class MaskedWindowStream : public BatchSource {
public:
    MaskedWindowStream(std::vector<int32_t> tokens, int64_t row_length, int64_t rows, int64_t vocab, double rate,
                       uint64_t seed);

    Batch next() override;
    BatchStreamState state() const override { return state_; }
    void restore(const BatchStreamState& state) override;
    int64_t batches_in_epoch() const override { return batches_in_epoch_; }

private:
    std::vector<int32_t> tokens_;
    int64_t row_length_, rows_, vocab_;
    double rate_;
    uint64_t seed_;
    int64_t batches_in_epoch_;
    BatchStreamState state_;
};

// The masked language model's loss and accuracy over the whole of `text`: consecutive windows of
// `row_length` - 2 tokens (the last may be shorter), `rows` at a time, masked by mask_tokens from
// a generator seeded by `seed` (the same masks at every call).
MaskedScores masked_text_loss(models::Model& model, const std::vector<int32_t>& text, int64_t row_length, int64_t rows,
                              double rate, uint64_t seed);

// ---- classify ----

// Labelled texts as an encoder's rows: the source of each of `rows` is its row of ids, its index
// the text's place in the split; `labels` its class.
struct EncodedLabelled {
    EncodedPairs rows;
    std::vector<int32_t> labels;
    int64_t truncated = 0;  // rows whose texts were cut to fit

    int64_t size() const { return rows.size(); }
};

// The data of a classifier: the splits as rows, the labels (TextSides::labels, by class id).
class ClassifyData : public TaskData {
public:
    ClassifyData();
    bool pairs = false;  // pairs of texts (rows with two <sep>)
    EncodedLabelled train, dev, test;
    std::string balance = "none";  // TrainingOptions::class_balance

    bool has_train_and_dev() const override { return train.size() > 0 && dev.size() > 0; }
    std::string training_size() const override { return std::to_string(train.size()); }
    std::unique_ptr<BatchSource> batches(const TrainingOptions& options, int64_t longest) override;
    // The cross-entropy of each row's class (models::EncoderModel::class_loss).
    Tensor loss(models::Model& model, const Batch& batch, float label_smoothing) const override;
    void fit_config(models::ModelConfig& config) const override;
    EvalResult evaluate(models::Model& model, Split split, int64_t limit, int64_t longest,
                        const models::DecodingOptions& decoding,
                        std::vector<std::vector<std::string>>* predictions = nullptr) const override;
    const EncodedLabelled& split(Split split) const;
};

// The data of a classifier, read (labelled.h), tokenized (the options' tokens, or the request's
// tokenizer and vocabulary) and laid out in rows of at most request.max_source_length ids.
ClassifyData prepare_classify(const TrainingOptions& options, const DataRequest& request);

// Labelled texts as rows of at most `max_length` ids (0: no limit).
EncodedLabelled encode_labelled(const LabelledTexts& texts, const text::Tokenizer& tokenizer,
                                const text::Vocabulary& vocab, int64_t max_length);

// The classes a classifier gives `texts` (the most likely), and each class's probability if asked
// for ([texts][classes]), in batches of `rows` rows sorted by length.
std::vector<int32_t> classify(models::Model& model, const EncodedLabelled& texts, bool pairs, int64_t rows,
                              std::vector<std::vector<float>>* probabilities = nullptr);

// The scores of a classifier on `texts`: classify, then classification_scores.
ClassificationScores classification_scores_of(models::Model& model, const EncodedLabelled& texts, bool pairs,
                                              int64_t classes);

}  // namespace seqgrad::training
