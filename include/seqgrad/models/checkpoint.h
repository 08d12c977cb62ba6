// Checkpoints. A checkpoint is a directory:
//   model.safetensors     the latest weights; metadata: the model config, both vocabularies, the
//                         task, the step
//   best.safetensors      the same, for the weights with the best dev WER so far
//   training.safetensors  the optimizer's state, and in its metadata the training options and
//                         progress (step, data position, random states, dev history), so a run
//                         resumes exactly where it stopped
// Every file is written atomically (a temporary, fsync, rename): an interrupted run never leaves a
// broken file. model.safetensors and training.safetensors both record the step; resuming from a
// pair that disagrees is an error.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "seqgrad/core/safetensors.h"
#include "seqgrad/models/data.h"
#include "seqgrad/models/model.h"

namespace seqgrad::models {

// A trained model with what is needed to use it.
struct LoadedModel {
    std::shared_ptr<Seq2SeqModel> model;
    Vocabulary source_vocab;
    Vocabulary target_vocab;
    std::string task;     // "g2p", "copy", "reverse", "sort"
    int64_t step = 0;     // training steps behind these weights
    std::string path;     // the file read
};

// Writes a model file (model.safetensors / best.safetensors format) atomically.
void save_model(const std::string& path, const Seq2SeqModel& model, const Vocabulary& source_vocab,
                const Vocabulary& target_vocab, const std::string& task, int64_t step);

// Reads a model file, or a checkpoint directory (its best.safetensors if there is one, else its
// model.safetensors), and builds the model in evaluation mode. Errors name the path and problem.
LoadedModel load_model(const std::string& path);

// The model file to read in a checkpoint directory (or the path itself if it is a file).
std::string model_file_of(const std::string& checkpoint);

}  // namespace seqgrad::models
