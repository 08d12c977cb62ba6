// The tasks a run trains on, registered in one place (task.cpp) as the models are (models'
// registry.h). A task is an object: it checks the options it reads, says whether it trains a
// sequence-to-sequence model or a language model, and prepares its data, which gives the run its
// training batches and evaluates the model on a split; the task's evaluator (evaluate.h) says what
// the dev metric is and how a result is written. The trainer, checkpoints, `seqgrad train --task`
// and `seqgrad eval` ask the task, never its name.
//
// Adding a task is a class (a PairsTask, data.h, when it reads pairs through the pipeline; a Task
// with its own TaskData otherwise) and one line in task.cpp's list.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "seqgrad/models/model.h"
#include "seqgrad/models/registry.h"
#include "seqgrad/models/search.h"
#include "seqgrad/text/tokenizer.h"
#include "seqgrad/training/dataset.h"
#include "seqgrad/training/evaluate.h"
#include "seqgrad/training/options.h"

namespace seqgrad::training {

class BatchSource;
struct Batch;
struct DataRequest;

// The data a run trains and evaluates on, as its task reads it, with the tokenizers and
// vocabularies it was read with (a language model's one side is the target).
class TaskData : public text::TextSides {
public:
    explicit TaskData(std::unique_ptr<Evaluator> evaluator) : evaluator_(std::move(evaluator)) {}
    virtual ~TaskData() = default;
    TaskData(TaskData&&) = default;
    TaskData& operator=(TaskData&&) = default;

    // What a run's start line reports: where each split came from and its size, unknown tokens,
    // skipped lines. One line each.
    std::vector<std::string> report;

    // The task's dev metric.
    const Evaluator& evaluator() const { return *evaluator_; }
    // Whether there is something to train on and to evaluate.
    virtual bool has_train_and_dev() const = 0;
    // The training split's size, for ranks to compare (every rank must read the same data).
    virtual std::string training_size() const = 0;
    // The run's training batches, which take the training split; `longest` is the model's longest
    // sequence (a language model's context).
    virtual std::unique_ptr<BatchSource> batches(const TrainingOptions& options, int64_t longest) = 0;
    // The loss of a training batch, which the trainer differentiates: the model's own (Model::loss
    // of the source and target) unless the task's data says otherwise (an encoder's heads).
    virtual Tensor loss(models::Model& model, const Batch& batch, float label_smoothing) const;
    // Sets the keys of the model's config that follow from the data beyond its vocabularies (a
    // classifier's classes). Nothing by default.
    virtual void fit_config(models::ModelConfig& config) const { (void)config; }
    // Evaluates `model` on `split` (dev or test): the first `limit` examples of pairs (0: all)
    // decoded by the search `decoding` asks for, or the whole text (`longest` tokens of context at
    // a time). The predictions (pairs) come back when asked for.
    virtual EvalResult evaluate(models::Model& model, Split split, int64_t limit, int64_t longest,
                                const models::DecodingOptions& decoding,
                                std::vector<std::vector<std::string>>* predictions = nullptr) const = 0;

private:
    std::unique_ptr<Evaluator> evaluator_;
};

class Task {
public:
    Task(std::string name, std::string description) : name_(std::move(name)), description_(std::move(description)) {}
    virtual ~Task() = default;

    const std::string& name() const { return name_; }                // the options' "task"
    const std::string& description() const { return description_; }  // one line, for help texts
    // The family of models it trains (registry.h): sequence to sequence (pairs: a source and a
    // target), a language model (a text), or an encoder (a text masked, or texts labelled).
    virtual models::Family family() const = 0;
    bool reads_source() const { return family() == models::Family::sequence_to_sequence; }
    // Errors for options this task cannot run with (its data not named).
    virtual void check(const TrainingOptions& options) const { (void)options; }
    // What messages call the run's data (a path, "the copy task"), and a short name for the
    // directory a run goes in by default (a file's stem, the task's name).
    virtual std::string data_name(const TrainingOptions& options) const = 0;
    virtual std::string short_name(const TrainingOptions& options) const { return data_name(options); }
    // The dev metric the options ask for.
    virtual std::unique_ptr<Evaluator> evaluator(const TrainingOptions& options) const = 0;
    // The whole of a run's data: read, tokenized, split and encoded as `request` asks.
    virtual std::unique_ptr<TaskData> prepare(const TrainingOptions& options, const DataRequest& request) const = 0;

private:
    std::string name_, description_;
};

// Every task, in the order help texts list them.
const std::vector<std::unique_ptr<Task>>& tasks();
// The task of that name; an Error names the known ones.
const Task& task(const std::string& name);
// "g2p, corpus, text, copy, reverse or sort"
std::string task_names();
std::vector<std::string> task_name_list();

}  // namespace seqgrad::training
