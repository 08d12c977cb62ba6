// The LSTM encoder-decoder of Sutskever et al. (2014) (docs/parity.md, "seq2seq"): the Encoder, the
// Decoder that starts from the encoder's final state or, as DecoderAlt, reads the encoder's final
// hidden state at every step, and the Seq2Seq model with encode() and step() for decoding.
// The Encoder and the batch checks are shared with the attention model (attn_seq2seq.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "seqgrad/models/model.h"
#include "seqgrad/nn/layers.h"
#include "seqgrad/nn/lstm.h"
#include "seqgrad/nn/module.h"

namespace seqgrad::models {

// ---- shared by the two LSTM models ----

// The teacher-forced logits [B, T, V] of a model that decodes one step at a time, when the
// teacher forcing ratio is below 1: each step after the first reads the true token with
// probability `ratio` (one draw per step, for the whole batch, from `gen`), else the model's own
// most likely previous token. `step(tokens [B]) -> logits [B, V]` advances
// the model's state.
Tensor decode_with_teacher_forcing(const IntTensor& tgt_in, float ratio, Generator& gen,
                                   const std::function<Tensor(const IntTensor&)>& step);

// Throws Error unless ids is [batch >= 1, len >= 1] with every id in [0, vocab); the message
// names `op`, `what` ("src", "tgt_in") and the first bad id with its position.
void check_token_ids(const IntTensor& ids, int64_t vocab, const char* op, const char* what);

// The number of real tokens in each row of a right-padded src [B, S], (src != <pad>).sum(1): the
// lengths pack_padded_sequence is given. Throws Error naming the row for a row with no real token
// (PyTorch's pack_padded_sequence refuses length 0 too: there is no final state to take) and for a
// <pad> followed by a real token (the batch is not right-padded, and the lengths would lie).
std::vector<int64_t> source_lengths(const IntTensor& src, const char* op);

// x's entries rows[0], rows[1], ... along `axis` (a row may repeat): index_select with the rows
// given as a vector. Beam search expands each source row to its hypotheses and reorders them
// with it.
Tensor select_rows(const Tensor& x, int64_t axis, const std::vector<int64_t>& rows);
IntTensor select_rows(const IntTensor& x, const std::vector<int64_t>& rows);  // along axis 0

// What the Encoder hands on, as PyTorch's `outputs, (hidden, cell) = self.rnn(embedded)`.
struct Encoding {
    Tensor outputs;  // [B, S, hidden]: the LSTM's outputs (zero at padding); bidirectional:
                     // tanh(fc(outputs [B, S, 2 * hidden]))
    Tensor hidden;   // [layers * directions, B, hidden], PyTorch's order: index layer * D + direction
    Tensor cell;     // the same
};

// The Encoder: an embedding, then an LSTM over each row's real tokens (pack_padded_sequence:
// the final state is taken at the last real token, the reverse direction starts there, outputs at
// padding are zero). Seq2Seq's is unidirectional; AttnSeq2Seq's is bidirectional and brings the
// outputs back to `hidden` with fc: outputs = tanh(fc(lstm outputs)).
//
// Parameters: embedding.weight [vocab, h]; rnn.{weight_ih,weight_hh,bias_ih,bias_hh}_l{k} (and
// _reverse); fc.{weight [h, 2h], bias [h]} when bidirectional.
class Encoder : public nn::Module {
public:
    Encoder(int64_t vocab_size, int64_t hidden_size, int64_t num_layers, bool bidirectional, Generator& gen);
    // src [B, S], right-padded; checked with check_token_ids and source_lengths.
    Encoding forward(const IntTensor& src) const;

