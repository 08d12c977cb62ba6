// The tasks a run trains on, registered in one place (task.cpp) as the models are (models'
// registry.h): each names its data, the tokenizers a new run reads it with, its dev metric and what
// "best" means. Adding a task is one entry; the trainer, checkpoints, `seqgrad train --task` and
// `seqgrad eval` ask this registry.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "seqgrad/models/model.h"
#include "seqgrad/models/search.h"
#include "seqgrad/text/tokenizer.h"
#include "seqgrad/training/dataset.h"
#include "seqgrad/training/evaluate.h"
#include "seqgrad/training/options.h"

namespace seqgrad::training {

// The data pipeline's (data.h, batching.h): a task names the registry's readers without pulling
// them in, so that what only needs a task's tokenizers or metric (loading a checkpoint) does not
// depend on them.
class PairSink;
class Problems;
class BatchSource;
struct DataRequest;
struct TrainingData;

struct Task {
    std::string name;         // the options' "task"
    std::string description;  // one line, for help texts
    // Whether it trains a sequence-to-sequence model (pairs: a source and a target) or a language
    // model (a text).
    bool reads_source = true;
    // The tokenizers of a new run, (source, target); a checkpoint brings its own. Pairs only.
    std::function<std::pair<text::Tokenizer, text::Tokenizer>(const TrainingOptions&)> tokenizers;
    // Reads the task's pairs into the pipeline (data.h), bad ones into `problems`, and adds lines
    // about where they came from to `report`; returns what messages call the data ("the copy
    // task", a path). Pairs only.
    std::function<std::string(const TrainingOptions&, PairSink&, Problems&, std::vector<std::string>& report)> read;
    // The whole of a run's data, for a task that does not read pairs through the pipeline (a text).
    std::function<TrainingData(const TrainingOptions&, const DataRequest&)> prepare;
    // The run's training batches from its data (whose training split they take), `longest` the
    // model's longest sequence (a language model's context).
    std::function<std::unique_ptr<BatchSource>(TrainingData&, const TrainingOptions&, int64_t longest)> batches;
    // The dev metric: its name, the number "best" means the lowest of, and a result as one line.
    std::string metric;
    std::function<double(const EvalResult&)> score;
    std::function<std::string(const EvalResult&)> describe;
    // Evaluates `model` on `split` (dev or test) of `data`: the first `limit` examples of a task of
    // pairs (0: all) decoded by the search `options` asks for, or the whole text of a task of text
    // (`longest` tokens of context at a time). The predictions (pairs) come back when asked for.
    std::function<EvalResult(models::Model&, const TrainingData&, Split, int64_t limit, int64_t longest,
                             const models::DecodingOptions&, std::vector<std::vector<std::string>>* predictions)>
        evaluate;
};

// Every task, in the order help texts list them.
const std::vector<Task>& tasks();
// The task of that name; an Error names the known ones.
const Task& task(const std::string& name);
// "g2p, corpus, text, copy, reverse or sort"
std::string task_names();
std::vector<std::string> task_name_list();

}  // namespace seqgrad::training
