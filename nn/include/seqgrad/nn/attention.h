// Attention: the Transformer's MultiHeadAttention (Vaswani et al., 2017), the two scorers of the
// attention Seq2Seq decoder (AttentionSimple, scaled dot product, and AttentionParams,
// Bahdanau-style additive), and the masks they take.
//
// Masks are IntTensors: nonzero = attend, 0 = masked. Masked scores are set to -1e9 before the
// softmax (docs/parity.md), so a row whose keys are all masked gets uniform weights, never NaN.
#pragma once

#include <cstdint>
#include <memory>

#include "seqgrad/core/ops.h"
#include "seqgrad/nn/layers.h"
#include "seqgrad/nn/module.h"

namespace seqgrad::nn {

// ---- masks ----

// ids != pad as [B, 1, 1, S]: a key padding mask for scores [B, H, Tq, S].
IntTensor padding_mask(const IntTensor& ids, int64_t pad_id = 0);
// The lower triangle (key position <= query position) as [1, 1, T, T].
IntTensor causal_mask(int64_t len);
// The decoder's self-attention mask [B, 1, T, T]: padding_mask(ids) AND causal_mask(T), as the
// PyTorch Transformer's generate_mask builds it.
IntTensor decoder_mask(const IntTensor& ids, int64_t pad_id = 0);

// ---- multi-head attention ----

class KeyValueCache;

struct AttentionOutput {
    Tensor output;             // [B, Tq, d_model]
    Tensor attention_weights;  // [B, heads, Tq, Tk], after the softmax (before dropout)
};

// Keys and values projected (and, with rotary embedding, rotated), [B, Tk, d_model] each, heads
// side by side. A decoder computes them once for cross-attention (from the encoder's output), and
// its self-attention keeps them position by position in a KeyValueCache (kv_cache.h).
struct KeysValues {
    Tensor keys;
    Tensor values;
};

// The Transformer's multi-head attention with parameters wq, wk, wv, wo (Linear [d, d] each):
//   q, k, v = wq(query), wk(key), wv(value), split into heads [B, H, T, d/H]
//   weights = softmax(where(mask, q k^T / sqrt(d/H), -1e9))
//   output  = wo(merge_heads(dropout(weights) v))
// The middle two lines run as core's fused attention() on the unsplit projections; while a trace
// is recorded (seqgrad summary) they run as the composition above, so that every intermediate
// result can be reported. With `rotary`, queries and keys are rotated by their positions
// (apply_rotary) per head.
class MultiHeadAttention : public Module {
public:
    // Without `bias` the four projections have no bias (a GPT's option).
    MultiHeadAttention(int64_t d_model, int64_t n_heads, Generator& gen, float dropout = 0.0f,
                       std::shared_ptr<Generator> dropout_generator = nullptr, bool rotary = false, bool bias = true);

    // query [B, Tq, d], key and value [B, Tk, d]; mask broadcastable to [B, H, Tq, Tk] or
    // undefined (IntTensor()) for none.
    AttentionOutput forward(const Tensor& query, const Tensor& key, const Tensor& value,
                            const IntTensor& mask = IntTensor()) const;

    // forward() in two halves, for decoding with a cache. `position` is the position of the
    // first key (or query) for rotary embedding; it is unused otherwise.
    KeysValues project_keys_values(const Tensor& key, const Tensor& value, int64_t position = 0) const;
    AttentionOutput attend(const Tensor& query, const KeysValues& keys_values, const IntTensor& mask,
                           int64_t position = 0) const;
    // attend() for decoding one position per row over keys and values kept in caches that are
    // read through a table of rows (core's gathered_attention, which says how): query [N, 1, d],
    // keys_values [M, C, d] each, rows [N, >= length]; mask broadcastable to [N, H, 1, length].
    // Decoding only (no gradient).
    AttentionOutput attend_gathered(const Tensor& query, const KeysValues& keys_values, const IntTensor& rows,
                                    int64_t length, const IntTensor& mask, int64_t position = 0) const;
    // Self-attention of one new position per row, for decoding step by step: x [N, 1, d] is at
    // position cache.length() - 1 (the cache has advanced to it); its keys and values are written
    // into the cache's `layer`, then it attends over every position so far, through the cache's
    // table of rows. mask broadcastable to [N, H, 1, length] (the rows' padding) or none. Equal to
    // forward() over the whole prefix with a causal mask, at its last position. No gradient.
    AttentionOutput step(const Tensor& x, KeyValueCache& cache, int64_t layer,
                         const IntTensor& mask = IntTensor()) const;
    // Self-attention of a whole prefix at once, x [N, P, d] at positions 0..P-1 of a cache that held
    // nothing before it advanced by P: writes the prefix's keys and values into the cache's `layer`
    // and attends causally within the prefix, as forward() with a causal mask does. No gradient.
    AttentionOutput prefill(const Tensor& x, KeyValueCache& cache, int64_t layer) const;

