// What `seqgrad train --model K` starts from: each kind's recipe, the model and the training
// options of the README's recipe for that kind (configs/: g2p-transformer.json,
// g2p-attn_seq2seq.json, g2p-seq2seq.json, gpt-shakespeare-cpu.json, less their data and budget),
// so that the shortest command trains a good model. A config file's keys and the command line's
// flags go over it. The recipes' test holds each configs/ file equal to its kind's recipe.
#pragma once

#include <string>

#include "seqgrad/models/model.h"
#include "seqgrad/training/options.h"

namespace seqgrad::training {

struct Recipe {
    models::ModelConfig model;  // the vocabularies' sizes come from the data
    TrainingOptions training;   // with no budget: the run gives one
};

// The recipe of the model kind `model`; an Error names the known kinds.
Recipe recipe(const std::string& model);

}  // namespace seqgrad::training
