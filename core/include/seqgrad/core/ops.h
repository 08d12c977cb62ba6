// Every differentiable operation, as a free function. Each one validates its arguments (a bad
// shape or id throws seqgrad::Error naming the operation and the shapes), computes its result,
// and records its backward beside the forward in core/ops/<family>.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "seqgrad/core/tensor.h"

namespace seqgrad {

class Generator;
namespace detail {
class WeightPanels;
class PassPanels;
}  // namespace detail

// ---- elementwise (core/ops/elementwise.cpp); binary operations broadcast as NumPy does ----
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor neg(const Tensor& x);
Tensor add(const Tensor& a, float b);
Tensor mul(const Tensor& a, float b);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor pow(const Tensor& x, float exponent);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor gelu(const Tensor& x);  // the exact form, x * Phi(x), as PyTorch's default

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& x);
Tensor operator+(const Tensor& a, float b);
Tensor operator+(float a, const Tensor& b);
Tensor operator-(const Tensor& a, float b);
Tensor operator-(float a, const Tensor& b);
Tensor operator*(const Tensor& a, float b);
Tensor operator*(float a, const Tensor& b);
Tensor operator/(const Tensor& a, float b);
Tensor operator/(float a, const Tensor& b);

// The shape two operands broadcast to; throws Error naming `op` if they do not.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
// Sums a gradient over the axes that broadcasting added or stretched, back to `shape`.
Tensor sum_to(const Tensor& grad, const Shape& shape);

// ---- reductions (core/ops/reduce.cpp) ----
Tensor sum(const Tensor& x);
Tensor sum(const Tensor& x, const std::vector<int64_t>& axes, bool keepdim = false);
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, const std::vector<int64_t>& axes, bool keepdim = false);
// The largest value along an axis; the gradient goes to the first maximal element.
Tensor max(const Tensor& x, int64_t axis, bool keepdim = false);
// Index of the largest value along an axis (not differentiable).
IntTensor argmax(const Tensor& x, int64_t axis);

// ---- matrix products (core/ops/matmul.cpp), through cblas_sgemm ----
// a [..., M, K] times b [..., K, N] (either transposed in place by a flag: no copy), batch axes
// broadcast. Both operands have rank >= 2.
Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_a = false, bool transpose_b = false);
// x [..., in] W^T + bias, with weight [out, in] and bias [out] (may be undefined), as nn.Linear.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias);

// A weight [out, in] about to meet many products of a few rows each, unchanged between them: an
// LSTM's weights in a decoder that runs its layers a step per call. It is laid out once here for
// the forward products x W^T, and once in each backward pass, at the pass's first product, for
// dY W (core/panels.h); sgemm would copy the weight at every call. Where the layout would not be
// faster (more than 512 rows, fewer than 4 uses, the portable level, products of weights on oneDNN
// or in bfloat16) the products are sgemm's, as with the tensor. Copies share the layouts. The
// weight must not change while the forward products are made (an optimizer steps after the
// backward pass).
class RepeatedWeight {
public:
    RepeatedWeight() = default;
    // For `uses` products of about `rows` rows each.
    RepeatedWeight(const Tensor& weight, int64_t rows, int64_t uses);

    const Tensor& tensor() const { return weight_; }
    // The layouts: x W^T's, and dY W's (made in the backward pass).
    const detail::WeightPanels& forward_panels() const { return *forward_; }
    const std::shared_ptr<detail::PassPanels>& backward_panels() const { return backward_; }

private:
    Tensor weight_;
    std::shared_ptr<const detail::WeightPanels> forward_;
    std::shared_ptr<detail::PassPanels> backward_;
};
// linear() with the weight's products through its layouts; equal to linear(x, weight.tensor(),
// bias) within float32 rounding (the sums run in another order).
Tensor linear(const Tensor& x, const RepeatedWeight& weight, const Tensor& bias);

