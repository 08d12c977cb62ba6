// The LSTM encoder-decoder of Sutskever et al. (2014): Encoder, Decoder / DecoderAlt, Seq2Seq, and
// the batch checks and row selection both LSTM models share.
#include "seqgrad/models/seq2seq.h"

#include <algorithm>

#include "seqgrad/core/ops.h"

namespace seqgrad::models {

// ---- shared by the two LSTM models ----

void check_token_ids(const IntTensor& ids, int64_t vocab, const char* op, const char* what) {
    check(ids.dim() == 2 && ids.size(0) >= 1 && ids.size(1) >= 1, op, what,
          " must be [batch >= 1, len >= 1], got ", ids.shape());
    const int64_t len = ids.size(1);
    for (int64_t i = 0; i < ids.numel(); ++i) {
        const int64_t id = ids.data()[i];
        check(id >= 0 && id < vocab, op, what, " id ", id, " at [", i / len, ", ", i % len,
              "] is outside the vocabulary [0, ", vocab, ")");
    }
}

std::vector<int64_t> source_lengths(const IntTensor& src, const char* op) {
    check(src.dim() == 2, op, "src must be [batch, src_len], got ", src.shape());
    const int64_t batch = src.size(0), len = src.size(1);
    std::vector<int64_t> lengths(static_cast<size_t>(batch), 0);
    for (int64_t b = 0; b < batch; ++b) {
        const int64_t* row = src.data() + b * len;
        int64_t length = 0;
        while (length < len && row[length] != kPad) ++length;
        for (int64_t t = length; t < len; ++t)
            check(row[t] == kPad, op, "src row ", b, " has <pad> at position ", length, " before the token ", row[t],
                  " at position ", t, ": batches must be right-padded");
        check(length > 0, op, "src row ", b,
              " has no real token (length 0); every source row needs at least one, as PyTorch's "
              "pack_padded_sequence requires");
        lengths[static_cast<size_t>(b)] = length;
    }
    return lengths;
}

Tensor select_rows(const Tensor& x, int64_t axis, const std::vector<int64_t>& rows) {
    return index_select(x, axis, IntTensor::from_vector(rows, {static_cast<int64_t>(rows.size())}));
}

IntTensor select_rows(const IntTensor& x, const std::vector<int64_t>& rows) {
    check(x.dim() >= 1, "select_rows", "needs an IntTensor of rank >= 1");
    const int64_t count = x.size(0), width = x.numel() / std::max<int64_t>(count, 1);
    std::vector<int64_t> values;
    values.reserve(rows.size() * static_cast<size_t>(width));
    for (int64_t row : rows) {
        check(row >= 0 && row < count, "select_rows", "row ", row, " is outside [0, ", count, ")");
        values.insert(values.end(), x.data() + row * width, x.data() + (row + 1) * width);
    }
    Shape shape = x.shape();
    shape[0] = static_cast<int64_t>(rows.size());
    return IntTensor::from_vector(std::move(values), shape);
}

// ---- Encoder ----

Encoder::Encoder(int64_t vocab_size, int64_t hidden_size, int64_t num_layers, bool bidirectional, Generator& gen) {
    embedding = register_module("embedding", std::make_shared<nn::Embedding>(vocab_size, hidden_size, gen));
    rnn = register_module("rnn",
                          std::make_shared<nn::LSTM>(hidden_size, hidden_size, num_layers, bidirectional, gen));
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

// ---- Decoder ----

Decoder::Decoder(int64_t vocab_size, int64_t hidden_size, int64_t num_layers, bool context_input_, Generator& gen)
    : context_input(context_input_) {
    embedding = register_module("embedding", std::make_shared<nn::Embedding>(vocab_size, hidden_size, gen));
    const int64_t input_size = context_input ? 2 * hidden_size : hidden_size;  // DecoderAlt: [embedding; context]
    rnn = register_module("rnn", std::make_shared<nn::LSTM>(input_size, hidden_size, num_layers, false, gen));
    fc = register_module("fc", std::make_shared<nn::Linear>(hidden_size, vocab_size, gen));
}

DecoderOutput Decoder::forward(const IntTensor& tokens, const Tensor& hidden, const Tensor& cell,
                               const Tensor& context) const {
    const int64_t batch = tokens.size(0), len = tokens.size(1), h = rnn->hidden_size;
    Tensor input = embedding->forward(tokens);  // [B, T, h]
    if (context_input) {
        check(context.defined() && context.shape() == Shape{batch, h}, "Decoder", "context_input needs a context [",
              batch, ", ", h, "], got ", context.defined() ? context.shape() : Shape{});
        // DecoderAlt: the same context at every step, [B, T, h] beside the embeddings.
        const Tensor step_context = reshape(context, {batch, 1, h});
        input = concat({input, concat(std::vector<Tensor>(static_cast<size_t>(len), step_context), 1)}, 2);
    }
    const nn::LSTMOutput out = rnn->forward(input, {}, hidden, cell);  // output [B, T, h]
    return {fc->forward(out.output), out.h_n, out.c_n};
}

// ---- Seq2Seq ----

Seq2SeqState Seq2SeqState::select(const std::vector<int64_t>& rows) const {
    Seq2SeqState out{select_rows(hidden, 1, rows), select_rows(cell, 1, rows), Tensor()};
    if (context.defined()) out.context = select_rows(context, 0, rows);
    return out;
}

namespace {

bool uses_context_input(const ModelConfig& config) {
    // The config travels with the weights (to_json() writes the keys of config.model), so it must
    // name this model.
    check(config.model == "seq2seq", "Seq2Seq", "config.model is \"", config.model, "\"; expected seq2seq");
    check(config.decoder == "init_state" || config.decoder == "context_input", "Seq2Seq", "decoder is \"",
          config.decoder, "\"; expected init_state or context_input");
    return config.decoder == "context_input";
}

}  // namespace

Seq2Seq::Seq2Seq(const ModelConfig& config, Generator& gen) : Seq2SeqModel(config) {
    const bool context_input = uses_context_input(config);
    encoder = register_module("encoder", std::make_shared<Encoder>(config.src_vocab, config.hidden_size,
                                                                   config.num_layers, false, gen));
    decoder = register_module("decoder", std::make_shared<Decoder>(config.tgt_vocab, config.hidden_size,
                                                                   config.num_layers, context_input, gen));
}

Seq2SeqState Seq2Seq::encode(const IntTensor& src) const {
    const Encoding encoded = encoder->forward(src);
    if (!decoder->context_input) return {encoded.hidden, encoded.cell, Tensor()};
    // DecoderAlt: zero initial state; the context is the top layer's final hidden state, hidden[-1].
    const int64_t layers = encoded.hidden.size(0), batch = encoded.hidden.size(1), h = encoded.hidden.size(2);
    const Tensor context = reshape(slice(encoded.hidden, 0, layers - 1, layers), {batch, h});
    return {Tensor::zeros({layers, batch, h}), Tensor::zeros({layers, batch, h}), context};
}

Tensor Seq2Seq::forward(const IntTensor& src, const IntTensor& tgt_in) {
    check_token_ids(src, config().src_vocab, "Seq2Seq", "src");
    check_token_ids(tgt_in, config().tgt_vocab, "Seq2Seq", "tgt_in");
    check(src.size(0) == tgt_in.size(0), "Seq2Seq", "src ", src.shape(), " and tgt_in ", tgt_in.shape(),
          " have different batch sizes");
    const Seq2SeqState start = encode(src);
    if (is_training() && teacher_forcing_ratio() < 1) {
        Seq2SeqState state = start;
        return decode_with_teacher_forcing(tgt_in, teacher_forcing_ratio(), random(), [&](const IntTensor& tokens) {
            Seq2SeqStep next = step(tokens, state);
            state = next.state;
            return next.logits;
        });
    }
    // Teacher forcing at every step: the decoder reads all of tgt_in, <pad> inputs included (their
    // logits are computed; the loss ignores them).
    return decoder->forward(tgt_in, start.hidden, start.cell, start.context).logits;
}

namespace {

// Seq2Seq's decoding state: the decoder's (h, c) and context, carried step by step.
struct Seq2SeqDecoding : DecodingState {
    Seq2SeqState state;
    void select_rows(const std::vector<int64_t>& rows) override { state = state.select(rows); }
};

}  // namespace

std::unique_ptr<DecodingState> Seq2Seq::start_decoding(const IntTensor& src) {
    auto decoding = std::make_unique<Seq2SeqDecoding>();
    decoding->state = encode(src);
    return decoding;
}

Tensor Seq2Seq::decode_step(DecodingState& state, const IntTensor& tokens) {
    auto* decoding = dynamic_cast<Seq2SeqDecoding*>(&state);
    check(decoding != nullptr, "Seq2Seq::decode_step", "the state was not made by this model's start_decoding");
    Seq2SeqStep next = step(tokens, decoding->state);
    decoding->state = next.state;
    return next.logits;
}

Tensor decode_with_teacher_forcing(const IntTensor& tgt_in, float ratio, Generator& gen,
                                   const std::function<Tensor(const IntTensor&)>& step) {
    const int64_t batch = tgt_in.size(0), steps = tgt_in.size(1);
    std::vector<Tensor> logits;
    IntTensor tokens = tgt_in.slice_last(0, 1).reshape({batch});  // <s>
    for (int64_t t = 0; t < steps; ++t) {
        logits.push_back(step(tokens));  // [B, V]
        if (t + 1 == steps) break;
        if (gen.uniform() < ratio) tokens = tgt_in.slice_last(t + 1, t + 2).reshape({batch});
        else tokens = argmax(logits.back().detach(), -1);
    }
    return stack(logits, 1);  // [B, T, V]
}

Seq2SeqStep Seq2Seq::step(const IntTensor& prev_tokens, const Seq2SeqState& state) const {
    check(state.hidden.defined(), "Seq2Seq::step", "the state is empty: start it with encode(src)");
    const int64_t batch = state.batch_size();
    check(prev_tokens.dim() == 1 && prev_tokens.size(0) == batch, "Seq2Seq::step", "prev_tokens must be [", batch,
          "] (the state's batch), got ", prev_tokens.shape());
    const IntTensor tokens = prev_tokens.reshape({batch, 1});
    check_token_ids(tokens, config().tgt_vocab, "Seq2Seq::step", "prev_tokens");
    const DecoderOutput out = decoder->forward(tokens, state.hidden, state.cell, state.context);
    return {reshape(out.logits, {batch, config().tgt_vocab}), {out.hidden, out.cell, state.context}};
}

}  // namespace seqgrad::models
