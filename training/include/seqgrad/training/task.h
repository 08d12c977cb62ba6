// The tasks a run trains on, registered in one place (task.cpp) as the models are (models'
// registry.h): each names its data, the tokenizers a new run reads it with, its dev metric and what
// "best" means. Adding a task is one entry; the trainer, checkpoints, `seqgrad train --task` and
// `seqgrad eval` ask this registry.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "seqgrad/models/model.h"
#include "seqgrad/models/search.h"
#include "seqgrad/training/dataset.h"
#include "seqgrad/training/evaluate.h"
#include "seqgrad/training/options.h"
#include "seqgrad/training/tokenizer.h"

namespace seqgrad::training {

// The data pipeline's (data.h): a task names the registry's readers without pulling it in, so that
// what only needs a task's tokenizers or metric (loading a checkpoint) does not depend on it.
class PairSink;
class Problems;

struct Task {
    std::string name;         // the options' "task"
    std::string description;  // one line, for help texts
    // The tokenizers of a new run, (source, target); a checkpoint brings its own.
    std::function<std::pair<Tokenizer, Tokenizer>(const TrainingOptions&)> tokenizers;
    // Reads the task's pairs into the pipeline (data.h), bad ones into `problems`, and adds lines
    // about where they came from to `report`; returns what messages call the data ("the copy
    // task", a path).
    std::function<std::string(const TrainingOptions&, PairSink&, Problems&, std::vector<std::string>& report)> read;
    // The dev metric: its name, the number "best" means the lowest of, and a result as one line.
    std::string metric;
    std::function<double(const EvalResult&)> score;
    std::function<std::string(const EvalResult&)> describe;
    // Evaluates `model` on `examples` with the search `options` asks for.
    std::function<EvalResult(models::Model&, const TextSides&, const std::vector<Example>&,
                             const models::DecodingOptions&, std::vector<std::vector<std::string>>* predictions)>
        evaluate;
};

// Every task, in the order help texts list them.
const std::vector<Task>& tasks();
// The task of that name; an Error names the known ones.
const Task& task(const std::string& name);
// "g2p, corpus, copy, reverse or sort"
std::string task_names();
std::vector<std::string> task_name_list();

}  // namespace seqgrad::training
