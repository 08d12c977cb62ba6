// Parameter initialisation with an explicit Generator: Xavier (Glorot) uniform, and
// init_xavier_uniform, which applies it to every matrix of a model (the Transformer's); normal (the GPT's).
#pragma once

#include "seqgrad/core/random.h"
#include "seqgrad/nn/module.h"

namespace seqgrad::nn {

// Overwrites `param` (rank >= 2, [fan_out, fan_in, ...]) in place with values uniform in
// [-a, a), a = gain * sqrt(6 / (fan_in + fan_out)), as nn.init.xavier_uniform_; the extents
// beyond the second multiply both fans (PyTorch's receptive field).
void xavier_uniform(Tensor param, Generator& gen, float gain = 1.0f);

// The Transformer's initialisation: xavier_uniform on every parameter with more than one dimension,
// in named_parameters() order; vectors (biases, LayerNorm's gamma and beta) are left alone.
void init_xavier_uniform(const Module& module, Generator& gen);

// Overwrites `param` in place with values normal(0, stddev), as nn.init.normal_.
void init_normal(Tensor param, Generator& gen, float stddev);

}  // namespace seqgrad::nn
