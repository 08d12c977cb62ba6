// The LSTM encoder that both recurrent models share (seq2seq.h, attn_seq2seq.h): an embedding and
// an LSTM over each row's real tokens, unidirectional or bidirectional.
#pragma once

#include <cstdint>
#include <memory>

#include "seqgrad/nn/layers.h"
#include "seqgrad/nn/lstm.h"
#include "seqgrad/nn/module.h"

namespace seqgrad::models {

// The size of the LSTMs: the keys both recurrent models read (docs/parity.md, "seq2seq and
// attn_seq2seq"). Their table, which a kind's table takes them from, is lstm_shape_table
// (models/kind_keys.h).
struct LstmShape {
    int64_t hidden_size = 256;
    int64_t num_layers = 2;
};

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

// The parameters of one LSTM layer and direction: W_ih [4h, input], W_hh [4h, h], two biases [4h].
inline int64_t lstm_layer_parameters(int64_t input, int64_t hidden) {
    return 4 * hidden * (input + hidden) + 8 * hidden;
}

}  // namespace seqgrad::models
