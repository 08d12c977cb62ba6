// The work of a model's forward pass, for the benchmarks' GFLOP/s and MFU: 2 x the multiply-adds
// of its matrix products over a batch, counted from the config and the shapes (masked halves of
// attention counted in full; elementwise work, the softmaxes and the optimizer not at all).
#pragma once

#include <cstdint>

#include "seqgrad/models/model.h"

namespace seqgrad_bench {

// A sequence-to-sequence model reads src_len source tokens and writes tgt_len target ones a row;
// a language model reads windows of tgt_len tokens (src_len 0), an encoder texts of tgt_len tokens
// (src_len 0) through both of its heads. An Error for a model kind with no
// count here (model_flops.cpp: one function a kind).
double forward_flops(const seqgrad::models::ModelConfig& config, int64_t batch, int64_t src_len, int64_t tgt_len);

// A BERT's forward FLOPs over texts of `length` tokens with only the heads a step reads: its layers,
// the MLM head at the `mlm_positions` it predicts (mlm_loss runs it at the labelled ones only; 0:
// none), the classifier on each row's first vector (class_head). A step that reads the classifier
// alone (class_head, mlm_positions 0) runs the last layer for the first position only
// (EncoderModel::forward_first), and its FLOPs are counted so. forward_flops counts the MLM head at
// every position (the logits of every position), the classifier and every layer in full.
double bert_flops(const seqgrad::models::ModelConfig& config, int64_t batch, int64_t length, int64_t mlm_positions,
                  bool class_head);

}  // namespace seqgrad_bench
