// Attention: masks, MultiHeadAttention, and the attention Seq2Seq scorers AttentionSimple (scaled
// dot product) and AttentionParams (Bahdanau-style additive).
#include "seqgrad/nn/attention.h"

#include <algorithm>
#include <cmath>

#include "seqgrad/core/ops.h"
#include "seqgrad/nn/kv_cache.h"
#include "seqgrad/nn/positional.h"
#include "seqgrad/nn/trace.h"

namespace seqgrad::nn {
namespace {

bool has_mask(const IntTensor& mask) { return mask.numel() > 0; }

// Scores set to -1e9 where the mask is 0 (the PyTorch models' masked_fill(mask == 0, -1e9)).
Tensor mask_scores(const Tensor& scores, const IntTensor& mask, const char* op) {
    if (!has_mask(mask)) return scores;
    check(broadcast_shapes(scores.shape(), mask.shape(), op) == scores.shape(), op, "mask ", mask.shape(),
          " does not broadcast to the scores ", scores.shape());
    return where(mask, scores, kAttentionMaskFill);
}

Tensor divide_by_sqrt(const Tensor& x, int64_t n) { return div(x, Tensor::scalar(std::sqrt(static_cast<float>(n)))); }

}  // namespace

// ---- masks ----

IntTensor padding_mask(const IntTensor& ids, int64_t pad_id) {
    check(ids.dim() == 2, "padding_mask", "expects ids [batch, len], got ", ids.shape());
    IntTensor mask = IntTensor::zeros({ids.size(0), 1, 1, ids.size(1)});
    for (int64_t i = 0; i < ids.numel(); ++i) mask.data()[i] = ids.data()[i] != pad_id ? 1 : 0;
    return mask;
}

IntTensor causal_mask(int64_t len) {
    check(len >= 0, "causal_mask", "negative length ", len);
    IntTensor mask = IntTensor::zeros({1, 1, len, len});
    for (int64_t q = 0; q < len; ++q)
        for (int64_t k = 0; k <= q; ++k) mask.data()[q * len + k] = 1;
    return mask;
}

IntTensor decoder_mask(const IntTensor& ids, int64_t pad_id) {
    check(ids.dim() == 2, "decoder_mask", "expects ids [batch, len], got ", ids.shape());
    const int64_t batch = ids.size(0), len = ids.size(1);
    IntTensor mask = IntTensor::zeros({batch, 1, len, len});
    for (int64_t b = 0; b < batch; ++b)
        for (int64_t q = 0; q < len; ++q)
            for (int64_t k = 0; k <= q; ++k)
                mask.data()[(b * len + q) * len + k] = ids.data()[b * len + k] != pad_id ? 1 : 0;
    return mask;
}

// ---- MultiHeadAttention ----

MultiHeadAttention::MultiHeadAttention(int64_t d_model_, int64_t n_heads_, Generator& gen, float dropout_p,
                                       std::shared_ptr<Generator> dropout_generator, bool rotary_, bool bias)
    : d_model(d_model_), n_heads(n_heads_), d_head(n_heads_ > 0 ? d_model_ / n_heads_ : 0), rotary(rotary_) {
    check(n_heads > 0 && d_model > 0 && d_model % n_heads == 0, "MultiHeadAttention", "d_model ", d_model,
          " must be a positive multiple of n_heads ", n_heads);
    check(!rotary || d_head % 2 == 0, "MultiHeadAttention", "rotary embedding needs an even head size, got ", d_head);
    wq = register_module("wq", std::make_shared<Linear>(d_model, d_model, gen, bias));
    wk = register_module("wk", std::make_shared<Linear>(d_model, d_model, gen, bias));
    wv = register_module("wv", std::make_shared<Linear>(d_model, d_model, gen, bias));
    wo = register_module("wo", std::make_shared<Linear>(d_model, d_model, gen, bias));
    dropout = register_module("dropout", std::make_shared<Dropout>(dropout_p, std::move(dropout_generator)));
}

Tensor MultiHeadAttention::split_heads(const Tensor& x) const {
    check(x.dim() == 3 && x.size(2) == d_model, "MultiHeadAttention", "expects [batch, len, ", d_model, "], got ",
          x.shape());
    return transpose(reshape(x, {x.size(0), x.size(1), n_heads, d_head}), 1, 2);
}

Tensor MultiHeadAttention::merge_heads(const Tensor& x) const {
    return reshape(transpose(x, 1, 2), {x.size(0), x.size(2), d_model});
}

Tensor MultiHeadAttention::rotate(const Tensor& x, int64_t position) const {
    return rotary ? merge_heads(apply_rotary(split_heads(x), position)) : x;
}

KeysValues MultiHeadAttention::project_keys_values(const Tensor& key, const Tensor& value, int64_t position) const {
    check(key.dim() == 3 && value.dim() == 3, "MultiHeadAttention", "key and value must be [batch, length, ", d_model,
          "], got ", key.shape(), " and ", value.shape());
    check(key.size(0) == value.size(0) && key.size(1) == value.size(1), "MultiHeadAttention", "key ", key.shape(),
          " and value ", value.shape(), " differ in batch or length");
    if (key.impl() == value.impl()) {  // one input (self-attention, decoding): quantized once if int8
        const std::vector<Tensor> kv = nn::Linear::forward_each(key, {wk.get(), wv.get()});
        return {rotate(kv[0], position), kv[1]};
    }
    return {rotate(wk->forward(key), position), wv->forward(value)};  // [B, Tk, d] each
}

Tensor MultiHeadAttention::project_queries(const Tensor& query, int64_t position) const {
    return rotate(wq->forward(query), position);  // [B, Tq, d]
}

AttentionOutput MultiHeadAttention::attend_heads(const Tensor& q, const KeysValues& kv, const IntTensor& mask) const {
    check(kv.keys.dim() == 3 && kv.keys.size(0) == q.size(0) && kv.keys.size(2) == d_model, "MultiHeadAttention",
          "keys ", kv.keys.shape(), " do not fit queries ", q.shape());
    if (tracing()) return attend_heads_traced(q, kv, mask);
    if (has_mask(mask)) {
        const Shape scores{q.size(0), n_heads, q.size(1), kv.keys.size(1)};
        check(mask.dim() <= 4 && broadcast_shapes(scores, mask.shape(), "MultiHeadAttention") == scores,
              "MultiHeadAttention", "mask ", mask.shape(), " does not broadcast to the scores ", scores);
    }
    Tensor weights;
    const Tensor context = seqgrad::attention(q, kv.keys, kv.values, n_heads, mask, dropout->p(),
                                              dropout->is_training(), &dropout->generator(), &weights);
    return {wo->forward(context), weights};
}

AttentionOutput MultiHeadAttention::attend_heads_traced(const Tensor& q_merged, const KeysValues& kv,
                                                        const IntTensor& mask) const {
    const Tensor q = split_heads(q_merged), keys = split_heads(kv.keys), values = split_heads(kv.values);
    trace(*this, "q heads", q);
    trace(*this, "k heads", keys);
    trace(*this, "v heads", values);
    Tensor scores = divide_by_sqrt(matmul(q, keys, false, true), d_head);  // [B, H, Tq, Tk]
    scores = mask_scores(scores, mask, "MultiHeadAttention");
    trace(*this, "scores", scores);
    const Tensor weights = softmax(scores, -1);
    trace(*this, "weights", weights);
    const Tensor context = matmul(dropout->forward(weights), values);  // [B, H, Tq, d_head]
    trace(*this, "context", context);
    const Tensor merged = merge_heads(context);
    trace(*this, "merged", merged);
    return {wo->forward(merged), weights};
}

AttentionOutput MultiHeadAttention::attend(const Tensor& query, const KeysValues& kv, const IntTensor& mask,
                                           int64_t position) const {
    return attend_heads(project_queries(query, position), kv, mask);
}

AttentionOutput MultiHeadAttention::attend_gathered(const Tensor& query, const KeysValues& kv, const IntTensor& rows,
                                                    int64_t length, const IntTensor& mask, int64_t position) const {
    return attend_gathered_heads(project_queries(query, position), kv, rows, length, mask);
}

AttentionOutput MultiHeadAttention::attend_gathered_heads(const Tensor& q, const KeysValues& kv, const IntTensor& rows,
                                                          int64_t length, const IntTensor& mask) const {
    if (tracing()) {  // the traced composition needs the keys side by side: gather them
        check(rows.dim() == 2 && rows.size(0) == q.size(0) && length <= rows.size(1) && kv.keys.dim() == 3 &&
                  length <= kv.keys.size(1),
              "MultiHeadAttention", "rows ", rows.shape(), " do not fit keys ", kv.keys.shape());
        const int64_t n = q.size(0), capacity = kv.keys.size(1);
        Tensor keys = Tensor::empty({n, length, d_model}), values = Tensor::empty({n, length, d_model});
        for (int64_t i = 0; i < n; ++i)
            for (int64_t j = 0; j < length; ++j) {
                const int64_t r = rows.data()[i * rows.size(1) + j];
                check(r >= 0 && r < kv.keys.size(0), "MultiHeadAttention", "row ", r, " is outside the cache");
                const int64_t from = (r * capacity + j) * d_model, to = (i * length + j) * d_model;
                std::copy_n(kv.keys.data() + from, d_model, keys.data() + to);
                std::copy_n(kv.values.data() + from, d_model, values.data() + to);
            }
        return attend_heads_traced(q, {keys, values}, mask);
    }
    Tensor weights;
    const Tensor context = gathered_attention(q, kv.keys, kv.values, rows, length, n_heads, mask, &weights);
    return {wo->forward(context), weights};
}

AttentionOutput MultiHeadAttention::step(const Tensor& x, KeyValueCache& cache, int64_t layer,
                                         const IntTensor& mask) const {
    const int64_t position = cache.length() - 1;  // the new one's, for rotary positions
    if (tracing()) {  // each projection traced on its own, in the order forward() takes them
        cache.write(layer, project_keys_values(x, x, position));
        return attend_gathered(x, cache.stored(layer), cache.table(), cache.length(), mask, position);
    }
    // The queries, keys and values of x in one call: with packed weights and one to four rows,
    // the three products are one job between the threads rather than three.
    const std::vector<Tensor> qkv = Linear::forward_each(x, {wq.get(), wk.get(), wv.get()});
    cache.write(layer, {rotate(qkv[1], position), qkv[2]});
    return attend_gathered_heads(rotate(qkv[0], position), cache.stored(layer), cache.table(), cache.length(), mask);
}

AttentionOutput MultiHeadAttention::prefill(const Tensor& x, KeyValueCache& cache, int64_t layer) const {
    check(x.dim() == 3 && x.size(1) == cache.length(), "MultiHeadAttention", "prefill takes the cache's whole ",
          cache.length(), " positions, got ", x.shape());
    const KeysValues kv = project_keys_values(x, x);
    cache.write(layer, kv);
    return attend(x, kv, causal_mask(x.size(1)));
}

AttentionOutput MultiHeadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                            const IntTensor& mask) const {
    // Queries are projected before keys and values only so that a trace lists the projections in
    // the order Q, K, V; no result depends on the order.
    if (query.impl() == key.impl() && key.impl() == value.impl()) {  // self-attention: one input for all three
        const std::vector<Tensor> qkv = nn::Linear::forward_each(query, {wq.get(), wk.get(), wv.get()});
        return attend_heads(rotate(qkv[0], 0), {rotate(qkv[1], 0), qkv[2]}, mask);
    }
    const Tensor q = project_queries(query, 0);
    return attend_heads(q, project_keys_values(key, value), mask);
}

