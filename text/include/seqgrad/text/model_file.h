// Model files: a trained model with what a program needs to use it, in one safetensors file (the
// format seqgrad-model-1). Its tensors are the model's state_dict; its metadata the model config,
// each side's tokenizer (a SentencePiece model's bytes included) and vocabulary, the task and the
// step. A checkpoint directory holds its latest weights in this format as model.safetensors and,
// once a run has evaluated them, the best so far as best.safetensors; the training layer writes
// them beside a run's training state (training/checkpoint.h), and a program that only uses the
// model reads them through this file alone.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "seqgrad/models/model.h"
#include "seqgrad/text/tokenizer.h"
#include "seqgrad/text/vocabulary.h"

namespace seqgrad::text {

// A checkpoint directory's model files: the latest weights, and the weights with the best dev
// score so far (the task's metric).
inline constexpr const char* kModelFile = "model.safetensors";
inline constexpr const char* kBestFile = "best.safetensors";

// The weights a user of the checkpoint reads: best.safetensors if there is one, else
// model.safetensors. (A path that is not a directory is taken to be a model file itself.)
std::string weights_to_use(const std::string& checkpoint);

// A trained model with what is needed to use it.
struct LoadedModel : TextSides {
    std::shared_ptr<models::Model> model;
    std::string task;  // "g2p", "corpus", "copy", "reverse", "sort"
    int64_t step = 0;  // training steps behind these weights
    std::string path;  // the file read
};

// Writes a model file (model.safetensors / best.safetensors format) atomically.
void save_model(const std::string& path, const models::Model& model, const TextSides& sides, const std::string& task,
                int64_t step);

// Reads a model file, or a checkpoint directory (its best.safetensors if there is one, else its
// model.safetensors), and builds the model in evaluation mode. Errors name the path and problem.
LoadedModel load_model(const std::string& path);

}  // namespace seqgrad::text
