// Checkpoints. A checkpoint is a directory:
//   model.safetensors     the latest weights, a model file (text/model_file.h); metadata: the model
//                         config, both tokenizers (with a SentencePiece model's bytes) and
//                         vocabularies, the task, the step
//   best.safetensors      the same, for the weights with the best dev score so far (the task's
//                         metric, task.h: the lowest dev WER, or the lowest loss)
//   step-<N>.safetensors  with keep_checkpoints: the weights evaluated at step N (model file format),
//                         the newest keep_checkpoints of them
//   training.safetensors  the weights again, the optimizer's state (and the weight average's), and
//                         in its metadata the training options and the run's Progress (step,
//                         data position, random state, dev history): all a run needs to resume
//                         exactly where it stopped
// CheckpointDir alone knows these names in training (the model files' two come from the text
// layer, text::kModelFile and kBestFile, whose load_model reads a checkpoint without training).
// Every file is written atomically (core's files.h): an interrupted run never leaves a broken file.
// Because training.safetensors holds the weights, a process killed between the two renames resumes
// from it alone; a checkpoint written before it held them resumes only when model.safetensors is
// from the same step.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "seqgrad/core/random.h"
#include "seqgrad/core/safetensors.h"
#include "seqgrad/models/model.h"
#include "seqgrad/training/batching.h"
#include "seqgrad/training/evaluate.h"
#include "seqgrad/training/options.h"

namespace seqgrad::training {

// ---- the directory ----

// A checkpoint directory, the one place that knows the names of its files. A checkpoint is
// written in two phases (trainer.cpp): both files go to "<name>.next" (each atomically), and are
// renamed over the committed ones only once the next step shows the weights they hold train on.
class CheckpointDir {
public:
    explicit CheckpointDir(std::string path) : path_(std::move(path)) {}
    const std::string& path() const { return path_; }

    std::string model_file() const;     // model.safetensors
    std::string best_file() const;      // best.safetensors
    std::string training_file() const;  // training.safetensors
    static std::string pending(const std::string& file) { return file + ".next"; }

    // step-<step>.safetensors (the step zero-padded to 9 digits, so that names sort by step).
    std::string kept_file(int64_t step) const;
    // The kept weights, oldest first.
    std::vector<std::string> kept_files() const;
    // Removes the oldest kept weights until at most `keep` are left.
    void prune_kept(int64_t keep) const;

    bool exists() const;              // the directory
    bool has_model() const;           // model.safetensors
    bool has_training_state() const;  // training.safetensors
    // Removes what an interrupted process may have left: a pending pair that was never committed,
    // and the temporary files of an unfinished write.
    void remove_leftovers() const;
    // Renames the pending training state, then the pending model file, over the committed ones,
    // and makes the renames durable. An Error names the file that could not be renamed.
    void commit_pending() const;
    void discard_pending() const;

private:
    std::string file(const char* name) const;
    std::string path_;
};

// ---- the training state ----

// One point of the training curve.
struct HistoryEntry {
    int64_t step = 0;
    int64_t epoch = 0;      // epochs finished
    double minutes = 0;     // training time so far, all sessions
    double train_loss = 0;  // mean over the steps since the previous entry
    EvalResult dev;
};

// What a checkpoint needs beyond the weights and the optimizer to resume a run exactly.
struct Progress {
    int64_t step = 0;
    BatchStreamState stream;
    Generator::State random{};  // the model's generator (dropout, teacher forcing)
    double seconds = 0;         // training time, all sessions
    bool has_best = false;
    EvalResult best_dev;
    EvalResult last_dev;
    std::vector<HistoryEntry> history;
    double loss_sum = 0;  // since the last history entry
    int64_t loss_steps = 0;
    // lr_decay's state: the product of the factors applied so far, and the best dev score (the
    // task's, task.h) among the scheduled evaluations (not those at the end of a session, so that a
    // resumed run decays exactly where an uninterrupted one would).
    double lr_scale = 1.0;
    double scheduled_best = -1;  // none yet
    // A cosine that runs over the budget (no decay_steps or max_steps): its position, 0 to 1.
    double schedule_position = 0;

    std::string to_json() const;
    static Progress from_json(const std::string& text);  // Error if a required key is missing
};

// Tensors of training.safetensors named this way are the model's weights.
inline constexpr const char* kWeightsPrefix = "weights.";

// training.safetensors: the options, the progress and the named state tensors: the weights
// ("weights."), the optimizer's, and the weight average's ("average..."), stamped with the step.
void save_training_state(const std::string& path, const TrainingOptions& options, const Progress& progress,
                         const std::map<std::string, Tensor>& state);

struct TrainingState {
    TrainingOptions options;
    Progress progress;
    std::map<std::string, Tensor> optimizer;  // the optimizer's tensors
    std::map<std::string, Tensor> average;    // the weight average's ("average..."), if any
    std::map<std::string, Tensor> weights;    // the model's, by state_dict name (empty in older files)
};
TrainingState load_training_state(const std::string& path);

// ---- averaging ----

// A checkpoint directory `out` (created; an Error if it holds a checkpoint already) with the mean
// of `files` (text::average_models) as model.safetensors and, when checkpoint directory
// `training_from` has a training state, training.safetensors: that state (options, progress,
// optimizer) with the mean as its weights (and as its moving average of the weights, if it keeps
// one), so that `seqgrad train --resume out` continues the run from the averaged weights.
void write_averaged_checkpoint(const std::vector<std::string>& files, const std::string& training_from,
                               const std::string& out);

}  // namespace seqgrad::training
