// The attention encoder-decoder in the manner of Bahdanau et al. (2015): DecoderWithAttention and
// AttnSeq2Seq.
#include "seqgrad/models/attn_seq2seq.h"

#include "seqgrad/core/ops.h"

namespace seqgrad::models {

// ---- DecoderWithAttention ----

DecoderWithAttention::DecoderWithAttention(int64_t vocab_size, int64_t hidden_size, int64_t num_layers,
                                           const std::string& attention_kind, Generator& gen) {
    check(attention_kind == "dot" || attention_kind == "additive", "DecoderWithAttention", "attention is \"",
          attention_kind, "\"; expected dot or additive");
    // Registered first, as the PyTorch model's __init__ does (make_fixtures.py), so
    // named_parameters() lists them in its order.
    if (attention_kind == "additive") {
        additive_ = std::make_shared<nn::AttentionParams>(hidden_size, gen);
        attention = register_module<nn::Seq2SeqAttention>("attention", additive_);
    } else {
        attention = register_module<nn::Seq2SeqAttention>("attention",
                                                          std::make_shared<nn::AttentionSimple>(hidden_size));
    }
    embedding = register_module("embedding", std::make_shared<nn::Embedding>(vocab_size, hidden_size, gen));
    // Input [embedding; context], 2h.
    rnn = register_module("rnn", std::make_shared<nn::LSTM>(2 * hidden_size, hidden_size, num_layers, false, gen));
    fc = register_module("fc", std::make_shared<nn::Linear>(hidden_size, vocab_size, gen));
}

Tensor DecoderWithAttention::precompute_keys(const Tensor& encoder_outputs) const {
    if (!additive_) return Tensor();
    const int64_t h = rnn->hidden_size;
    const Tensor w_encoder = slice(additive_->attn->weight, 1, h, 2 * h);  // [h, h]
    return linear(encoder_outputs, w_encoder, Tensor());                   // [B, S, h]
}

Tensor DecoderWithAttention::attention_weights(const Tensor& query, const AttnSeq2SeqState& state) const {
    if (!additive_) return attention->forward(query, state.encoder_outputs, state.src_mask);
    // AttentionParams scores v · tanh(attn([q; e_j])), and attn([q; e_j]) = q W_q^T + b + e_j W_e^T
    // with attn.weight = [W_q | W_e]. AttentionParams::forward would compute e_j W_e^T, the
    // largest product of the step ([B, S, h] by [h, h]), again at every step; it is the same every
    // step, so encode() computed it once (encoder_keys) and a step adds only the query's part.
    const int64_t batch = query.size(0), h = rnn->hidden_size;
    check(state.encoder_keys.defined(), "DecoderWithAttention",
          "additive attention needs the state's encoder_keys (AttnSeq2Seq::encode computes them)");
    const Tensor w_query = slice(additive_->attn->weight, 1, 0, h);                                // [h, h]
    const Tensor from_query = reshape(linear(query, w_query, additive_->attn->bias), {batch, 1, h});  // [B, 1, h]
    const Tensor energy = tanh(add(from_query, state.encoder_keys));                              // [B, S, h]
    const Tensor scores = sum(mul(energy, additive_->v), {2});                                    // [B, S]
    IntTensor padding = IntTensor::zeros(state.src_mask.shape());  // masked_fill fills where nonzero
    for (int64_t i = 0; i < padding.numel(); ++i) padding.data()[i] = state.src_mask.data()[i] == 0 ? 1 : 0;
    return softmax(masked_fill(scores, padding, nn::kMaskFill), 1);
}

AttnDecoderOutput DecoderWithAttention::forward(const IntTensor& tokens, const AttnSeq2SeqState& state) const {
    const int64_t batch = tokens.size(0), len = tokens.size(1), h = rnn->hidden_size;
    const int64_t layers = rnn->num_layers, src_len = state.encoder_outputs.size(1);
    // Every step's embedding in one lookup: [B, T, h] -> T of [B, 1, h].
    const std::vector<Tensor> embedded =
        split(embedding->forward(tokens), std::vector<int64_t>(static_cast<size_t>(len), 1), 1);
    Tensor hidden = state.hidden, cell = state.cell;
    std::vector<Tensor> outputs, weights;
    for (int64_t t = 0; t < len; ++t) {
        // The query is the previous state's top layer, hidden[-1] (the bridged encoder
        // state at t = 0).
        const Tensor query = reshape(slice(hidden, 0, layers - 1, layers), {batch, h});
        const Tensor a = attention_weights(query, state);                                      // [B, S]
        const Tensor context = matmul(reshape(a, {batch, 1, src_len}), state.encoder_outputs);  // [B, 1, h]
        const nn::LSTMOutput out =
            rnn->forward(concat({embedded[static_cast<size_t>(t)], context}, 2), {}, hidden, cell);
        hidden = out.h_n;
        cell = out.c_n;
        outputs.push_back(out.output);  // [B, 1, h]
        weights.push_back(a);
    }
    // fc once over all steps: one [B * T, h] by [h, vocab] product instead of T small ones.
    return {fc->forward(concat(outputs, 1)), hidden, cell, stack(weights, 1)};
}

// ---- AttnSeq2Seq ----

AttnSeq2SeqState AttnSeq2SeqState::select(const std::vector<int64_t>& rows) const {
    AttnSeq2SeqState out;
    out.hidden = select_rows(hidden, 1, rows);
    out.cell = select_rows(cell, 1, rows);
    out.encoder_outputs = select_rows(encoder_outputs, 0, rows);
    if (encoder_keys.defined()) out.encoder_keys = select_rows(encoder_keys, 0, rows);
    out.src_mask = select_rows(src_mask, rows);
    return out;
}

AttnSeq2Seq::AttnSeq2Seq(const ModelConfig& config, Generator& gen) : Seq2SeqModel(config) {
    // The config travels with the weights (to_json() writes the keys of config.model).
    check(config.model == "attn_seq2seq", "AttnSeq2Seq", "config.model is \"", config.model,
          "\"; expected attn_seq2seq");
    encoder = register_module("encoder", std::make_shared<Encoder>(config.src_vocab, config.hidden_size,
                                                                   config.num_layers, true, gen));
    decoder = register_module("decoder", std::make_shared<DecoderWithAttention>(
                                             config.tgt_vocab, config.hidden_size, config.num_layers,
                                             config.attention, gen));
}

AttnSeq2SeqState AttnSeq2Seq::encode(const IntTensor& src) const {
    const Encoding encoded = encoder->forward(src);
    const int64_t layers = config().num_layers, batch = src.size(0), h = config().hidden_size;
    AttnSeq2SeqState state;
    // The bridge from the bidirectional encoder to the unidirectional decoder:
    // hidden.view(layers, 2, B, h).sum(1). PyTorch orders hidden as layer * 2 + direction, so this
    // adds each layer's forward and reverse final states.
    state.hidden = sum(reshape(encoded.hidden, {layers, 2, batch, h}), {1});  // [layers, B, h]
    state.cell = sum(reshape(encoded.cell, {layers, 2, batch, h}), {1});
    state.encoder_outputs = encoded.outputs;  // [B, S, h]
    state.encoder_keys = decoder->precompute_keys(encoded.outputs);
    state.src_mask = IntTensor::zeros(src.shape());
    for (int64_t i = 0; i < src.numel(); ++i) state.src_mask.data()[i] = src.data()[i] != kPad ? 1 : 0;
    return state;
}

AttnDecoderOutput AttnSeq2Seq::forward_with_attention(const IntTensor& src, const IntTensor& tgt_in) const {
    check_token_ids(src, config().src_vocab, "AttnSeq2Seq", "src");
    check_token_ids(tgt_in, config().tgt_vocab, "AttnSeq2Seq", "tgt_in");
    check(src.size(0) == tgt_in.size(0), "AttnSeq2Seq", "src ", src.shape(), " and tgt_in ", tgt_in.shape(),
          " have different batch sizes");
    // Teacher forcing at every step, <pad> inputs included (the loss ignores their logits).
    return decoder->forward(tgt_in, encode(src));
}

Tensor AttnSeq2Seq::forward(const IntTensor& src, const IntTensor& tgt_in) {
    if (is_training() && teacher_forcing_ratio() < 1) {
        check_token_ids(src, config().src_vocab, "AttnSeq2Seq", "src");
        check_token_ids(tgt_in, config().tgt_vocab, "AttnSeq2Seq", "tgt_in");
        check(src.size(0) == tgt_in.size(0), "AttnSeq2Seq", "src ", src.shape(), " and tgt_in ", tgt_in.shape(),
              " have different batch sizes");
        AttnSeq2SeqState state = encode(src);
        return decode_with_teacher_forcing(tgt_in, teacher_forcing_ratio(), random(), [&](const IntTensor& tokens) {
            AttnSeq2SeqStep next = step(tokens, state);
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
    Tensor last_weights;  // [N, S]
    void select_rows(const std::vector<int64_t>& rows) override {
        state = state.select(rows);
        if (last_weights.defined()) last_weights = models::select_rows(last_weights, 0, rows);
    }
};

}  // namespace

std::unique_ptr<DecodingState> AttnSeq2Seq::start_decoding(const IntTensor& src) {
    auto decoding = std::make_unique<AttnSeq2SeqDecoding>();
    decoding->state = encode(src);
    return decoding;
}

Tensor AttnSeq2Seq::decode_step(DecodingState& state, const IntTensor& tokens) {
    auto* decoding = dynamic_cast<AttnSeq2SeqDecoding*>(&state);
    check(decoding != nullptr, "AttnSeq2Seq::decode_step", "the state was not made by this model's start_decoding");
    AttnSeq2SeqStep next = step(tokens, decoding->state);
    decoding->state = next.state;
    decoding->last_weights = next.attention_weights;
    return next.logits;
}

std::vector<Tensor> AttnSeq2Seq::last_attention(const DecodingState& state) const {
    const auto* decoding = dynamic_cast<const AttnSeq2SeqDecoding*>(&state);
    if (!decoding || !decoding->last_weights.defined()) return {};
    return {decoding->last_weights};
}

AttnSeq2SeqStep AttnSeq2Seq::step(const IntTensor& prev_tokens, const AttnSeq2SeqState& state) const {
    check(state.hidden.defined(), "AttnSeq2Seq::step", "the state is empty: start it with encode(src)");
    const int64_t batch = state.batch_size();
    check(prev_tokens.dim() == 1 && prev_tokens.size(0) == batch, "AttnSeq2Seq::step", "prev_tokens must be [",
          batch, "] (the state's batch), got ", prev_tokens.shape());
    const IntTensor tokens = prev_tokens.reshape({batch, 1});
    check_token_ids(tokens, config().tgt_vocab, "AttnSeq2Seq::step", "prev_tokens");
    const AttnDecoderOutput out = decoder->forward(tokens, state);
    AttnSeq2SeqState next = state;
    next.hidden = out.hidden;
    next.cell = out.cell;
    const int64_t src_len = state.encoder_outputs.size(1);
    return {reshape(out.logits, {batch, config().tgt_vocab}), next,
            reshape(out.attention_weights, {batch, src_len})};
}

}  // namespace seqgrad::models
