// What the models share: the checks of a batch of token ids, row selection (beam search expands
// and reorders hypotheses with it), and teacher forcing for decoders that run one step at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "seqgrad/core/random.h"
#include "seqgrad/core/tensor.h"
#include "seqgrad/models/model.h"

namespace seqgrad::models {

// Throws Error unless ids is [batch >= 1, len >= 1] with every id in [0, vocab); the message
// names `op`, `what` ("src", "tgt_in") and the first bad id with its position.
void check_token_ids(const IntTensor& ids, int64_t vocab, const char* op, const char* what);

// A training batch: src [B, S] and tgt_in [B, T] of the config's vocabularies (check_token_ids),
// with the same B.
void check_source_and_target(const IntTensor& src, const IntTensor& tgt_in, const ModelConfig& config, const char* op);

// The number of real tokens in each row of a right-padded src [B, S], (src != <pad>).sum(1): the
// lengths pack_padded_sequence is given. Throws Error naming the row for a row with no real token
// (PyTorch's pack_padded_sequence refuses length 0 too: there is no final state to take) and for a
// <pad> followed by a real token (the batch is not right-padded, and the lengths would lie).
std::vector<int64_t> source_lengths(const IntTensor& src, const char* op);

// src != <pad> as [B, S] (1 = a real token).
IntTensor source_mask(const IntTensor& src);

// x's entries rows[0], rows[1], ... along `axis` (a row may repeat): index_select with the rows
// given as a vector.
Tensor select_rows(const Tensor& x, int64_t axis, const std::vector<int64_t>& rows);
IntTensor select_rows(const IntTensor& x, const std::vector<int64_t>& rows);  // along axis 0

// The teacher-forced logits [B, T, V] of a model that decodes one step at a time, when the
// teacher forcing ratio is below 1: each step after the first reads the true token with
// probability `ratio` (one draw per step, for the whole batch, from `gen`), else the model's own
// most likely previous token. `step(tokens [B]) -> logits [B, V]` advances the model's state.
Tensor decode_with_teacher_forcing(const IntTensor& tgt_in, float ratio, Generator& gen,
                                   const std::function<Tensor(const IntTensor&)>& step);

}  // namespace seqgrad::models
