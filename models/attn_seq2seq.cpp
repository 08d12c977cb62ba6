// The attention encoder-decoder in the manner of Bahdanau et al. (2015): DecoderWithAttention and
// AttnSeq2Seq.
#include "seqgrad/models/attn_seq2seq.h"

#include "kind_keys.h"
#include "seqgrad/core/ops.h"
#include "seqgrad/models/common.h"

namespace seqgrad::models {

// ---- DecoderWithAttention ----

DecoderWithAttention::DecoderWithAttention(int64_t vocab_size, int64_t hidden_size, int64_t num_layers,
                                           const std::string& attention_kind, Generator& gen) {
    check(attention_kind == "dot" || attention_kind == "additive", "DecoderWithAttention", "attention is \"",
          attention_kind, "\"; expected dot or additive");
    // Registered first, as the PyTorch model's __init__ does (make_fixtures.py), so
    // named_parameters() lists them in its order.
    if (attention_kind == "additive")
        attention =
            register_module<nn::Seq2SeqAttention>("attention", std::make_shared<nn::AttentionParams>(hidden_size, gen));
    else
        attention =
            register_module<nn::Seq2SeqAttention>("attention", std::make_shared<nn::AttentionSimple>(hidden_size));
    embedding = register_module("embedding", std::make_shared<nn::Embedding>(vocab_size, hidden_size, gen));
    // Input [embedding; context], 2h.
    rnn = register_module("rnn", std::make_shared<nn::LSTM>(2 * hidden_size, hidden_size, num_layers, false, gen));
    fc = register_module("fc", std::make_shared<nn::Linear>(hidden_size, vocab_size, gen));
}

AttnDecoderOutput DecoderWithAttention::forward(const IntTensor& tokens, const AttnSeq2SeqState& state,
                                                const PreparedDecoder* prepared) const {
    const int64_t batch = tokens.size(0), len = tokens.size(1);
    const int64_t layers = rnn->num_layers, src_len = state.encoder_outputs.size(1);
    // Every step's embedding in one lookup: [B, T, h] -> T of [B, 1, h].
    const std::vector<Tensor> embedded =
        split(embedding->forward(tokens), std::vector<int64_t>(static_cast<size_t>(len), 1), 1);
    // The state apart by layer between the steps, stacked again [layers, B, h] after the last.
    nn::LSTMLayerStates states = rnn->layer_states(state.hidden, state.cell, batch);
    std::vector<Tensor> outputs, weights;
    // The LSTM's weights laid out once for the products of every step (sgemm would copy them at
    // each), and its biases added once.
    const nn::LSTM::Prepared own = prepared == nullptr ? rnn->prepare(batch, len) : nn::LSTM::Prepared();
    const nn::LSTM::Prepared& laid_out = prepared == nullptr ? own : prepared->rnn;
    for (int64_t t = 0; t < len; ++t) {
        // The query is the previous state's top layer, hidden[-1] (the bridged encoder
        // state at t = 0).
        const Tensor query = states.h[static_cast<size_t>(layers - 1)];                         // [B, h]
        const Tensor a = attention->weights(query, state.encoder_keys, state.src_mask);         // [B, S]
        const Tensor context = matmul(reshape(a, {batch, 1, src_len}), state.encoder_outputs);  // [B, 1, h]
        nn::LSTMLayerOutput out =
            rnn->forward(concat({embedded[static_cast<size_t>(t)], context}, 2), states, laid_out);
        states = std::move(out.state);
        outputs.push_back(out.output);  // [B, 1, h]
        weights.push_back(a);
    }
    Tensor hidden, cell;
    nn::LSTM::stack_states(states, hidden, cell);
    // fc once over all steps: one [B * T, h] by [h, vocab] product instead of T small ones.
    const Tensor all = concat(outputs, 1);
    return {output_layer(*fc, all, prepared), hidden, cell, stack(weights, 1)};
}

// ---- AttnSeq2Seq ----

AttnSeq2SeqState AttnSeq2SeqState::select(const std::vector<int64_t>& rows) const {
    AttnSeq2SeqState out;
    out.hidden = select_rows(hidden, 1, rows);
    out.cell = select_rows(cell, 1, rows);
    out.encoder_outputs = select_rows(encoder_outputs, 0, rows);
    // Dot attention's keys are the outputs themselves: selected once.
    out.encoder_keys = encoder_keys.impl() == encoder_outputs.impl() ? out.encoder_outputs
                                                                     : select_rows(encoder_keys, 0, rows);
    out.src_mask = select_rows(src_mask, rows);
    return out;
}

AttnSeq2Seq::AttnSeq2Seq(const ModelConfig& config, Generator& gen) : Seq2SeqModel(config) {
    // The config travels with the weights (to_json() writes the keys of config.model).
    check(config.model == "attn_seq2seq", "AttnSeq2Seq", "config.model is \"", config.model,
          "\"; expected attn_seq2seq");
    const AttnSeq2SeqKeys& k = keys();
    encoder =
        register_module("encoder", std::make_shared<Encoder>(config.src_vocab, k.hidden_size, k.num_layers, true, gen));
    decoder = register_module("decoder", std::make_shared<DecoderWithAttention>(config.tgt_vocab, k.hidden_size,
                                                                                k.num_layers, k.attention, gen));
}

AttnSeq2SeqState AttnSeq2Seq::encode(const IntTensor& src) const {
    const Encoding encoded = encoder->forward(src);
    const int64_t layers = keys().num_layers, batch = src.size(0), h = keys().hidden_size;
    AttnSeq2SeqState state;
    // The bridge from the bidirectional encoder to the unidirectional decoder:
    // hidden.view(layers, 2, B, h).sum(1). PyTorch orders hidden as layer * 2 + direction, so this
    // adds each layer's forward and reverse final states.
    state.hidden = sum(reshape(encoded.hidden, {layers, 2, batch, h}), {1});  // [layers, B, h]
    state.cell = sum(reshape(encoded.cell, {layers, 2, batch, h}), {1});
    state.encoder_outputs = encoded.outputs;  // [B, S, h]
    state.encoder_keys = decoder->attention->keys(encoded.outputs);
    state.src_mask = source_mask(src);
    return state;
}

AttnDecoderOutput AttnSeq2Seq::forward_with_attention(const IntTensor& src, const IntTensor& tgt_in) const {
    check_source_and_target(src, tgt_in, config(), "AttnSeq2Seq");
    // Teacher forcing at every step, <pad> inputs included (the loss ignores their logits).
    return decoder->forward(tgt_in, encode(src));
}

Tensor AttnSeq2Seq::forward(const IntTensor& src, const IntTensor& tgt_in) {
    if (is_training() && teacher_forcing_ratio() < 1) {
        check_source_and_target(src, tgt_in, config(), "AttnSeq2Seq");
        AttnSeq2SeqState state = encode(src);
        // A call a step: the decoder's weights laid out once for all of them.
        const PreparedDecoder prepared = prepare_decoder(*decoder->rnn, *decoder->fc, tgt_in.size(0), tgt_in.size(1));
        return decode_with_teacher_forcing(tgt_in, teacher_forcing_ratio(), random(), [&](const IntTensor& tokens) {
            AttnSeq2SeqStep next = step(tokens, state, &prepared);
            state = next.state;
            return next.logits;
        });
    }
    return forward_with_attention(src, tgt_in).logits;
}

namespace {

// AttnSeq2Seq's decoding state, and where its last step looked (for pictures).
struct AttnSeq2SeqDecoding : DecodingState {
    AttnSeq2SeqState state;
    PreparedDecoder weights;  // the LSTM's, laid out once for the steps (rows of any number)
    Tensor last_weights;      // [N, S]
    void select_rows(const std::vector<int64_t>& rows) override {
        state = state.select(rows);
        if (last_weights.defined()) last_weights = models::select_rows(last_weights, 0, rows);
    }
};

}  // namespace

std::unique_ptr<DecodingState> AttnSeq2Seq::start_decoding(const IntTensor& src) {
    auto decoding = std::make_unique<AttnSeq2SeqDecoding>();
    decoding->state = encode(src);
    decoding->weights.rnn = decoder->rnn->prepare(src.size(0), kDecodingSteps);
    return decoding;
}

Tensor AttnSeq2Seq::decode_step(DecodingState& state, const IntTensor& tokens) {
    auto& decoding = own_state<AttnSeq2SeqDecoding>(state, "AttnSeq2Seq::decode_step");
    AttnSeq2SeqStep next = step(tokens, decoding.state, &decoding.weights);
    decoding.state = next.state;
    decoding.last_weights = next.attention_weights;
    return next.logits;
}

std::vector<Tensor> AttnSeq2Seq::last_attention(const DecodingState& state) const {
    const auto& decoding = own_state<AttnSeq2SeqDecoding>(state, "AttnSeq2Seq::last_attention");
    if (!decoding.last_weights.defined()) return {};
    return {decoding.last_weights};
}

AttnSeq2SeqStep AttnSeq2Seq::step(const IntTensor& prev_tokens, const AttnSeq2SeqState& state,
                                  const PreparedDecoder* prepared) const {
    check(state.hidden.defined(), "AttnSeq2Seq::step", "the state is empty: start it with encode(src)");
    const int64_t batch = state.batch_size();
    check(prev_tokens.dim() == 1 && prev_tokens.size(0) == batch, "AttnSeq2Seq::step", "prev_tokens must be [", batch,
          "] (the state's batch), got ", prev_tokens.shape());
    const IntTensor tokens = prev_tokens.reshape({batch, 1});
    check_token_ids(tokens, config().tgt_vocab, "AttnSeq2Seq::step", "prev_tokens");
    const AttnDecoderOutput out = decoder->forward(tokens, state, prepared);
    AttnSeq2SeqState next = state;
    next.hidden = out.hidden;
    next.cell = out.cell;
    const int64_t src_len = state.encoder_outputs.size(1);
    return {reshape(out.logits, {batch, config().tgt_vocab}), next, reshape(out.attention_weights, {batch, src_len})};
}

// ---- the registry's entry ----

namespace {

const internal::OptionTable<AttnSeq2SeqKeys>& attn_seq2seq_keys_table() {
    using K = AttnSeq2SeqKeys;
    static const internal::OptionTable<K> table =
        internal::OptionTable<K>(kModelConfig)
            .add(lstm_shape_table<K>(), {"hidden_size", "num_layers"})
            .add("attention", "attn_seq2seq: dot (scaled) or additive (Bahdanau)", &K::attention)
            .one_of({"dot", "additive"});
    return table;
}

}  // namespace

ModelKind attn_seq2seq_kind() {
    ModelKind kind;
    kind.name = "attn_seq2seq";
    kind.description = "the attention encoder-decoder in the manner of Bahdanau et al. (2015)";
    kind.keys = kind_keys(attn_seq2seq_keys_table());
    kind.make = [](const ModelConfig& c, Generator& gen) { return std::make_shared<AttnSeq2Seq>(c, gen); };
    kind.width = [](const ModelConfig& c) { return c.keys<AttnSeq2SeqKeys>().hidden_size; };
    kind.parameters = [](const ModelConfig& c) {
        const AttnSeq2SeqKeys& keys = c.keys<AttnSeq2SeqKeys>();
        const int64_t h = keys.hidden_size, layers = keys.num_layers;
        const int64_t encoder = c.src_vocab * h + 2 * lstm_layer_parameters(h, h) +
                                (layers - 1) * 2 * lstm_layer_parameters(2 * h, h) + 2 * h * h + h;
        const int64_t scorer = keys.attention == "additive" ? 2 * h * h + h + h : 0;
        const int64_t decoder = scorer + c.tgt_vocab * h + lstm_layer_parameters(2 * h, h) +
                                (layers - 1) * lstm_layer_parameters(h, h) + h * c.tgt_vocab + c.tgt_vocab;
        return encoder + decoder;
    };
    return kind;
}

}  // namespace seqgrad::models