// ---- shapes (core/ops/shape.cpp) ----
Tensor reshape(const Tensor& x, const Shape& shape);                 // a view; one extent may be -1
Tensor transpose(const Tensor& x, int64_t axis0, int64_t axis1);     // copies
Tensor permute(const Tensor& x, const std::vector<int64_t>& order);  // copies
// Indices [start, stop) along an axis (negative values count from the end, as Python's).
Tensor slice(const Tensor& x, int64_t axis, int64_t start, int64_t stop);
Tensor concat(const std::vector<Tensor>& xs, int64_t axis);
Tensor stack(const std::vector<Tensor>& xs, int64_t axis);
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t axis);
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t axis);  // equal parts

// ---- indexing (core/ops/indexing.cpp) ----
// Rows of weight [V, D] for ids of any shape: [..., D]; the gradient scatter-adds into weight.
Tensor embedding(const Tensor& weight, const IntTensor& ids);
// The sum of several lookups, embedding(tables[0], ids[0]) + embedding(tables[1], ids[1]) + ...
// (added in that order), in one pass: tables [V_k, D] of one width; ids[k]'s shape the trailing
// axes of ids[0]'s, broadcast over the rest (positions [T] beside tokens [B, T]). [..., D]; each
// table's gradient scatter-adds the rows that used it.
Tensor embeddings_sum(const std::vector<Tensor>& tables, const std::vector<IntTensor>& ids);
// x where mask is nonzero, `value` where it is zero (torch.where(mask != 0, x, value)); mask
// broadcasts to x. Every mask in seqgrad means the same: nonzero = keep (attend to) this element.
Tensor where(const IntTensor& mask, const Tensor& x, float value);
// The slices of x at `indices` (one-dimensional; repeats allowed) along `axis`, as
// torch.index_select: the result has x's shape with that axis indices.numel() long. The gradient
// scatter-adds back, so a repeated index collects the gradients of all its copies.
Tensor index_select(const Tensor& x, int64_t axis, const IntTensor& indices);

// ---- neural-network operations (core/ops/softmax.cpp, norm.cpp, loss.cpp, lstm.cpp, dropout.cpp) ----
Tensor softmax(const Tensor& x, int64_t axis = -1);
Tensor log_softmax(const Tensor& x, int64_t axis = -1);
// The k largest entries of each row of log_softmax(logits) for logits [rows, n], best first (ties:
// the lower index), without writing the log-probabilities out: what a decoder's search needs of
// each step. The values are log_softmax's own, bit for bit. The indices in `barred` are never
// chosen (their probabilities still count in every value); a NaN never beats a number but takes a
// place nothing else fills (a diverged model still decodes); a row with fewer than k entries to
// choose from ends with index -1, value -inf.
// Values [rows, k] and indices [rows, k]; no gradient.
struct TopK {
    Tensor values;
    IntTensor indices;
};
TopK log_softmax_top_k(const Tensor& logits, int64_t k, std::span<const int64_t> barred = {});
// Over the last axis: (x - mean) / sqrt(biased var + eps) * gamma + beta. Fused.
Tensor layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps);
// Zeroes each element with probability p and scales the rest by 1 / (1 - p) when training;
// the identity otherwise.
Tensor dropout(const Tensor& x, float p, bool training, Generator& gen);
// add(x, dropout(y, p, training, gen)) as one operation: one pass each way, the dropped y never
// made, the same values bit for bit and the same draw from gen as the two in turn. x and y of one
// shape (else the two in turn).
Tensor add_dropout(const Tensor& x, const Tensor& y, float p, bool training, Generator& gen);
// dropout(relu(x)), or dropout(gelu(x)) with the exact gelu when `gelu`, as one operation: one
// pass each way (backward from relu's output, or from gelu's slope kept by the forward pass, as
// relu's and gelu's own), the same values bit for bit and the same draw from gen as the two in turn.
Tensor activation_dropout(const Tensor& x, bool gelu, float p, bool training, Generator& gen);
// Mean over positions whose target is not ignore_index of
//   (1 - smoothing) * -log p[target] + smoothing * mean_c(-log p[c])
// (PyTorch's F.cross_entropy); logits [..., V], targets [...]. Fused with log-softmax.
// With every target ignored the loss is 0 and so is its gradient.
Tensor cross_entropy(const Tensor& logits, const IntTensor& targets, int64_t ignore_index = -100,
                     float label_smoothing = 0.0f);

