// Training a model on a task, evaluating it, and resuming a run exactly where it stopped.
//
// A run reads its task's train split, builds the vocabularies from it, and trains with Adam
// (the Noam warm-up schedule or a constant rate, either one decayed when dev WER stops improving),
// gradient-norm clipping, label smoothing, dropout
// and teacher forcing, on batches bucketed by length. After each epoch (or every
// eval_every_steps) it decodes the dev split greedily, reports WER and PER, and keeps the weights
// with the best dev WER (or the best moving average of them). It stops at the first budget reached (epochs, minutes, steps), on a stop
// request (Ctrl-C), or when the loss stops being finite; in every case but the last it writes a
// checkpoint first (checkpoint.h).
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "seqgrad/models/data.h"
#include "seqgrad/models/decoding.h"
#include "seqgrad/models/model.h"

namespace seqgrad::models {

struct TrainingOptions {
    // The task: "g2p" (read from `dictionary`) or a synthetic one ("copy", "reverse", "sort").
    std::string task = "g2p";
    std::string dictionary = kCmudictPath;
    SyntheticOptions synthetic;

    BatchOptions batches;
    std::string schedule = "noam";  // "noam": lr * d^-0.5 * min(t^-0.5, t * warmup^-1.5); or "constant"
    double lr = 1.0;                // the constant rate, or Noam's factor
    // After a dev evaluation that does not improve on the best dev WER so far, the rate (either
    // schedule) is multiplied by this for the rest of the run; 1 never changes it.
    double lr_decay = 1.0;
    // Above 0: keep an exponential moving average of the weights with this decay (nn::WeightAverage),
    // and evaluate and keep as best the averaged weights instead of the raw ones.
    double average_decay = 0.0;
    int64_t warmup_steps = 1000;
    double beta1 = 0.9;
    double beta2 = 0.98;
    double eps = 1e-9;
    double weight_decay = 0.0;
    float clip_norm = 1.0f;  // 0 turns clipping off
    float label_smoothing = 0.1f;
    float teacher_forcing = 1.0f;

    // Budgets (0 = no limit; at least one must be set). minutes counts this session only.
    int64_t epochs = 0;
    double minutes = 0;
    int64_t max_steps = 0;

    int64_t eval_every_steps = 0;  // 0: after each epoch
    int64_t eval_max_len = 40;     // output tokens when decoding the dev split
    int64_t dev_limit = 0;         // evaluate on the first N dev words only (0: all)
    int64_t log_every = 100;       // steps between plain log lines
    uint64_t seed = 1;

    std::string to_json() const;
    // Unknown keys are an error (a typo in a config file).
    static TrainingOptions from_json(const std::string& text);
    // Throws an Error naming the first option out of range (train() and resume() call it).
    void validate() const;
};

struct EvalResult {
    double wer = 0;
    double per = 0;
    int64_t words = 0;
};

// One point of the training curve.
struct HistoryEntry {
    int64_t step = 0;
    int64_t epoch = 0;          // epochs finished
    double minutes = 0;         // training time so far, all sessions
    double train_loss = 0;      // mean over the steps since the previous entry
    EvalResult dev;
};

// What the trainer tells its listener (the program draws a progress bar or log lines from it).
struct TrainingEvent {
    enum class Kind { step, evaluation, checkpoint, message } kind = Kind::step;
    int64_t step = 0;
    int64_t epoch = 0;
    int64_t batches_in_epoch = 0;
    int64_t batch_in_epoch = 0;
    double loss = 0;                // this step's loss
    double learning_rate = 0;       // the rate this step used
    double tokens_per_second = 0;   // target tokens, over recent steps
    double elapsed_seconds = 0;     // this session
    double budget_fraction = -1;    // how much of the budget is used, if known (0..1)
    EvalResult eval;
    std::string text;
};
using TrainingListener = std::function<void(const TrainingEvent&)>;

struct TrainingResult {
    int64_t steps = 0;
    int64_t epochs = 0;            // epochs finished
    double minutes = 0;            // all sessions
    EvalResult best_dev;
    EvalResult last_dev;
    std::string stop_reason;       // "budget", "interrupted" or "diverged"
    std::vector<HistoryEntry> history;
};

// Starts a run in out_dir (created if needed; an existing checkpoint there is an error: resume it
// or choose another directory). model_config's vocabulary sizes are filled in from the data.
TrainingResult train(const ModelConfig& model_config, const TrainingOptions& options, const std::string& out_dir,
                     const TrainingListener& listener = {}, const std::atomic<bool>* stop_requested = nullptr);

// Continues the run in `dir` with the same options, except the budgets given here (any of them
// non-zero replaces all of the stored ones).
TrainingResult resume(const std::string& dir, int64_t epochs, double minutes, int64_t max_steps,
                      const TrainingListener& listener = {}, const std::atomic<bool>* stop_requested = nullptr);

// Greedy or beam decoding of `examples` and their WER and PER against all their references.
// Returns the predictions too (as target symbols), in the examples' order, when asked.
EvalResult evaluate(Seq2SeqModel& model, const std::vector<Example>& examples, const Vocabulary& source_vocab,
                    const Vocabulary& target_vocab, const DecodeOptions& decode_options, int64_t batch_size = 256,
                    std::vector<std::vector<std::string>>* predictions = nullptr);

// The source symbols a task reads from a string typed by a user (g2p: the lower-cased characters).
std::vector<std::string> source_symbols(const std::string& task, const std::string& text);

// The dataset a run's options name (the g2p dictionary, or the synthetic task from options.seed).
Dataset load_dataset(const TrainingOptions& options);

}  // namespace seqgrad::models
