// The LSTM encoder-decoder of Sutskever et al. (2014): the Decoder and the Seq2Seq model.
#include "seqgrad/models/seq2seq.h"

#include <algorithm>

#include "kind_keys.h"
#include "seqgrad/core/ops.h"
#include "seqgrad/models/common.h"

namespace seqgrad::models {

// ---- Decoder ----

Decoder::Decoder(int64_t vocab_size, int64_t hidden_size, int64_t num_layers, bool context_input_, Generator& gen)
    : context_input(context_input_) {
    embedding = register_module("embedding", std::make_shared<nn::Embedding>(vocab_size, hidden_size, gen));
    const int64_t input_size = context_input ? 2 * hidden_size : hidden_size;  // [embedding; context]
    rnn = register_module("rnn", std::make_shared<nn::LSTM>(input_size, hidden_size, num_layers, false, gen));
    fc = register_module("fc", std::make_shared<nn::Linear>(hidden_size, vocab_size, gen));
}

DecoderOutput Decoder::forward(const IntTensor& tokens, const Tensor& hidden, const Tensor& cell, const Tensor& context,
                               const PreparedDecoder* prepared) const {
    const int64_t batch = tokens.size(0), len = tokens.size(1), h = rnn->hidden_size;
    Tensor input = embedding->forward(tokens);  // [B, T, h]
    if (context_input) {
        check(context.defined() && context.shape() == Shape{batch, h}, "Decoder", "context_input needs a context [",
              batch, ", ", h, "], got ", context.defined() ? context.shape() : Shape{});
        // The same context at every step, [B, T, h] beside the embeddings.
        const Tensor step_context = reshape(context, {batch, 1, h});
        input = concat({input, concat(std::vector<Tensor>(static_cast<size_t>(len), step_context), 1)}, 2);
    }
    if (prepared != nullptr) {
        const nn::LSTMOutput out = rnn->forward(input, hidden, cell, prepared->rnn);
        return {output_layer(*fc, out.output, prepared), out.h_n, out.c_n};
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
    const std::string& decoder = config.keys<Seq2SeqKeys>().decoder;
    check(decoder == "init_state" || decoder == "context_input", "Seq2Seq", "decoder is \"", decoder,
          "\"; expected init_state or context_input");
    return decoder == "context_input";
}

}  // namespace

Seq2Seq::Seq2Seq(const ModelConfig& config, Generator& gen) : Seq2SeqModel(config) {
    const bool context_input = uses_context_input(config);
    const LstmShape& lstm = keys();
    encoder = register_module("encoder", std::make_shared<Encoder>(config.src_vocab, lstm.hidden_size, lstm.num_layers,
                                                                   false, gen));
    decoder = register_module("decoder", std::make_shared<Decoder>(config.tgt_vocab, lstm.hidden_size, lstm.num_layers,
                                                                   context_input, gen));
}

Seq2SeqState Seq2Seq::encode(const IntTensor& src) const {
    const Encoding encoded = encoder->forward(src);
    if (!decoder->context_input) return {encoded.hidden, encoded.cell, Tensor()};
    // context_input: zero initial state; the context is the top layer's final hidden state, hidden[-1].
    const int64_t layers = encoded.hidden.size(0), batch = encoded.hidden.size(1), h = encoded.hidden.size(2);
    const Tensor context = reshape(slice(encoded.hidden, 0, layers - 1, layers), {batch, h});
    return {Tensor::zeros({layers, batch, h}), Tensor::zeros({layers, batch, h}), context};
}

Tensor Seq2Seq::forward(const IntTensor& src, const IntTensor& tgt_in) {
    check_source_and_target(src, tgt_in, config(), "Seq2Seq");
    const Seq2SeqState start = encode(src);
    if (is_training() && teacher_forcing_ratio() < 1) {
        Seq2SeqState state = start;
        // A call a step: the decoder's weights laid out once for all of them.
        const PreparedDecoder prepared = prepare_decoder(*decoder->rnn, *decoder->fc, tgt_in.size(0), tgt_in.size(1));
        return decode_with_teacher_forcing(tgt_in, teacher_forcing_ratio(), random(), [&](const IntTensor& tokens) {
            Seq2SeqStep next = step(tokens, state, &prepared);
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
    PreparedDecoder weights;  // the LSTM's, laid out once for the steps (rows of any number)
    void select_rows(const std::vector<int64_t>& rows) override { state = state.select(rows); }
};

}  // namespace

std::unique_ptr<DecodingState> Seq2Seq::start_decoding(const IntTensor& src) {
    auto decoding = std::make_unique<Seq2SeqDecoding>();
    decoding->state = encode(src);
    decoding->weights.rnn = decoder->rnn->prepare(src.size(0), kDecodingSteps);
    return decoding;
}

Tensor Seq2Seq::decode_step(DecodingState& state, const IntTensor& tokens) {
    auto& decoding = own_state<Seq2SeqDecoding>(state, "Seq2Seq::decode_step");
    Seq2SeqStep next = step(tokens, decoding.state, &decoding.weights);
    decoding.state = next.state;
    return next.logits;
}

Seq2SeqStep Seq2Seq::step(const IntTensor& prev_tokens, const Seq2SeqState& state,
                          const PreparedDecoder* prepared) const {
    check(state.hidden.defined(), "Seq2Seq::step", "the state is empty: start it with encode(src)");
    const int64_t batch = state.batch_size();
    check(prev_tokens.dim() == 1 && prev_tokens.size(0) == batch, "Seq2Seq::step", "prev_tokens must be [", batch,
          "] (the state's batch), got ", prev_tokens.shape());
    const IntTensor tokens = prev_tokens.reshape({batch, 1});
    check_token_ids(tokens, config().tgt_vocab, "Seq2Seq::step", "prev_tokens");
    const DecoderOutput out = decoder->forward(tokens, state.hidden, state.cell, state.context, prepared);
    return {reshape(out.logits, {batch, config().tgt_vocab}), {out.hidden, out.cell, state.context}};
}

// ---- the registry's entry ----

namespace {

const internal::OptionTable<Seq2SeqKeys>& seq2seq_keys_table() {
    using K = Seq2SeqKeys;
    static const internal::OptionTable<K> table =
        internal::OptionTable<K>(kModelConfig)
            .add(lstm_shape_table<K>(), {"hidden_size", "num_layers"})
            .add("decoder",
                 "seq2seq: init_state (the encoder's final state starts the decoder) or context_input "
                 "(it joins every decoder input)",
                 &K::decoder)
            .one_of({"init_state", "context_input"});
    return table;
}

}  // namespace

ModelKind seq2seq_kind() {
    ModelKind kind;
    kind.name = "seq2seq";
    kind.description = "the LSTM encoder-decoder of Sutskever et al. (2014)";
    kind.keys = kind_keys(seq2seq_keys_table());
    kind.make = [](const ModelConfig& c, Generator& gen) { return std::make_shared<Seq2Seq>(c, gen); };
    kind.width = [](const ModelConfig& c) { return c.keys<Seq2SeqKeys>().hidden_size; };
    kind.parameters = [](const ModelConfig& c) {
        const Seq2SeqKeys& keys = c.keys<Seq2SeqKeys>();
        const int64_t h = keys.hidden_size, layers = keys.num_layers;
        const int64_t encoder = c.src_vocab * h + layers * lstm_layer_parameters(h, h);
        const int64_t first_input = keys.decoder == "context_input" ? 2 * h : h;
        const int64_t decoder = c.tgt_vocab * h + lstm_layer_parameters(first_input, h) +
                                (layers - 1) * lstm_layer_parameters(h, h) + h * c.tgt_vocab + c.tgt_vocab;
        return encoder + decoder;
    };
    return kind;
}

}  // namespace seqgrad::models
