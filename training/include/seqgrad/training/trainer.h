// Training a model on a task, and resuming a run exactly where it stopped.
//
// A run reads its task's train split (task.h), builds the vocabularies from it, and trains with
// Adam (the Noam warm-up schedule or a constant rate, either one decayed when the dev score stops
// improving), gradient-norm clipping, label smoothing, dropout and teacher forcing, on batches
// bucketed by length. After each epoch (or every eval_every_steps) it evaluates on the dev split
// as its task does (a task of pairs decodes greedily and reports WER and PER), and keeps the
// weights with the best dev score, the task's metric (or the best moving average of them).
// It stops at the first budget reached (epochs, minutes, steps), on a stop request (Ctrl-C), or
// when the loss stops being finite; in every case but the last it writes a checkpoint first
// (checkpoint.h).
//
// Started by mpirun as several processes (an nn::Distributed alive in each), a run trains one model
// data-parallel: every rank makes the same global batches and takes its contiguous share of each
// one's rows; the gradients and the loss are summed over the ranks, weighted by each share's
// target tokens, so the update is the one-process update (to float32 summation order) and
// clipping, label smoothing, the schedule and the weight average all see the global values.
// Rank 0 alone evaluates, calls the listener and writes checkpoints; every rank stops together
// (budget, stop request, a non-finite loss). Each rank draws its own dropout masks. Every rank
// reads the data, and on resume() the checkpoint: they must be the same files on every machine.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "seqgrad/models/model.h"
#include "seqgrad/training/checkpoint.h"
#include "seqgrad/training/evaluate.h"
#include "seqgrad/training/options.h"

namespace seqgrad::training {

// What the trainer tells its listener (the program draws a progress bar or log lines from it).
// `data` events come first: one line each about the data the run reads (sizes, where dev and test
// come from, tokenizers, unknown tokens, skipped lines).
struct TrainingEvent {
    enum class Kind { step, evaluation, checkpoint, message, data } kind = Kind::step;
    int64_t step = 0;
    int64_t epoch = 0;
    int64_t batches_in_epoch = 0;
    int64_t batch_in_epoch = 0;
    double loss = 0;               // this step's loss
    double learning_rate = 0;      // the rate this step used
    double tokens_per_second = 0;  // target tokens (an encoder: the tokens it reads), over recent steps
    double elapsed_seconds = 0;    // this session
    double budget_fraction = -1;   // how much of the budget is used, if known (0..1)
    EvalResult eval;
    std::string text;  // a message or a data line; for an evaluation, the result as its task writes it
};
using TrainingListener = std::function<void(const TrainingEvent&)>;

struct TrainingResult {
    int64_t steps = 0;
    int64_t epochs = 0;  // epochs finished
    double minutes = 0;  // all sessions
    EvalResult best_dev;
    EvalResult last_dev;
    bool has_best = false;    // best_dev holds an evaluation
    std::string stop_reason;  // "budget", "interrupted" or "diverged"
    std::vector<HistoryEntry> history;
};

// Starts a run in out_dir (created if needed; an existing checkpoint there is an error: resume it
// or choose another directory). model_config's vocabulary sizes are filled in from the data.
TrainingResult train(const models::ModelConfig& model_config, const TrainingOptions& options,
                     const std::string& out_dir, const TrainingListener& listener = {},
                     const std::atomic<bool>* stop_requested = nullptr);

// Continues the run in `dir` with the same options, except the budgets given here (any of them
// non-zero replaces all of the stored ones).
TrainingResult resume(const std::string& dir, int64_t epochs, double minutes, int64_t max_steps,
                      const TrainingListener& listener = {}, const std::atomic<bool>* stop_requested = nullptr);

}  // namespace seqgrad::training
