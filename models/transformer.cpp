// The Transformer of Vaswani et al. (2017), with the parameter names of docs/parity.md:
// EncoderLayer, DecoderLayer, the output projection and the encoder-decoder model, Post-LN or Pre-LN.
#include "seqgrad/models/transformer.h"

#include "seqgrad/nn/trace.h"

#include <algorithm>
#include <cmath>

#include "kind_keys.h"
#include "seqgrad/core/autograd.h"
#include "seqgrad/core/ops.h"
#include "seqgrad/models/common.h"
#include "seqgrad/nn/init.h"

namespace seqgrad::models {
namespace {

const char* kOp = "Transformer";

// The config's choices (validated by check_transformer_config) as the layers take them.
nn::Activation activation_of(const TransformerShape& keys) {
    return keys.activation == "gelu" ? nn::Activation::gelu : nn::Activation::relu;
}

nn::PositionalKind positional_kind_of(const TransformerKeys& keys) {
    return keys.positional == "learned" ? nn::PositionalKind::learned : nn::PositionalKind::sinusoidal;
}

bool pre_norm_of(const ModelConfig& config) { return config.keys<TransformerKeys>().norm == "pre"; }

// The sublayers every layer builds alike, from the shape. With rotary positions (positional
// "rope"), self-attention rotates its queries and keys; cross-attention compares positions of two
// different sequences and does not.
std::shared_ptr<nn::MultiHeadAttention> make_attention(const TransformerShape& keys, float dropout, Generator& gen,
                                                       const std::shared_ptr<Generator>& dropout_generator,
                                                       bool self_attention) {
    const bool rotary = self_attention && keys.positional == "rope";
    return std::make_shared<nn::MultiHeadAttention>(keys.d_model, keys.n_heads, gen, dropout, dropout_generator,
                                                    rotary);
}

std::shared_ptr<nn::FeedForward> make_feed_forward(const TransformerShape& keys, float dropout, Generator& gen,
                                                   const std::shared_ptr<Generator>& dropout_generator) {
    return std::make_shared<nn::FeedForward>(keys.d_model, keys.d_ff, gen, activation_of(keys), dropout,
                                             dropout_generator);
}

// ids [B, t] with the column [B, 1] appended: [B, t + 1]
IntTensor append_column(const IntTensor& ids, const IntTensor& column) {
    const int64_t batch = ids.size(0), len = ids.size(1);
    IntTensor out = IntTensor::zeros({batch, len + 1});
    for (int64_t b = 0; b < batch; ++b) {
        for (int64_t j = 0; j < len; ++j) out.data()[b * (len + 1) + j] = ids.data()[b * len + j];
        out.data()[b * (len + 1) + len] = column.data()[b];
    }
    return out;
}

// One residual sublayer around `sublayer` (a function of [B, T, d_model]):
//   Post-LN (the paper):  norm(x + dropout(sublayer(x)))
//   Pre-LN:               x + dropout(sublayer(norm(x)))
// Pre-LN keeps an un-normalised path from input to output, which is why it trains deep stacks
// without warm-up; the stack then needs a final norm (encoder_norm, decoder_norm).
template <typename Sublayer>
Tensor residual(const Tensor& x, const nn::LayerNorm& norm, const nn::Dropout& dropout, bool pre_norm,
                Sublayer&& sublayer) {
    if (pre_norm) return dropout.add_to(x, sublayer(norm.forward(x)));
    return norm.forward(dropout.add_to(x, sublayer(x)));
}

}  // namespace

// ---- layers ----

EncoderLayer::EncoderLayer(const ModelConfig& config, Generator& gen, std::shared_ptr<Generator> dropout_generator)
    : EncoderLayer(config.keys<TransformerKeys>(), pre_norm_of(config), config.dropout, gen,
                   std::move(dropout_generator)) {}

EncoderLayer::EncoderLayer(const TransformerShape& shape, bool pre_ln, float dropout_rate, Generator& gen,
                           std::shared_ptr<Generator> dropout_generator)
    : pre_norm(pre_ln) {
    const int64_t d = shape.d_model;
    attention = register_module("attention", make_attention(shape, dropout_rate, gen, dropout_generator, true));
    attention_norm = register_module("attention_norm", std::make_shared<nn::LayerNorm>(d));
    feed_forward = register_module("feed_forward", make_feed_forward(shape, dropout_rate, gen, dropout_generator));
    ffn_norm = register_module("ffn_norm", std::make_shared<nn::LayerNorm>(d));
    dropout = register_module("dropout", std::make_shared<nn::Dropout>(dropout_rate, dropout_generator));
}

Tensor EncoderLayer::forward(const Tensor& x, const IntTensor& src_mask) const {
    // Self-attention: every source position looks at every real source position.
    const Tensor attended = residual(x, *attention_norm, *dropout, pre_norm,
                                     [&](const Tensor& h) { return attention->forward(h, h, h, src_mask).output; });
    return residual(attended, *ffn_norm, *dropout, pre_norm, [&](const Tensor& h) { return feed_forward->forward(h); });
}

Tensor EncoderLayer::forward_first(const Tensor& x, const IntTensor& src_mask) const {
    // Keys and values read the whole text as forward() does (Pre-LN: normalised); the residual
    // path and the query are the first position's. Norms work row by row, so the first row of
    // norm(x) is norm(x[:, :1]).
    const Tensor sources = pre_norm ? attention_norm->forward(x) : x;
    const Tensor attended = residual(slice(x, 1, 0, 1), *attention_norm, *dropout, pre_norm, [&](const Tensor& h) {
        return attention->forward(h, sources, sources, src_mask).output;
    });
    return residual(attended, *ffn_norm, *dropout, pre_norm, [&](const Tensor& h) { return feed_forward->forward(h); });
}

DecoderLayer::DecoderLayer(const ModelConfig& config, Generator& gen, std::shared_ptr<Generator> dropout_generator)
    : pre_norm(pre_norm_of(config)) {
    const TransformerKeys& keys = config.keys<TransformerKeys>();
    const int64_t d = keys.d_model;
    self_attention =
        register_module("self_attention", make_attention(keys, config.dropout, gen, dropout_generator, true));
    self_attn_norm = register_module("self_attn_norm", std::make_shared<nn::LayerNorm>(d));
    cross_attention =
        register_module("cross_attention", make_attention(keys, config.dropout, gen, dropout_generator, false));
    cross_attn_norm = register_module("cross_attn_norm", std::make_shared<nn::LayerNorm>(d));
    feed_forward = register_module("feed_forward", make_feed_forward(keys, config.dropout, gen, dropout_generator));
    ffn_norm = register_module("ffn_norm", std::make_shared<nn::LayerNorm>(d));
    dropout = register_module("dropout", std::make_shared<nn::Dropout>(config.dropout, dropout_generator));
}

template <typename SelfAttend, typename CrossAttend>
Tensor DecoderLayer::run(const Tensor& x, SelfAttend&& self_attend, CrossAttend&& cross_attend) const {
    // Masked self-attention: position t sees the real target positions 0..t only.
    const Tensor h = residual(x, *self_attn_norm, *dropout, pre_norm, self_attend);
    // Cross-attention: queries from the decoder, keys and values from the encoder's output.
    const Tensor c = residual(h, *cross_attn_norm, *dropout, pre_norm, cross_attend);
    return residual(c, *ffn_norm, *dropout, pre_norm, [&](const Tensor& y) { return feed_forward->forward(y); });
}

Tensor DecoderLayer::forward(const Tensor& x, const Tensor& memory, const IntTensor& src_mask,
                             const IntTensor& tgt_mask) const {
    return run(
        x, [&](const Tensor& y) { return self_attention->forward(y, y, y, tgt_mask).output; },
        [&](const Tensor& y) { return cross_attention->forward(y, memory, memory, src_mask).output; });
}

Tensor DecoderLayer::step(const Tensor& x, TransformerDecodingState& state, int64_t layer,
                          const IntTensor& self_mask) const {
    auto self_attend = [&](const Tensor& y) {
        return self_attention->step(y, state.self_attention, layer, self_mask).output;
    };
    auto cross_attend = [&](const Tensor& y) {
        const nn::KeysValues& source = state.cross_attention[static_cast<size_t>(layer)];
        const nn::AttentionOutput attended =
            cross_attention->attend_gathered(y, source, state.cross_rows, source.keys.size(1), state.src_mask);
        state.cross_attention_weights[static_cast<size_t>(layer)] = attended.attention_weights;
        return attended.output;
    };
    return run(x, self_attend, cross_attend);
}

// ---- output projection ----

OutputProjection::OutputProjection(int64_t d_model, int64_t vocab, Generator& gen, bool with_bias) {
    // nn.Linear's default initialisation, in its order (weight, then bias).
    const float bound = 1.0f / std::sqrt(static_cast<float>(d_model));
    weight = register_parameter("weight", Tensor::uniform({vocab, d_model}, -bound, bound, gen));
    if (with_bias) bias = register_parameter("bias", Tensor::uniform({vocab}, -bound, bound, gen));
}

OutputProjection::OutputProjection(const Tensor& tied_weight, Generator& gen, bool with_bias) : weight(tied_weight) {
    check(tied_weight.defined() && tied_weight.dim() == 2, "OutputProjection",
          "the tied weight must be [vocab, d_model]");
    const float bound = 1.0f / std::sqrt(static_cast<float>(tied_weight.size(1)));
    if (with_bias) bias = register_parameter("bias", Tensor::uniform({tied_weight.size(0)}, -bound, bound, gen));
}

Tensor OutputProjection::forward(const Tensor& x) const {
    Tensor logits = packed_weight_ && !grad_enabled() ? linear_packed(x, *packed_weight_, bias)
                                                      : linear(x, weight, bias);
    nn::trace(*this, logits);
    return logits;
}

void OutputProjection::set_packed(std::optional<Precision> precision) {
    packed_weight_ = precision ? std::make_shared<const PackedMatrix>(weight, *precision) : nullptr;
}

// ---- the model ----

Transformer::Transformer(const ModelConfig& config, Generator& gen) : Seq2SeqModel(config) {
    check(config.model.empty() || config.model == "transformer", kOp, "the config is for a \"", config.model,
          "\" model");
    ModelConfig named = config;  // a config built in code may leave the kind out
    named.model = "transformer";
    named.validate();  // every key's range, then check_transformer_config
    const TransformerKeys& k = keys();
    const bool pre_norm = pre_norm_of(config);
    const int64_t d = k.d_model;
    // Every dropout mask comes from the model's one generator (model.h's random(), which a
    // checkpoint saves): layers with generators of their own, seeded alike, would drop alike.
    const std::shared_ptr<Generator>& dropout_generator = random_ptr();

    // Registration follows the PyTorch module's attribute order, which fixes the state_dict order.
    src_embedding = register_module("src_embedding", std::make_shared<nn::Embedding>(config.src_vocab, d, gen));
    tgt_embedding = k.share_embeddings
                        ? src_embedding  // PyTorch: self.tgt_embedding = self.src_embedding
                        : register_module("tgt_embedding", std::make_shared<nn::Embedding>(config.tgt_vocab, d, gen));
    if (k.positional != "rope")  // rotary positions live in self-attention instead
        pos_encoder = register_module("pos_encoder", std::make_shared<nn::PositionalEncoding>(d, k.max_seq_len,
                                                                                              positional_kind_of(k)));
    dropout = register_module("dropout", std::make_shared<nn::Dropout>(config.dropout, dropout_generator));
    encoder_layers = register_module("encoder_layers", std::make_shared<nn::ModuleList<EncoderLayer>>());
    for (int64_t i = 0; i < k.n_enc_layers; ++i)
        encoder_layers->push_back(std::make_shared<EncoderLayer>(config, gen, dropout_generator));
    decoder_layers = register_module("decoder_layers", std::make_shared<nn::ModuleList<DecoderLayer>>());
    for (int64_t i = 0; i < k.n_dec_layers; ++i)
        decoder_layers->push_back(std::make_shared<DecoderLayer>(config, gen, dropout_generator));
    if (pre_norm) {
        encoder_norm = register_module("encoder_norm", std::make_shared<nn::LayerNorm>(d));
        decoder_norm = register_module("decoder_norm", std::make_shared<nn::LayerNorm>(d));
    }
    output = register_module("output", k.tie_output ? std::make_shared<OutputProjection>(tgt_embedding->weight, gen)
                                                    : std::make_shared<OutputProjection>(d, config.tgt_vocab, gen));

    // Xavier-uniform on every matrix (a tied one once), biases and LayerNorm left as they are; a
    // learned positional table starts from the sinusoidal one.
    for (const auto& [name, param] : named_parameters())
        if (param.dim() > 1 && name != "pos_encoder.weight") nn::xavier_uniform(param, gen);
}

void Transformer::check_ids(const IntTensor& ids, int64_t vocab, const char* what) const {
    check_token_ids(ids, vocab, kOp, what);
    check_length(ids, what);
}

void Transformer::check_length(const IntTensor& ids, const char* what) const {
    check(ids.size(1) <= keys().max_seq_len, kOp, what, " length ", ids.size(1), " exceeds max_seq_len ",
          keys().max_seq_len);
}

Tensor Transformer::embed(const nn::Embedding& table, const IntTensor& ids, int64_t position) const {
    // Scaling by sqrt(d_model) puts the embeddings on the scale of the positional encoding
    // (entries in [-1, 1]) rather than of Xavier's small values; §3.4 of the paper.
    const float scale = static_cast<float>(std::sqrt(static_cast<double>(keys().d_model)));
    const Tensor x = mul(table.forward(ids), scale);  // [B, len, d_model]
    if (!pos_encoder) return dropout->forward(x);     // rotary positions: applied in self-attention
    // pe[position, position + len) [len, d_model], broadcast over the batch. (PositionalEncoding's
    // forward adds pe[0, len); decoding one position at a time needs the offset.)
    const Tensor pe = slice(pos_encoder->table, 0, position, position + ids.size(1));
    return dropout->forward(add(x, pe));
}

EncoderOutput Transformer::encode(const IntTensor& src) const {
    check_ids(src, config().src_vocab, "src");
    IntTensor src_mask = nn::padding_mask(src, kPad);  // [B, 1, 1, S]
    Tensor x = embed(*src_embedding, src);             // [B, S, d_model]
    for (const auto& layer : *encoder_layers) x = layer->forward(x, src_mask);
    if (encoder_norm) x = encoder_norm->forward(x);
    return {x, src_mask};
}

Tensor Transformer::decode(const IntTensor& tgt_in, const Tensor& memory, const IntTensor& src_mask) const {
    check_ids(tgt_in, config().tgt_vocab, "tgt_in");
    const int64_t batch = tgt_in.size(0);
    check(memory.defined() && memory.dim() == 3 && memory.size(0) == batch && memory.size(2) == keys().d_model, kOp,
          "memory must be [", batch, ", src_len, ", keys().d_model, "] for a target batch of ", batch, ", got ",
          memory.defined() ? memory.shape() : Shape{});
    check(src_mask.shape() == Shape{batch, 1, 1, memory.size(1)}, kOp, "src_mask must be [", batch, ", 1, 1, ",
          memory.size(1), "], got ", src_mask.shape());
    const IntTensor tgt_mask = nn::decoder_mask(tgt_in, kPad);  // [B, 1, T, T]
    Tensor x = embed(*tgt_embedding, tgt_in);                   // [B, T, d_model]
    for (const auto& layer : *decoder_layers) x = layer->forward(x, memory, src_mask, tgt_mask);
    if (decoder_norm) x = decoder_norm->forward(x);
    return output->forward(x);  // [B, T, tgt_vocab]
}

Tensor Transformer::forward(const IntTensor& src, const IntTensor& tgt_in) {
    // Both inputs are checked before anything runs, so that a refused call draws no dropout masks.
    // (encode and decode check their own input again: they are also called on their own.)
    check_source_and_target(src, tgt_in, config(), kOp);
    check_length(src, "src");
    check_length(tgt_in, "tgt_in");
    const EncoderOutput encoded = encode(src);
    return decode(tgt_in, encoded.memory, encoded.src_mask);
}

// ---- incremental decoding ----

void TransformerDecodingState::select_rows(const std::vector<int64_t>& rows) {
    self_attention.select_rows(rows);  // checks the rows
    src_mask = models::select_rows(src_mask, rows);
    tokens = models::select_rows(tokens, rows);
    cross_rows = models::select_rows(cross_rows, rows);
    for (Tensor& weights : cross_attention_weights)
        if (weights.defined()) weights = models::select_rows(weights, 0, rows);
}

void TransformerDecodingState::reorder_beams(const std::vector<int64_t>& rows, int64_t group) {
    self_attention.reorder_beams(rows, group);  // checks the rows and groups
    // A group's cross_rows and source mask are the same for all its rows.
    tokens = models::select_rows(tokens, rows);
    for (Tensor& weights : cross_attention_weights)
        if (weights.defined()) weights = models::select_rows(weights, 0, rows);
}

std::unique_ptr<DecodingState> Transformer::start_decoding(const IntTensor& src) {
    EncoderOutput encoded = encode(src);
    const int64_t batch = src.size(0), src_len = src.size(1);
    auto state = std::make_unique<TransformerDecodingState>();
    state->tokens = IntTensor::zeros({batch, 0});
    state->self_attention =
        nn::KeyValueCache(batch, static_cast<int64_t>(decoder_layers->size()), keys().d_model, keys().max_seq_len);
    state->cross_rows = IntTensor::zeros({batch, src_len});
    for (int64_t i = 0; i < batch; ++i)
        for (int64_t j = 0; j < src_len; ++j) state->cross_rows.data()[i * src_len + j] = i;
    for (const auto& layer : *decoder_layers)
        state->cross_attention.push_back(layer->cross_attention->project_keys_values(encoded.memory, encoded.memory));
    state->cross_attention_weights.resize(decoder_layers->size());
    state->src_mask = std::move(encoded.src_mask);
    return state;
}

Tensor Transformer::decode_step(DecodingState& decoding_state, const IntTensor& tokens) {
    auto& state = own_state<TransformerDecodingState>(decoding_state, kOp);
    const int64_t batch = state.rows(), position = state.length();
    check(tokens.dim() == 1 && tokens.size(0) == batch, kOp, "decode_step takes one token per row, [", batch, "], got ",
          tokens.shape());
    check(position < keys().max_seq_len, kOp, "decoding position ", position, " is beyond max_seq_len ",
          keys().max_seq_len);
    const IntTensor column = tokens.reshape({batch, 1});
    check_token_ids(column, config().tgt_vocab, kOp, "tokens");
    // The caches hold keys and values, not their history: stepping has no backward.
    NoGradGuard no_grad;
    state.self_attention.advance();
    state.tokens = append_column(state.tokens, column);
    // The keys are the tokens fed so far: no later ones exist, so causality holds by itself;
    // padding (a finished hypothesis fed <pad>) is masked as decode() masks it.
    const IntTensor self_mask = nn::padding_mask(state.tokens, kPad);  // [N, 1, 1, t + 1]
    Tensor x = embed(*tgt_embedding, column, position);                // [N, 1, d_model]
    for (size_t i = 0; i < decoder_layers->size(); ++i)
        x = (*decoder_layers)[i]->step(x, state, static_cast<int64_t>(i), self_mask);
    if (decoder_norm) x = decoder_norm->forward(x);
    return reshape(output->forward(x), {batch, config().tgt_vocab});
}

AttentionLayout Transformer::attention_layout() const {
    AttentionLayout layout;
    for (int64_t layer = 0; layer < keys().n_dec_layers; ++layer)
        for (int64_t head = 0; head < keys().n_heads; ++head)
            layout.titles.push_back("layer " + std::to_string(layer + 1) + " head " + std::to_string(head + 1));
    layout.maps_per_row = static_cast<size_t>(keys().n_heads);
    return layout;
}

std::vector<Tensor> Transformer::last_attention(const DecodingState& decoding_state) const {
    const auto& state = own_state<TransformerDecodingState>(decoding_state, kOp);
    std::vector<Tensor> weights;
    for (const Tensor& w : state.cross_attention_weights) {  // [B, H, 1, S] each
        if (!w.defined()) return {};                         // no step yet
        for (int64_t head = 0; head < w.size(1); ++head)
            weights.push_back(reshape(slice(w, 1, head, head + 1), {w.size(0), w.size(3)}));
    }
    return weights;
}

// ---- tying ----

std::vector<std::pair<std::string, std::string>> Transformer::tied_aliases() const {
    std::vector<std::pair<std::string, std::string>> aliases;
    if (keys().share_embeddings) aliases.emplace_back("tgt_embedding.weight", "src_embedding.weight");
    if (keys().tie_output)
        aliases.emplace_back("output.weight",
                             keys().share_embeddings ? "src_embedding.weight" : "tgt_embedding.weight");
    return aliases;
}

// ---- the registry's entry ----

namespace {

// The Transformer's keys, in docs/parity.md's order; those of its shape are the GPT's too.
const internal::OptionTable<TransformerKeys>& transformer_keys_table() {
    using K = TransformerKeys;
    const internal::OptionTable<K>& shape = transformer_shape_table<K>();
    static const internal::OptionTable<K> table =
        internal::OptionTable<K>(kModelConfig)
            .add(shape, {"d_model", "n_heads", "n_layers"})
            .add("n_enc_layers", "encoder layers (default n_layers)", &K::n_enc_layers)
            .at_least(0)
            .at_most(1 << 10)
            .add("n_dec_layers", "decoder layers (default n_layers)", &K::n_dec_layers)
            .at_least(0)
            .at_most(1 << 10)
            .add(shape, {"d_ff"})
            .add(encoder_stack_table<K>(), {"max_seq_len", "norm"})
            .add(shape, {"activation", "positional"})
            .add("share_embeddings", "one embedding for source and target (equal vocabularies)", &K::share_embeddings)
            .add(shape, {"tie_output"})
            .finish([](K& k, const std::set<std::string>& given) {
                // A file that gives only n_layers sets both stacks.
                if (!given.count("n_enc_layers")) k.n_enc_layers = k.n_layers;
                if (!given.count("n_dec_layers")) k.n_dec_layers = k.n_layers;
            });
    return table;
}

}  // namespace

void check_transformer_config(const ModelConfig& config) {
    const TransformerKeys& c = config.keys<TransformerKeys>();
    check(c.d_model % c.n_heads == 0, kOp, "d_model ", c.d_model, " is not divisible by n_heads ", c.n_heads);
    if (c.positional == "rope") {
        check((c.d_model / c.n_heads) % 2 == 0, kOp,
              "rotary positions pair a head's features, so d_model / n_heads "
              "must be even, got ",
              c.d_model / c.n_heads);
    } else {
        // The sinusoidal table pairs features (sin, cos), and a learned table starts from it; the
        // PyTorch model (make_fixtures.py) fails on an odd width too.
        check(c.d_model % 2 == 0, kOp, "d_model must be even for the ", c.positional, " positional encoding, got ",
              c.d_model);
    }
    check(!c.share_embeddings || config.src_vocab == config.tgt_vocab, kOp,
          "share_embeddings needs equal vocabularies, got src_vocab ", config.src_vocab, " and tgt_vocab ",
          config.tgt_vocab);
}

ModelKind transformer_kind() {
    ModelKind kind;
    kind.name = "transformer";
    kind.description = "the Transformer of Vaswani et al. (2017), Post-LN or Pre-LN";
    kind.keys = kind_keys(transformer_keys_table());
    kind.fit_vocabularies = [](ModelConfig& c) {
        TransformerKeys& keys = c.keys<TransformerKeys>();
        if (keys.share_embeddings && c.src_vocab != c.tgt_vocab) keys.share_embeddings = false;
    };
    kind.validate = check_transformer_config;
    kind.make = [](const ModelConfig& c, Generator& gen) { return std::make_shared<Transformer>(c, gen); };
    kind.width = [](const ModelConfig& c) { return c.keys<TransformerKeys>().d_model; };
    // max_seq_len bounds the target with the <s> before it.
    kind.max_length = [](const ModelConfig& c) { return c.keys<TransformerKeys>().max_seq_len; };
    kind.parameters = [](const ModelConfig& config) {
        const TransformerKeys& c = config.keys<TransformerKeys>();
        const int64_t d = c.d_model, src_vocab = config.src_vocab, tgt_vocab = config.tgt_vocab;
        const int64_t attention = 4 * (d * d + d), norm = 2 * d, ffn = 2 * c.d_ff * d + c.d_ff + d;
        int64_t n = src_vocab * d + (c.share_embeddings ? 0 : tgt_vocab * d);
        if (c.positional == "learned") n += c.max_seq_len * d;
        n += c.n_enc_layers * (attention + 2 * norm + ffn) + c.n_dec_layers * (2 * attention + 3 * norm + ffn);
        if (c.norm == "pre") n += 2 * norm;
        return n + (c.tie_output ? 0 : tgt_vocab * d) + tgt_vocab;
    };
    return kind;
}

}  // namespace seqgrad::models