struct LstmState {
    Tensor h;  // [B, H]
    Tensor c;  // [B, H]
};
// One step of PyTorch's LSTM cell: gates = x W_ih^T + b_ih + h W_hh^T + b_hh, in the order
// i, f, g, o; c' = f * c + i * g; h' = o * tanh(c'). The gate nonlinearities are fused.
LstmState lstm_cell(const Tensor& x, const LstmState& state, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                    const Tensor& b_hh);

struct LstmSequence {
    Tensor outputs;  // [B, T, H] ([T, B, H] time-major)
    Tensor h, c;     // the final state [B, H]
};
// A whole LSTM layer in one direction over a right-padded batch, as one operation. input_gates
// [B, T, 4H] is x W_ih^T + b_ih + b_hh at every step (one product for the whole sequence, made by
// the caller); each step adds h W_hh^T and applies lstm_cell's gates. Steps run t = 0..T-1, or
// T-1..0 when `reverse`. Row b's steps t >= lengths[b] are padding (lengths empty: none): its
// state passes through unchanged and its output there is zero, as pack_padded_sequence does, so
// the reverse pass starts at the row's last real token. h0, c0 [B, H]. Equal to a loop of
// lstm_cell; its backward makes one product for W_hh's gradient rather than one per step.
// time_major: input_gates [T, B, 4H] and outputs [T, B, H], every step's rows together; the
// backward then writes the gates' gradient where its products read it, with no copy into the
// [B, T] order (nn::LSTM runs its layers so).
LstmSequence lstm_sequence(const Tensor& input_gates, const Tensor& h0, const Tensor& c0, const Tensor& w_hh,
                           const std::vector<int64_t>& lengths = {}, bool reverse = false, bool time_major = false);
// The same with W_hh laid out for many calls (a decoder's steps, each a sequence of one): see
// RepeatedWeight. The tensor version lays W_hh out for one call's steps.
LstmSequence lstm_sequence(const Tensor& input_gates, const Tensor& h0, const Tensor& c0, const RepeatedWeight& w_hh,
                           const std::vector<int64_t>& lengths = {}, bool reverse = false, bool time_major = false);

// ---- attention (core/ops/attention.cpp) ----
// Masked attention scores become this before the softmax (docs/parity.md), so a row whose keys
// are all masked gets uniform weights, never NaN.
inline constexpr float kAttentionMaskFill = -1e9f;
// Multi-head scaled dot-product attention, fused, on the [batch, length, heads * head_size]
// layout that projections produce (no split into heads before, no merge after). Per head h:
//   weights_h = softmax(where(mask, q_h k_h^T / sqrt(head_size), -1e9))
//   context_h = dropout(weights_h) v_h
// q [B, Tq, D], k and v [B, Tk, D] with D = heads * head_size; mask (nonzero = attend)
// broadcastable to [B, heads, Tq, Tk], or an empty IntTensor for none. Returns the context
// [B, Tq, D]; `weights`, if given, receives the weights [B, heads, Tq, Tk] (after the softmax,
// before dropout), a second differentiable output. Dropout (training with p > 0) takes one draw from `gen`
// and masks exactly as dropout() would mask the weights tensor, so the result equals the
// composition of the primitive operations.
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads, const IntTensor& mask,
                 float dropout_p = 0.0f, bool training = false, Generator* gen = nullptr, Tensor* weights = nullptr);
// The same attention for incremental decoding, where each row has one new query position and its
// keys and values sit in caches that beam search does not rearrange: key (and value) position j
// of query row i is position j of row rows[i, j] of k and v. So a hypothesis that inherits its
// parent's history inherits the parent's table of rows, and a source's keys serve all its beams.
// q [N, 1, D]; k, v [M, C, D] (C >= length); rows [N, >= length], values in [0, M), of which the
// first `length` columns are read; mask broadcastable to [N, heads, 1, length] or empty. Returns
// the context [N, 1, D] and, if asked, the weights [N, heads, 1, length]. Decoding only: an Error
// if an input needs a gradient.
Tensor gathered_attention(const Tensor& q, const Tensor& k, const Tensor& v, const IntTensor& rows, int64_t length,
                          int64_t heads, const IntTensor& mask = IntTensor(), Tensor* weights = nullptr);

}  // namespace seqgrad
