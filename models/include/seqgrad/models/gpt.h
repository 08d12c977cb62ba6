// A decoder-only language model, GPT (Radford et al., 2018 and 2019): the Transformer's decoder
// without cross-attention, reading a text's own past (the seeds' "a conditional language model;
// without an encoder, a decoder-only model such as GPT"). docs/parity.md names its parameters.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "seqgrad/models/model.h"
#include "seqgrad/models/registry.h"
#include "seqgrad/models/transformer.h"
#include "seqgrad/nn/attention.h"
#include "seqgrad/nn/kv_cache.h"
#include "seqgrad/nn/layers.h"
#include "seqgrad/nn/module.h"
#include "seqgrad/nn/positional.h"

namespace seqgrad::models {

// The GPT's config keys (docs/parity.md, "gpt"): the Transformer's shape, with GPT-2 small's design
// (learned positions, GELU, the output tied to the embedding) and sizes as defaults, and its own.
struct GptKeys : TransformerShape {
    GptKeys()
        : TransformerShape{.d_model = 768,
                           .n_heads = 12,
                           .n_layers = 12,
                           .d_ff = 3072,
                           .activation = "gelu",
                           .positional = "learned",
                           .tie_output = true} {}
    int64_t context = 1024;  // the longest window read at once
    bool bias = true;        // biases of every linear layer and norm in its blocks
};

// One block, Pre-LN: x = x + dropout(attention(attention_norm(x))) with causal self-attention,
// then x = x + dropout(feed_forward(ffn_norm(x))).
class GptBlock : public nn::Module {
public:
    GptBlock(const ModelConfig& config, Generator& gen, std::shared_ptr<Generator> dropout_generator);
    // x [B, T, d_model], the causal mask [1, 1, T, T] -> [B, T, d_model]
    Tensor forward(const Tensor& x, const IntTensor& causal) const;
    // Decoding: x [N, 1, d_model] at the cache's newest position, or (prefill) the cache's whole
    // prefix [N, P, d_model]; its keys and values go into the cache's `layer`.
    Tensor step(const Tensor& x, nn::KeyValueCache& cache, int64_t layer) const;
    Tensor prefill(const Tensor& x, nn::KeyValueCache& cache, int64_t layer) const;

    std::shared_ptr<nn::LayerNorm> attention_norm;
    std::shared_ptr<nn::MultiHeadAttention> attention;
    std::shared_ptr<nn::LayerNorm> ffn_norm;
    std::shared_ptr<nn::FeedForward> feed_forward;
    std::shared_ptr<nn::Dropout> dropout;

private:
    template <typename Attend>
    Tensor run(const Tensor& x, Attend&& attend) const;
};

// The GPT's decoding state: every block's keys and values so far, in one key/value cache.
struct GptDecodingState : DecodingState {
    void select_rows(const std::vector<int64_t>& rows) override { cache.select_rows(rows); }
    void reorder_beams(const std::vector<int64_t>& rows, int64_t group) override { cache.reorder_beams(rows, group); }
    nn::KeyValueCache cache;
};

// The model (docs/parity.md, "gpt"), over tokens [B, T] with T <= context:
//   x = dropout(token_embedding(ids) + positions[:T])      (no sqrt(d_model) scaling)
//   x = blocks(x)                                          (n_layers GptBlocks, causal)
//   logits = final_norm(x) W^T                             (W: token_embedding.weight when tied)
// Positions (keys().positional): "learned", position_embedding.weight [context, d_model]; the
// sinusoidal table of the Transformer (a buffer); or "rope", rotary positions in attention. With
// `bias` false, no linear layer or norm of the blocks has a bias; the output projection never has
// one. Initialisation as GPT-2: every weight normal(0, 0.02), the two projections into the residual
// stream (attention.wo, feed_forward.w2) normal(0, 0.02 / sqrt(2 n_layers)), biases zero.
class Gpt : public LanguageModel {
public:
    Gpt(const ModelConfig& config, Generator& gen);
    const GptKeys& keys() const { return config().keys<GptKeys>(); }

    // tokens [B, T] -> logits [B, T, vocab]
    Tensor forward(const IntTensor& tokens) override;

    // Decoding (step_decoder.h): start_decoding takes [N, 0] (a language model reads no source);
    // prefill reads a prompt in one pass when the state is new, else steps through it.
    std::unique_ptr<DecodingState> start_decoding(const IntTensor& source) override;
    Tensor decode_step(DecodingState& state, const IntTensor& tokens) override;
    Tensor prefill(DecodingState& state, const IntTensor& prefix) override;
    int64_t max_decode_length() const override { return keys().context; }

    std::shared_ptr<nn::Embedding> token_embedding;
    std::shared_ptr<nn::Embedding> position_embedding;   // "learned" only, else null
    std::shared_ptr<nn::PositionalEncoding> sinusoidal;  // "sinusoidal" only, else null
    std::shared_ptr<nn::Dropout> dropout;
    std::shared_ptr<nn::ModuleList<GptBlock>> blocks;
    std::shared_ptr<nn::LayerNorm> final_norm;
    std::shared_ptr<OutputProjection> output;  // its weight the token embedding's when tied

private:
    // ids [B, T] at positions position.. -> dropout(embedding + positions), [B, T, d_model]
    Tensor embed(const IntTensor& ids, int64_t position) const;
    Tensor logits_of(const Tensor& x) const;  // final_norm, then the output projection
    void check_tokens(const IntTensor& ids, const char* what) const;
};

// The checks across keys of a GPT config (d_model a multiple of n_heads, even widths where positions
// pair features). The registry's ModelKind::validate.
void check_gpt_config(const ModelConfig& config);

// The registry's entry for "gpt" (registry.h).
ModelKind gpt_kind();

}  // namespace seqgrad::models
