// The GPT (gpt.h): its blocks, the model, step-by-step decoding through a key/value cache, and its
// registry entry.
#include "seqgrad/models/gpt.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kind_keys.h"
#include "seqgrad/core/autograd.h"
#include "seqgrad/core/ops.h"
#include "seqgrad/models/common.h"
#include "seqgrad/nn/init.h"
#include "seqgrad/nn/trace.h"

namespace seqgrad::models {
namespace {

const char* kOp = "GPT";
constexpr float kNormEps = 1e-5f;  // GPT-2's LayerNorm

nn::Activation activation_of(const GptKeys& keys) {
    return keys.activation == "relu" ? nn::Activation::relu : nn::Activation::gelu;
}

}  // namespace

// ---- a block ----

GptBlock::GptBlock(const ModelConfig& config, Generator& gen, std::shared_ptr<Generator> dropout_generator) {
    const GptKeys& c = config.keys<GptKeys>();
    attention_norm = register_module("attention_norm", std::make_shared<nn::LayerNorm>(c.d_model, kNormEps, c.bias));
    attention = register_module("attention",
                                std::make_shared<nn::MultiHeadAttention>(c.d_model, c.n_heads, gen, config.dropout,
                                                                         dropout_generator,
                                                                         /*rotary=*/c.positional == "rope", c.bias));
    ffn_norm = register_module("ffn_norm", std::make_shared<nn::LayerNorm>(c.d_model, kNormEps, c.bias));
    feed_forward =
        register_module("feed_forward", std::make_shared<nn::FeedForward>(c.d_model, c.d_ff, gen, activation_of(c),
                                                                          config.dropout, dropout_generator, c.bias));
    dropout = register_module("dropout", std::make_shared<nn::Dropout>(config.dropout, dropout_generator));
}

template <typename Attend>
Tensor GptBlock::run(const Tensor& x, Attend&& attend) const {
    const Tensor h = dropout->add_to(x, attend(attention_norm->forward(x)));
    return dropout->add_to(h, feed_forward->forward(ffn_norm->forward(h)));
}

Tensor GptBlock::forward(const Tensor& x, const IntTensor& causal) const {
    return run(x, [&](const Tensor& y) { return attention->forward(y, y, y, causal).output; });
}

Tensor GptBlock::step(const Tensor& x, nn::KeyValueCache& cache, int64_t layer) const {
    return run(x, [&](const Tensor& y) { return attention->step(y, cache, layer).output; });
}

Tensor GptBlock::prefill(const Tensor& x, nn::KeyValueCache& cache, int64_t layer) const {
    return run(x, [&](const Tensor& y) { return attention->prefill(y, cache, layer).output; });
}

// ---- the model ----

Gpt::Gpt(const ModelConfig& config, Generator& gen) : LanguageModel(config) {
    check(config.model.empty() || config.model == "gpt", kOp, "the config is for a \"", config.model, "\" model");
    ModelConfig named = config;  // a config built in code may leave the kind out
    named.model = "gpt";
    named.validate();  // every key's range, then check_gpt_config
    const GptKeys& k = keys();
    const int64_t d = k.d_model;
    // Every dropout mask comes from the model's one generator, which a checkpoint saves.
    const std::shared_ptr<Generator>& dropout_generator = random_ptr();

    token_embedding = register_module("token_embedding", std::make_shared<nn::Embedding>(config.vocab, d, gen));
    if (k.positional == "learned")
        position_embedding = register_module("position_embedding", std::make_shared<nn::Embedding>(k.context, d, gen));
    else if (k.positional == "sinusoidal")
        sinusoidal = register_module("sinusoidal", std::make_shared<nn::PositionalEncoding>(d, k.context));
    dropout = register_module("dropout", std::make_shared<nn::Dropout>(config.dropout, dropout_generator));
    blocks = register_module("blocks", std::make_shared<nn::ModuleList<GptBlock>>());
    for (int64_t i = 0; i < k.n_layers; ++i)
        blocks->push_back(std::make_shared<GptBlock>(config, gen, dropout_generator));
    final_norm = register_module("final_norm", std::make_shared<nn::LayerNorm>(d, kNormEps, k.bias));
    output = register_module("output", k.tie_output
                                           ? std::make_shared<OutputProjection>(token_embedding->weight, gen, false)
                                           : std::make_shared<OutputProjection>(d, config.vocab, gen, false));

    // GPT-2's initialisation: N(0, 0.02) for every matrix and embedding; the projections that add
    // into the residual stream scaled down by sqrt(2 n_layers), as there are 2 n_layers of them
    // summing; biases zero (norms keep gamma 1, beta 0).
    const float residual_scale = 1.0f / std::sqrt(2.0f * static_cast<float>(k.n_layers));
    for (const auto& [name, param] : named_parameters()) {
        if (param.dim() >= 2) {
            const bool residual = name.ends_with(".attention.wo.weight") || name.ends_with(".feed_forward.w2.weight");
            nn::init_normal(param, gen, residual ? 0.02f * residual_scale : 0.02f);
        } else if (name.ends_with(".bias")) {
            Tensor bias = param;  // a handle to the same storage
            std::fill_n(bias.data(), bias.numel(), 0.0f);
        }
    }
}

void Gpt::check_tokens(const IntTensor& ids, const char* what) const {
    check_token_ids(ids, config().vocab, kOp, what);
    check(ids.size(1) <= keys().context, kOp, what, " length ", ids.size(1), " exceeds the context, ", keys().context);
}

Tensor Gpt::embed(const IntTensor& ids, int64_t position) const {
    const int64_t length = ids.size(1);
    if (position_embedding) {
        std::vector<int64_t> count(static_cast<size_t>(length));
        std::iota(count.begin(), count.end(), position);
        const IntTensor positions = IntTensor::from_vector(count, {length});
        // Both rows summed in one pass; while tracing, looked up as modules, so that the summary shows them.
        if (!nn::tracing())
            return dropout->forward(embeddings_sum({token_embedding->weight, position_embedding->weight},
                                                   {ids, positions}));
        return dropout->forward(add(token_embedding->forward(ids), position_embedding->forward(positions)));
    }
    const Tensor x = token_embedding->forward(ids);  // [B, T, d_model]
    if (sinusoidal) return dropout->forward(add(x, slice(sinusoidal->table, 0, position, position + length)));
    return dropout->forward(x);  // rotary positions: applied in attention
}

Tensor Gpt::logits_of(const Tensor& x) const { return output->forward(final_norm->forward(x)); }

Tensor Gpt::forward(const IntTensor& tokens) {
    check_tokens(tokens, "tokens");
    const IntTensor causal = nn::causal_mask(tokens.size(1));  // [1, 1, T, T]
    Tensor x = embed(tokens, 0);
    for (const auto& block : *blocks) x = block->forward(x, causal);
    return logits_of(x);  // [B, T, vocab]
}

// ---- decoding ----

std::unique_ptr<DecodingState> Gpt::start_decoding(const IntTensor& source) {
    check(source.dim() == 2 && source.size(0) >= 1 && source.size(1) == 0, kOp,
          "a language model reads no source: start_decoding takes [rows, 0], got ", source.shape());
    auto state = std::make_unique<GptDecodingState>();
    state->cache = nn::KeyValueCache(source.size(0), keys().n_layers, keys().d_model, keys().context);
    return state;
}

Tensor Gpt::decode_step(DecodingState& decoding_state, const IntTensor& tokens) {
    nn::KeyValueCache& cache = own_state<GptDecodingState>(decoding_state, kOp).cache;
    const int64_t rows = cache.rows();
    check(tokens.dim() == 1 && tokens.size(0) == rows, kOp, "decode_step takes one token per row, [", rows, "], got ",
          tokens.shape());
    check(cache.length() < keys().context, kOp, "decoding position ", cache.length(), " is beyond the context, ",
          keys().context);
    const IntTensor column = tokens.reshape({rows, 1});
    check_token_ids(column, config().vocab, kOp, "tokens");
    NoGradGuard no_grad;
    const int64_t position = cache.advance();
    Tensor x = embed(column, position);  // [N, 1, d_model]
    for (size_t i = 0; i < blocks->size(); ++i) x = (*blocks)[i]->step(x, cache, static_cast<int64_t>(i));
    return reshape(logits_of(x), {rows, config().vocab});
}

Tensor Gpt::prefill(DecodingState& decoding_state, const IntTensor& prefix) {
    auto* state = &own_state<GptDecodingState>(decoding_state, kOp);
    // A prompt after earlier steps steps through (a block's prefill attends within the prefix alone).
    if (state->cache.length() > 0) return LanguageModel::prefill(decoding_state, prefix);
    nn::KeyValueCache& cache = state->cache;
    const int64_t rows = cache.rows();
    check(prefix.dim() == 2 && prefix.size(0) == rows && prefix.size(1) >= 1, kOp, "prefill takes a prefix [", rows,
          ", length >= 1], got ", prefix.shape());
    check_tokens(prefix, "prefix");
    NoGradGuard no_grad;
    const int64_t length = prefix.size(1);
    cache.advance(length);
    Tensor x = embed(prefix, 0);  // [N, P, d_model]
    for (size_t i = 0; i < blocks->size(); ++i) x = (*blocks)[i]->prefill(x, cache, static_cast<int64_t>(i));
    // Only the last position's logits are needed: normalise and project that one alone.
    const Tensor last = slice(x, 1, length - 1, length);  // [N, 1, d_model]
    return reshape(logits_of(last), {rows, config().vocab});
}

// ---- the registry's entry ----

namespace {

// The GPT's keys, in docs/parity.md's order; those of its shape are the Transformer's too.
const internal::OptionTable<GptKeys>& gpt_keys_table() {
    using K = GptKeys;
    const internal::OptionTable<K>& shape = transformer_shape_table<K>();
    static const internal::OptionTable<K> table =
        internal::OptionTable<K>(kModelConfig)
            .add("context", "a language model's longest window, in tokens", &K::context)
            .at_least(1)
            .at_most(1 << 16)
            .add(shape, {"d_model", "n_heads", "n_layers", "d_ff"})
            .add("bias", "a language model's linear layers and norms have biases", &K::bias)
            .add(shape, {"positional", "activation", "tie_output"});
    return table;
}

}  // namespace

void check_gpt_config(const ModelConfig& config) {
    const GptKeys& c = config.keys<GptKeys>();
    check_heads_and_positions(c, kOp);
}

ModelKind gpt_kind() {
    ModelKind kind;
    kind.name = "gpt";
    kind.description = "a decoder-only language model (GPT-2's design), Pre-LN, causal self-attention";
    kind.vocabularies = {"vocab"};
    kind.keys = kind_keys(gpt_keys_table());
    kind.validate = check_gpt_config;
    kind.make = [](const ModelConfig& c, Generator& gen) { return std::make_shared<Gpt>(c, gen); };
    kind.width = [](const ModelConfig& c) { return c.keys<GptKeys>().d_model; };
    kind.max_length = [](const ModelConfig& c) { return c.keys<GptKeys>().context; };
    kind.parameters = [](const ModelConfig& config) {
        const GptKeys& c = config.keys<GptKeys>();
        const int64_t d = c.d_model, b = c.bias ? 1 : 0, vocab = config.vocab;
        const int64_t norm = d + b * d;  // gamma, beta
        const int64_t attention = 4 * (d * d + b * d), ffn = 2 * c.d_ff * d + b * (c.d_ff + d);
        int64_t n = vocab * d + (c.positional == "learned" ? c.context * d : 0);
        n += c.n_layers * (attention + ffn + 2 * norm) + norm;
        return n + (c.tie_output ? 0 : vocab * d);
    };
    return kind;
}

}  // namespace seqgrad::models
