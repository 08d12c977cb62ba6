// The LSTM encoder-decoder of Sutskever et al. (2014) (docs/parity.md, "seq2seq"): the Decoder,
// which starts from the encoder's final state or (context_input) reads the encoder's final hidden
// state at every step, and the Seq2Seq model with encode() and step() for decoding. The encoder
// is shared with the attention model (lstm_encoder.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "seqgrad/models/common.h"
#include "seqgrad/models/lstm_encoder.h"
#include "seqgrad/models/model.h"
#include "seqgrad/models/registry.h"
#include "seqgrad/nn/layers.h"
#include "seqgrad/nn/lstm.h"
#include "seqgrad/nn/module.h"

namespace seqgrad::models {

// ---- the Seq2Seq model ----

// The Seq2Seq model's config keys (docs/parity.md): the LSTMs' size and how the decoder reads the
// encoder, "init_state" or "context_input".
struct Seq2SeqKeys : LstmShape {
    std::string decoder = "init_state";
};

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

// The Decoder: embedding, an LSTM carried from the given state, and fc to the vocabulary. With
// `context_input` its LSTM reads [embedding; context] (input size 2h) at every step.
//
// A step-by-step decoder takes one token per call; this one takes a block [B, T] and runs the LSTM
// over it: teacher forcing gives every input token up front, so the embedding lookup, the LSTM's
// input projections and fc each become one operation over all T steps. A decoding step is T = 1.
class Decoder : public nn::Module {
public:
    Decoder(int64_t vocab_size, int64_t hidden_size, int64_t num_layers, bool context_input, Generator& gen);
    // tokens [B, T], state hidden/cell [num_layers, B, h], context [B, h] (context_input only).
    // `prepared` (from prepare_decoder over rnn and fc): the weights laid out for many such calls.
    DecoderOutput forward(const IntTensor& tokens, const Tensor& hidden, const Tensor& cell, const Tensor& context,
                          const PreparedDecoder* prepared = nullptr) const;

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
//                    state joins every decoder input.
// Parameters (docs/parity.md): encoder.embedding.weight, encoder.rnn.*, decoder.embedding.weight,
// decoder.rnn.*, decoder.fc.{weight,bias}.
//
// Initialisation is PyTorch's default for each layer (nn/layers.h, nn/lstm.h): embeddings N(0, 1),
// LSTM weights and biases uniform(-1/sqrt(h), 1/sqrt(h)), fc uniform(-1/sqrt(h), 1/sqrt(h)).
// The model has no dropout (config.dropout is not used).
class Seq2Seq : public Seq2SeqModel {
public:
    Seq2Seq(const ModelConfig& config, Generator& gen);
    const Seq2SeqKeys& keys() const { return config().keys<Seq2SeqKeys>(); }

    // src [B, S], tgt_in [B, T] -> logits [B, T, tgt_vocab]: encode, then the decoder over all of
    // tgt_in (the same as step() T times; the tests check it).
    Tensor forward(const IntTensor& src, const IntTensor& tgt_in) override;

    // The decoder's starting state for src [B, S].
    Seq2SeqState encode(const IntTensor& src) const;
    // One decoder step: prev_tokens [B] (<s> first, then the last output) -> logits [B, tgt_vocab]
    // and the next state, which greedy decoding carries from step to step. `prepared`: the
    // decoder's weights laid out for all of a batch's steps (prepare_decoder).
    Seq2SeqStep step(const IntTensor& prev_tokens, const Seq2SeqState& state,
                     const PreparedDecoder* prepared = nullptr) const;

    // Decoding (model.h) through encode() and step().
    std::unique_ptr<DecodingState> start_decoding(const IntTensor& src) override;
    Tensor decode_step(DecodingState& state, const IntTensor& tokens) override;

    std::shared_ptr<Encoder> encoder;
    std::shared_ptr<Decoder> decoder;
};

// The registry's entry for "seq2seq" (registry.h).
ModelKind seq2seq_kind();

}  // namespace seqgrad::models
