// A language model's data: a text, read whole (plain or gzip), split into a training text and a
// validation text (the last 10% unless a file is given, nanoGPT's rule), tokenized (characters,
// bytes or SentencePiece pieces), counted into a vocabulary and encoded as one stream of ids. The
// task "text" (task.h) reads its data here; training takes windows of the stream at positions
// drawn from the run's seed (WindowStream), and evaluation reads the whole validation text.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "seqgrad/models/model.h"
#include "seqgrad/text/tokenizer.h"
#include "seqgrad/training/batching.h"
#include "seqgrad/training/data.h"
#include "seqgrad/training/evaluate.h"
#include "seqgrad/training/options.h"
#include "seqgrad/training/task.h"
#include "seqgrad/text/tokenizer.h"

namespace seqgrad::training {

// The tokenizer options.tokens names ("char", "byte", "sentencepiece": options.spm_model, or a
// model trained on `training_text`'s lines, whose errors name `what`, else options.text).
text::Tokenizer text_tokenizer(const TrainingOptions& options, const std::string& training_text,
                               const std::string& what = "");

// The vocabulary of the symbols counted in a task's training texts: those seen options.min_count
// times, at most options.max_vocab of them, <unk> left out; an encoder's has its three special tokens
// too. A special token counted as a symbol is an Error: "`op`: `where` holds the special token ...".
text::Vocabulary vocabulary_of(std::unordered_map<std::string, int64_t> counts, const TrainingOptions& options,
                               bool encoder, const char* op, const std::string& where);

// The data of a text task: the training and validation texts as ids (of the target side's
// vocabulary: a language model's one side; the source side stays empty), and the validation text's
// length in the unit its bits are counted per. Judged by the loss over the whole validation text.
class TextData : public TaskData {
public:
    TextData();
    std::vector<int32_t> train_text, dev_text;
    int64_t dev_units = 0;
    std::string unit;  // "character" or "byte"

    bool has_train_and_dev() const override { return !train_text.empty() && !dev_text.empty(); }
    std::string training_size() const override { return std::to_string(train_text.size()); }
    // Windows of the training text (WindowStream) of `longest` + 1 tokens, batch_sentences a step.
    std::unique_ptr<BatchSource> batches(const TrainingOptions& options, int64_t longest) override;
    // The loss over the whole validation text (text_loss), in windows of `longest` + 1 tokens.
    EvalResult evaluate(models::Model& model, Split split, int64_t limit, int64_t longest,
                        const models::DecodingOptions& decoding,
                        std::vector<std::vector<std::string>>* predictions = nullptr) const override;
};

// The data of a text task, read as the options say, with the tokenizer as its target side. Errors
// name the file: unreadable, invalid UTF-8 (with its byte offset; bytes are read as they are with
// "byte" tokens), empty, or too short for one window of `request.max_target_length` + 1 tokens (the
// model's context, when it is known). With `encoder`, the vocabulary is an encoder's
// (Vocabulary::for_encoder), for a masked language model (encoder_data.h).
TextData prepare_text(const TrainingOptions& options, const DataRequest& request, bool encoder = false);

// A file's text as a language model with these tokenizer and vocabulary reads it (`seqgrad eval
// --text`): its ids, and its length in the unit bits are counted per.
struct EncodedText {
    std::vector<int32_t> ids;
    int64_t units = 0;
    std::string unit;  // "character" or "byte"
};
EncodedText encode_text(const std::string& path, const text::Tokenizer& tokenizer, const text::Vocabulary& vocab);

// Training windows of a text: each batch is `rows` windows of `window` tokens (a model's context
// plus the one token each window's last position predicts), at start positions uniform over the
// text. Batch k's positions come from a generator seeded by (seed, k) alone, so a stream restored
// at any batch goes on exactly as it would have. An epoch is as many batches as cover the text
// once, in tokens predicted.
class WindowStream : public BatchSource {
public:
    WindowStream(std::vector<int32_t> tokens, int64_t window, int64_t rows, uint64_t seed);

    Batch next() override;
    BatchStreamState state() const override { return state_; }
    void restore(const BatchStreamState& state) override;
    int64_t batches_in_epoch() const override { return batches_in_epoch_; }

private:
    std::vector<int32_t> tokens_;
    int64_t window_, rows_;
    uint64_t seed_;
    int64_t batches_in_epoch_;
    BatchStreamState state_;
};

// The model's mean loss (nats per token) over every token of `text` but the first, each predicted
// from the tokens before it in its window: windows of `window` tokens that overlap by one, `rows`
// at a time; the last may be shorter. With it the perplexity and the bits per unit (`units` of
// `unit`: the text's characters or bytes).
TextScores text_loss(models::Model& model, const std::vector<int32_t>& text, int64_t window, int64_t rows,
                     int64_t units, const std::string& unit);

}  // namespace seqgrad::training