    std::shared_ptr<Linear> wq, wk, wv, wo;
    std::shared_ptr<Dropout> dropout;
    int64_t d_model, n_heads, d_head;
    bool rotary;

private:
    Tensor split_heads(const Tensor& x) const;               // [B, T, d] -> [B, H, T, d_head]
    Tensor merge_heads(const Tensor& x) const;               // [B, H, T, d_head] -> [B, T, d]
    Tensor rotate(const Tensor& x, int64_t position) const;  // apply_rotary per head, [B, T, d]
    // wq(query) (rotated): [B, Tq, d]
    Tensor project_queries(const Tensor& query, int64_t position) const;
    // The rest of attend_gathered() once the queries are projected (and rotated).
    AttentionOutput attend_gathered_heads(const Tensor& q, const KeysValues& keys_values, const IntTensor& rows,
                                          int64_t length, const IntTensor& mask) const;
    // The rest of attend() once the queries are projected.
    AttentionOutput attend_heads(const Tensor& q, const KeysValues& keys_values, const IntTensor& mask) const;
    // The same, as the composition of primitive operations, tracing each intermediate result.
    AttentionOutput attend_heads_traced(const Tensor& q, const KeysValues& keys_values, const IntTensor& mask) const;
};

// ---- the attention Seq2Seq decoder's scorers ----

// Weights over the encoder outputs for one decoder step. A scorer splits its work in two: keys()
// is what the scores need of the encoder outputs, the same at every step, so a decoder computes it
// once per source; weights() is the rest, for one step's query. forward() does both.
class Seq2SeqAttention : public Module {
public:
    // encoder_outputs [B, S, h] -> the keys the scores read, [B, S, h].
    virtual Tensor keys(const Tensor& encoder_outputs) const = 0;
    // query [B, h] (the top layer of the previous decoder state), keys from keys(), src_mask
    // [B, S] (nonzero = attend; the other scores are set to -1e9) -> softmax over S, [B, S].
    virtual Tensor weights(const Tensor& query, const Tensor& keys, const IntTensor& src_mask) const = 0;
    Tensor forward(const Tensor& query, const Tensor& encoder_outputs, const IntTensor& src_mask) const {
        return weights(query, keys(encoder_outputs), src_mask);
    }
};

// Luong-style dot attention, scaled: score_j = (query . enc_j) / sqrt(hidden). No parameters; the
// keys are the encoder outputs themselves.
class AttentionSimple : public Seq2SeqAttention {
public:
    explicit AttentionSimple(int64_t hidden_size);
    Tensor keys(const Tensor& encoder_outputs) const override;
    Tensor weights(const Tensor& query, const Tensor& keys, const IntTensor& src_mask) const override;

    int64_t hidden_size;
};

// Bahdanau-style additive attention: score_j = v . tanh(attn([query; enc_j])), with attn Linear
// [h, 2h] (its first h columns multiply the query, the last h the encoder output) and v [h],
// initialised uniform [0, 1) as torch.rand. attn([q; e]) = q W_q^T + b + e W_e^T: the keys are
// e W_e^T, the largest product of a step ([B, S, h] by [h, h]), computed once per source.
class AttentionParams : public Seq2SeqAttention {
public:
    AttentionParams(int64_t hidden_size, Generator& gen);
    Tensor keys(const Tensor& encoder_outputs) const override;
    Tensor weights(const Tensor& query, const Tensor& keys, const IntTensor& src_mask) const override;

    std::shared_ptr<Linear> attn;
    Tensor v;  // [h]
};

}  // namespace seqgrad::nn