// ---- the attention Seq2Seq scorers ----

namespace {

void check_scorer_inputs(const Tensor& query, const Tensor& keys, const IntTensor& src_mask, int64_t hidden,
                         const char* op) {
    check(query.dim() == 2 && query.size(1) == hidden, op, "query must be [batch, ", hidden, "], got ", query.shape());
    check(keys.dim() == 3 && keys.size(0) == query.size(0) && keys.size(2) == hidden, op, "encoder outputs must be [",
          query.size(0), ", src_len, ", hidden, "], got ", keys.shape());
    check(!has_mask(src_mask) || src_mask.shape() == Shape{keys.size(0), keys.size(1)}, op,
          "src_mask must be [batch, src_len] = [", keys.size(0), ", ", keys.size(1), "], got ", src_mask.shape());
}

void check_encoder_outputs(const Tensor& encoder_outputs, int64_t hidden, const char* op) {
    check(encoder_outputs.defined() && encoder_outputs.dim() == 3 && encoder_outputs.size(2) == hidden, op,
          "encoder outputs must be [batch, src_len, ", hidden, "], got ",
          encoder_outputs.defined() ? encoder_outputs.shape() : Shape{});
}

}  // namespace

AttentionSimple::AttentionSimple(int64_t hidden_size_) : hidden_size(hidden_size_) {
    check(hidden_size > 0, "AttentionSimple", "hidden size must be positive, got ", hidden_size);
}