    std::shared_ptr<nn::Embedding> embedding;
    std::shared_ptr<nn::LSTM> rnn;
    std::shared_ptr<nn::Linear> fc;  // bidirectional only, else null
};

// ---- the Seq2Seq model ----

// The decoder's state between steps.
struct Seq2SeqState {
    Tensor hidden;   // [num_layers, B, hidden_size]: the decoder LSTM's (h, c), as nn.LSTM's
    Tensor cell;     // [num_layers, B, hidden_size]
    Tensor context;  // [B, hidden_size]: decoder "context_input" only, the encoder's top-layer final h

    int64_t batch_size() const { return hidden.size(1); }
    // The state of rows `rows` (a row may repeat), for beam search.
    Seq2SeqState select(const std::vector<int64_t>& rows) const;
};

// The decoder's answer for a block of tokens.
struct DecoderOutput {
    Tensor logits;  // [B, T, vocab]
    Tensor hidden;  // [num_layers, B, hidden_size]: the state after the last token
    Tensor cell;
};

// The Decoder and DecoderAlt (`context_input`): embedding, an LSTM carried from the given state,
// and fc to the vocabulary. DecoderAlt's LSTM reads [embedding; context] (input size 2h) at every
// step.
//
// A step-by-step decoder takes one token per call; this one takes a block [B, T] and runs the LSTM
// over it: teacher forcing gives every input token up front, so the embedding lookup, the LSTM's
// input projections and fc each become one operation over all T steps. A decoding step is T = 1.
class Decoder : public nn::Module {
public:
    Decoder(int64_t vocab_size, int64_t hidden_size, int64_t num_layers, bool context_input, Generator& gen);
    // tokens [B, T], state hidden/cell [num_layers, B, h], context [B, h] (context_input only).
    DecoderOutput forward(const IntTensor& tokens, const Tensor& hidden, const Tensor& cell,
                          const Tensor& context) const;

    std::shared_ptr<nn::Embedding> embedding;
    std::shared_ptr<nn::LSTM> rnn;
    std::shared_ptr<nn::Linear> fc;
    bool context_input;
};

// One decoding step's answer.
struct Seq2SeqStep {
    Tensor logits;  // [B, tgt_vocab]
    Seq2SeqState state;
};

// The Seq2Seq model with teacher forcing at every step (docs/parity.md):
//   "init_state":    the decoder starts from the encoder's final (hidden, cell), every layer;
//   "context_input": the decoder starts from zeros, and the encoder's top-layer final hidden
//                    state joins every decoder input (DecoderAlt).
// Parameters (docs/parity.md): encoder.embedding.weight, encoder.rnn.*, decoder.embedding.weight,
// decoder.rnn.*, decoder.fc.{weight,bias}.
//
// Initialisation is PyTorch's default for each layer (nn/layers.h, nn/lstm.h): embeddings N(0, 1),
// LSTM weights and biases uniform(-1/sqrt(h), 1/sqrt(h)), fc uniform(-1/sqrt(h), 1/sqrt(h)).
// The model has no dropout (config.dropout is not used).
class Seq2Seq : public Seq2SeqModel {
public:
    Seq2Seq(const ModelConfig& config, Generator& gen);

    // src [B, S], tgt_in [B, T] -> logits [B, T, tgt_vocab]: encode, then the decoder over all of
    // tgt_in (the same as step() T times; the tests check it).
    Tensor forward(const IntTensor& src, const IntTensor& tgt_in) override;

    // The decoder's starting state for src [B, S].
    Seq2SeqState encode(const IntTensor& src) const;
    // One decoder step: prev_tokens [B] (<s> first, then the last output) -> logits [B, tgt_vocab]
    // and the next state, which greedy decoding carries from step to step.
    Seq2SeqStep step(const IntTensor& prev_tokens, const Seq2SeqState& state) const;

    // Decoding (model.h) through encode() and step().
    std::unique_ptr<DecodingState> start_decoding(const IntTensor& src) override;
    Tensor decode_step(DecodingState& state, const IntTensor& tokens) override;

    std::shared_ptr<Encoder> encoder;
    std::shared_ptr<Decoder> decoder;
};

}  // namespace seqgrad::models
