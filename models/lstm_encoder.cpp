// The LSTM encoder both recurrent models share (lstm_encoder.h).
#include "seqgrad/models/lstm_encoder.h"

#include "seqgrad/core/ops.h"
#include "seqgrad/models/common.h"

namespace seqgrad::models {

Encoder::Encoder(int64_t vocab_size, int64_t hidden_size, int64_t num_layers, bool bidirectional, Generator& gen) {
    embedding = register_module("embedding", std::make_shared<nn::Embedding>(vocab_size, hidden_size, gen));
    rnn = register_module("rnn", std::make_shared<nn::LSTM>(hidden_size, hidden_size, num_layers, bidirectional, gen));
    if (bidirectional) fc = register_module("fc", std::make_shared<nn::Linear>(2 * hidden_size, hidden_size, gen));
}

Encoding Encoder::forward(const IntTensor& src) const {
    check_token_ids(src, embedding->weight.size(0), "Encoder", "src");
    const std::vector<int64_t> lengths = source_lengths(src, "Encoder");
    const nn::LSTMOutput out = rnn->forward(embedding->forward(src), lengths);  // [B, S, D * h]
    if (!fc) return {out.output, out.h_n, out.c_n};
    // Bidirectional: the two directions' outputs brought back to the decoder's size. At padded
    // positions this is tanh(fc.bias), not zero; attention masks those positions out.
    return {tanh(fc->forward(out.output)), out.h_n, out.c_n};  // [B, S, h]
}

}  // namespace seqgrad::models