Tensor AttentionSimple::keys(const Tensor& encoder_outputs) const {
    check_encoder_outputs(encoder_outputs, hidden_size, "AttentionSimple");
    return encoder_outputs;
}

Tensor AttentionSimple::weights(const Tensor& query, const Tensor& keys, const IntTensor& src_mask) const {
    check_scorer_inputs(query, keys, src_mask, hidden_size, "AttentionSimple");
    const int64_t batch = query.size(0), src_len = keys.size(1);
    const Tensor q = reshape(query, {batch, 1, hidden_size});
    Tensor scores = reshape(matmul(q, keys, false, true), {batch, src_len});  // [B, S]
    scores = divide_by_sqrt(scores, hidden_size);
    Tensor weights = softmax(mask_scores(scores, src_mask, "AttentionSimple"), 1);
    trace(*this, weights);
    return weights;
}

AttentionParams::AttentionParams(int64_t hidden_size, Generator& gen) {
    attn = register_module("attn", std::make_shared<Linear>(2 * hidden_size, hidden_size, gen));
    v = register_parameter("v", Tensor::uniform({hidden_size}, 0.0f, 1.0f, gen));
}

Tensor AttentionParams::keys(const Tensor& encoder_outputs) const {
    const int64_t hidden = v.size(0);
    check_encoder_outputs(encoder_outputs, hidden, "AttentionParams");
    const Tensor w_enc = slice(attn->weight, 1, hidden, 2 * hidden);  // [h, h]
    return linear(encoder_outputs, w_enc, Tensor());                  // [B, S, h]
}

Tensor AttentionParams::weights(const Tensor& query, const Tensor& keys, const IntTensor& src_mask) const {
    const int64_t hidden = v.size(0);
    check_scorer_inputs(query, keys, src_mask, hidden, "AttentionParams");
    // The query's part of attn([q; e]) added to every key: the PyTorch model's concatenation of the
    // repeated query with every encoder output, without building [B, S, 2h].
    const Tensor w_query = slice(attn->weight, 1, 0, hidden);  // [h, h]
    const Tensor from_query = reshape(linear(query, w_query, attn->bias), {query.size(0), 1, hidden});
    const Tensor energy = tanh(add(from_query, keys));  // [B, S, h]
    trace(*this, "energy", energy);
    const Tensor scores = sum(mul(energy, v), {2});  // [B, S]
    Tensor weights = softmax(mask_scores(scores, src_mask, "AttentionParams"), 1);
    trace(*this, weights);
    return weights;
}

}  // namespace seqgrad::nn
