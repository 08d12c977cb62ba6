// What the models share: the checks of a batch of token ids, row selection (beam search expands
// and reorders hypotheses with it), and teacher forcing for decoders that run one step at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

#include "seqgrad/core/ops.h"
#include "seqgrad/core/random.h"
#include "seqgrad/core/tensor.h"
#include "seqgrad/models/model.h"
#include "seqgrad/nn/layers.h"
#include "seqgrad/nn/lstm.h"

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

// Whether a forward pass over `batch` independent sequences of `tokens` tokens in all runs faster
// as split_batch's slices: at least kSplitTokens tokens for each thread, at least a sequence for
// each, and nothing that must see every operation on the calling thread: no gradient (nothing
// records), the model in eval mode (dropout draws nothing) and no trace or operation profile
// installed. On one thread too: its slice still runs a piece at a time.
constexpr int64_t kSplitTokens = 512;
bool split_batch_pays(const Model& model, int64_t batch, int64_t tokens);

// Sequences of `length` tokens in one of split_batch's pieces: about kPieceTokens tokens, at least
// one sequence. At a model width of 128 a piece's activations are 128 KB, its queries, keys and
// values 384 KB: with the weights, all in a core's L2 cache from one operation to the next.
constexpr int64_t kPieceTokens = 256;
int64_t piece_sequences(int64_t length);

// forward(begin, end) for slices [begin, end) of a batch of `batch` independent sequences, each slice
// wholly on one of seqgrad's threads (the operations inside it serial there, without a gradient),
// taken through forward a piece of at most `piece` sequences at a time; the pieces' results (each
// [end - begin, ...], the same trailing shape) joined along axis 0. An exception on any piece is
// thrown here. Each thread then has its sequences' tensors in its own core's cache from the first
// operation to the last and waits for the other threads only once, where operations split one at
// a time hand rows between the cores and wait at each (a BERT classifying 64 texts of 64 tokens on
// two threads: about 6% less time); pieces keep the tensors in the core's L2 cache rather than
// its share of L3 (the same batch in int8: 7-11% less again).
Tensor split_batch(int64_t batch, const std::function<Tensor(int64_t begin, int64_t end)>& forward,
                   int64_t piece = std::numeric_limits<int64_t>::max());

// A recurrent decoder's LSTM and output layer laid out once for `calls` steps of `batch` rows
// (nn::LSTM::prepare, RepeatedWeight), for training with teacher forcing below 1 and for decoding,
// where each step is a call of its own (its input may be the step before's prediction). An empty
// fc leaves the output layer to its own forward (decoding: its packed weights, when packed).
struct PreparedDecoder {
    nn::LSTM::Prepared rnn;
    RepeatedWeight fc;
};
PreparedDecoder prepare_decoder(const nn::LSTM& rnn, const nn::Linear& fc, int64_t batch, int64_t calls);
// The decoder's output layer on x: through prepared->fc when there is one, else fc.forward(x).
Tensor output_layer(const nn::Linear& fc, const Tensor& x, const PreparedDecoder* prepared);
// The steps a decoding's layouts are made for (a search does not know how many it will take; the
// panels need at least four to pay back their copy).
inline constexpr int64_t kDecodingSteps = 16;

// The teacher-forced logits [B, T, V] of a model that decodes one step at a time, when the
// teacher forcing ratio is below 1: each step after the first reads the true token with
// probability `ratio` (one draw per step, for the whole batch, from `gen`), else the model's own
// most likely previous token. `step(tokens [B]) -> logits [B, V]` advances the model's state.
Tensor decode_with_teacher_forcing(const IntTensor& tgt_in, float ratio, Generator& gen,
                                   const std::function<Tensor(const IntTensor&)>& step);

}  // namespace seqgrad::models
