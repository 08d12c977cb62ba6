// The attention encoder-decoder in the manner of Bahdanau et al. (2015) (docs/parity.md,
// "attn_seq2seq"): the bidirectional Encoder (lstm_encoder.h), DecoderWithAttention with a dot or an
// additive scorer (nn/attention.h), and the AttnSeq2Seq model with encode() and step() for decoding.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "seqgrad/models/common.h"
#include "seqgrad/models/lstm_encoder.h"
#include "seqgrad/models/model.h"
#include "seqgrad/models/registry.h"
#include "seqgrad/nn/attention.h"
#include "seqgrad/nn/layers.h"
#include "seqgrad/nn/lstm.h"
#include "seqgrad/nn/module.h"

namespace seqgrad::models {

// The attention Seq2Seq's config keys (docs/parity.md): the LSTMs' size and the scorer, "dot" or
// "additive".
struct AttnSeq2SeqKeys : LstmShape {
    std::string attention = "dot";
};

// The decoder's state between steps, with what it attends to.
struct AttnSeq2SeqState {
    Tensor hidden;           // [num_layers, B, hidden_size]: the decoder LSTM's (h, c)
    Tensor cell;             // [num_layers, B, hidden_size]
    Tensor encoder_outputs;  // [B, S, hidden_size]: what the context averages
    Tensor encoder_keys;     // [B, S, hidden_size]: the scorer's keys() of the outputs, computed once
                             // (for dot attention the outputs themselves)
    IntTensor src_mask;      // [B, S]: 1 on real source tokens, 0 on <pad> (scores set to -1e9)

    int64_t batch_size() const { return hidden.size(1); }
    // The state of rows `rows` (a row may repeat), for beam search.
    AttnSeq2SeqState select(const std::vector<int64_t>& rows) const;
};

// The decoder's answer for a block of tokens.
struct AttnDecoderOutput {
    Tensor logits;  // [B, T, vocab]
    Tensor hidden;  // [num_layers, B, hidden_size]: the state after the last token
    Tensor cell;
    Tensor attention_weights;  // [B, T, S]: each step's weights over the source (rows sum to 1)
};

// DecoderWithAttention. Each step t, from the previous state (hidden, cell):
//   a_t     = attention(hidden[-1], encoder_outputs)            [B, S]   (masked at <pad>)
//   context = a_t · encoder_outputs                             [B, h]
//   output  = rnn([embedding(y_t); context], (hidden, cell))    [B, h]   (LSTM input size 2h)
//   logits  = fc(output)                                        [B, vocab]
// `attention` is "dot" (AttentionSimple, no parameters) or "additive" (AttentionParams:
// attention.attn.{weight [h, 2h], bias [h]}, attention.v [h]).
//
// forward() takes a block of tokens [B, T]: the steps run one after another (each query is the
// previous step's state), but the embedding lookup and fc run once over all T. A decoding step is
// T = 1.
class DecoderWithAttention : public nn::Module {
public:
    DecoderWithAttention(int64_t vocab_size, int64_t hidden_size, int64_t num_layers, const std::string& attention,
                         Generator& gen);

    // tokens [B, T], starting from state.hidden and state.cell, attending to state's encoder part.
    // The LSTM's weights are laid out for the T steps; `prepared` (from prepare_decoder over rnn
    // and fc) lays them out for many such calls instead, fc's too.
    AttnDecoderOutput forward(const IntTensor& tokens, const AttnSeq2SeqState& state,
                              const PreparedDecoder* prepared = nullptr) const;

    std::shared_ptr<nn::Seq2SeqAttention> attention;
    std::shared_ptr<nn::Embedding> embedding;
    std::shared_ptr<nn::LSTM> rnn;
    std::shared_ptr<nn::Linear> fc;
};

// One decoding step's answer.
struct AttnSeq2SeqStep {
    Tensor logits;  // [B, tgt_vocab]
    AttnSeq2SeqState state;
    Tensor attention_weights;  // [B, S]: where this step looked
};

// The attention Seq2Seq with teacher forcing at every step (docs/parity.md):
//   encoder_outputs, hidden, cell = Encoder(src)     (bidirectional; outputs = tanh(fc(...)))
//   hidden = hidden.view(layers, 2, B, h).sum(1)     (each layer's two directions added; same for cell)
//   then DecoderWithAttention over tgt_in.
// Parameters (docs/parity.md): encoder.embedding.weight, encoder.rnn.* with _reverse, encoder.fc.*,
// decoder.attention.* (additive only), decoder.embedding.weight, decoder.rnn.*, decoder.fc.*.
//
// Initialisation is PyTorch's default for each layer (nn/layers.h, nn/lstm.h, nn/attention.h):
// embeddings N(0, 1), LSTM weights and biases uniform(-1/sqrt(h), 1/sqrt(h)), each Linear
// uniform(-1/sqrt(in), 1/sqrt(in)), v uniform [0, 1) (as torch.rand). No dropout (config.dropout
// is not used).
class AttnSeq2Seq : public Seq2SeqModel {
public:
    AttnSeq2Seq(const ModelConfig& config, Generator& gen);
    const AttnSeq2SeqKeys& keys() const { return config().keys<AttnSeq2SeqKeys>(); }

    // src [B, S], tgt_in [B, T] -> logits [B, T, tgt_vocab].
    Tensor forward(const IntTensor& src, const IntTensor& tgt_in) override;
    // forward() with each step's attention weights [B, T, S] too (for pictures of the alignment).
    AttnDecoderOutput forward_with_attention(const IntTensor& src, const IntTensor& tgt_in) const;

    // The decoder's starting state for src [B, S]: the bridged encoder state and the encoder's outputs.
    AttnSeq2SeqState encode(const IntTensor& src) const;
    // One decoder step: prev_tokens [B] -> logits [B, tgt_vocab], the next state, and the weights.
    // `prepared`: the decoder's weights laid out for all of a batch's steps (prepare_decoder).
    AttnSeq2SeqStep step(const IntTensor& prev_tokens, const AttnSeq2SeqState& state,
                         const PreparedDecoder* prepared = nullptr) const;

    // Decoding (model.h) through encode() and step(); last_attention() is the last step's
    // weights over the source, one [N, S] tensor.
    std::unique_ptr<DecodingState> start_decoding(const IntTensor& src) override;
    Tensor decode_step(DecodingState& state, const IntTensor& tokens) override;
    std::vector<Tensor> last_attention(const DecodingState& state) const override;
    AttentionLayout attention_layout() const override { return {{keys().attention + " attention"}, 1}; }

    std::shared_ptr<Encoder> encoder;
    std::shared_ptr<DecoderWithAttention> decoder;
};

// The registry's entry for "attn_seq2seq" (registry.h).
ModelKind attn_seq2seq_kind();

}  // namespace seqgrad::models
