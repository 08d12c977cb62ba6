// Matrix products through cblas_sgemm (the tiniest in loops of their own). Transposition is a
// flag, never a copy.
// A product whose right operand is one matrix (a layer's weight) folds the left operand's batch
// axes into its rows: one large sgemm instead of many small ones, forward and backward alike.
#include "../blas.h"
#include "../panels.h"
#include "kernels.h"
#include "seqgrad/core/autograd.h"
#include "seqgrad/core/ops.h"
#include "seqgrad/core/precision.h"

namespace seqgrad {
namespace {

// Batch offsets (in matrices) of an operand with batch shape `own` inside the broadcast `batch`.
std::vector<int64_t> batch_offsets(const Shape& own, const Shape& batch) {
    const size_t rank = batch.size();
    const std::vector<int64_t> strides = detail::broadcast_strides(own, rank);
    std::vector<int64_t> offsets(static_cast<size_t>(batch.numel()));
    for (int64_t idx = 0; idx < batch.numel(); ++idx) {
        int64_t rest = idx, off = 0;
        for (size_t d = rank; d-- > 0;) {
            off += (rest % batch[d]) * strides[d];
            rest /= batch[d];
        }
        offsets[static_cast<size_t>(idx)] = off;
    }
    return offsets;
}

// Products of at most this many multiply-adds are tiny_product's, not BLAS's: an attention
// decoder's scores and context, one batch row at a time (1 x 12 x 256 at the g2p shape), which
// sgemv and sgemm ran at 5-12 GFLOP/s a thread inside a training step (avx2 level); these loops
// took that step's matmul time from about 9.5 to 6.7 ms.
constexpr int64_t kTinyProduct = 1 << 14;

// C [m, n] = op(A) op(B), in loops the caller's with_isa_level compiles at the CPU's level: with B
// transposed, dot products along k (a row of A, stored untransposed, and a row of B both in
// place); else C's rows as sums of B's rows, each scaled by an element of A, along n.
inline void tiny_product(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, const float* b, float* c) {
    for (int64_t i = 0; i < m; ++i) {
        float* __restrict row = c + i * n;
        if (tb) {
            for (int64_t j = 0; j < n; ++j) {
                const float* __restrict bj = b + j * k;
                float sum = 0;
                if (!ta) {
                    const float* __restrict ai = a + i * k;
#pragma omp simd reduction(+ : sum)
                    for (int64_t p = 0; p < k; ++p) sum += ai[p] * bj[p];
                } else {
                    for (int64_t p = 0; p < k; ++p) sum += a[p * m + i] * bj[p];
                }
                row[j] = sum;
            }
            continue;
        }
        for (int64_t j = 0; j < n; ++j) row[j] = 0.0f;
        for (int64_t p = 0; p < k; ++p) {
            const float f = ta ? a[p * m + i] : a[i * k + p];
            const float* __restrict bp = b + p * n;
            for (int64_t j = 0; j < n; ++j) row[j] += f * bp[j];
        }
    }
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b, bool ta, bool tb) {
    check(a.defined() && b.defined(), "matmul", "an operand is undefined");
    check(a.dim() >= 2 && b.dim() >= 2, "matmul", "operands need rank >= 2, got shapes ", a.shape(), " and ",
          b.shape());
    const Shape& sa = a.shape();
    const Shape& sb = b.shape();
    const int64_t m = ta ? sa[sa.size() - 1] : sa[sa.size() - 2];
    const int64_t k = ta ? sa[sa.size() - 2] : sa[sa.size() - 1];
    const int64_t kb = tb ? sb[sb.size() - 1] : sb[sb.size() - 2];
    const int64_t n = tb ? sb[sb.size() - 2] : sb[sb.size() - 1];
    check(k == kb, "matmul", "inner extents differ: ", sa, ta ? " (transposed)" : "", " times ", sb,
          tb ? " (transposed)" : "");
    detail::check_blas_size(m, "matmul");
    detail::check_blas_size(n, "matmul");
    detail::check_blas_size(k, "matmul");

    if (b.dim() == 2 && !ta && a.dim() > 2) {  // fold a's batch axes into rows
        Shape out_shape(sa.begin(), sa.end() - 1);
        out_shape.push_back(n);
        return reshape(matmul(reshape(a, {a.numel() / k, k}), b, false, tb), out_shape);
    }

    const Shape batch_a(sa.begin(), sa.end() - 2), batch_b(sb.begin(), sb.end() - 2);
    const Shape batch = broadcast_shapes(batch_a, batch_b, "matmul");
    Shape out_shape = batch;
    out_shape.push_back(m);
    out_shape.push_back(n);
    Tensor out = Tensor::empty(out_shape);
    const std::vector<int64_t> offsets_a = batch_offsets(batch_a, batch);
    const std::vector<int64_t> offsets_b = batch_offsets(batch_b, batch);
    // Many small products (attention's heads): one thread per group of them, each sgemm serial, or
    // tiny_product's loops.
    const int64_t batches = static_cast<int64_t>(offsets_a.size());
    // (In bf16 mode every product rounds its operands first: gemm's.)
    const bool tiny = static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) <= kTinyProduct &&
                      matmul_precision() == Precision::float32;
    detail::parallel_for(batches, std::max<int64_t>(1, (1 << 17) / std::max<int64_t>(m * n * k, 1)),
                         [&](int64_t begin, int64_t end) {
        const auto operand_a = [&](int64_t i) { return a.data() + offsets_a[static_cast<size_t>(i)] * m * k; };
        const auto operand_b = [&](int64_t i) { return b.data() + offsets_b[static_cast<size_t>(i)] * k * n; };
        if (tiny) {
            with_isa_level([&](auto) {
                for (int64_t i = begin; i < end; ++i)
                    tiny_product(ta, tb, m, n, k, operand_a(i), operand_b(i), out.data() + i * m * n);
            });
            return;
        }
        for (int64_t i = begin; i < end; ++i)
            detail::gemm(ta, tb, m, n, k, operand_a(i), operand_b(i), out.data() + i * m * n, false);
    });

    return record("matmul", out, {a, b}, [a, b, ta, tb](const Tensor& g) {
        Tensor ga, gb;
        if (a.requires_grad())  // dA = dC op(B)^T, or its transpose when A is stored transposed
            ga = sum_to(ta ? matmul(b, g, tb, true) : matmul(g, b, false, !tb), a.shape());
        if (b.requires_grad())  // dB = op(A)^T dC, or its transpose
            gb = sum_to(tb ? matmul(g, a, true, ta) : matmul(a, g, !ta, false), b.shape());
        return std::vector<Tensor>{ga, gb};
    });
}

namespace {

// linear() with its two products of the weight given: forward(rows, x, out, accumulate) writes
// x W^T into out (adds to it when accumulate), backward(rows, g, gx) writes dY W into gx.
template <class Forward, class Backward>
Tensor linear_by(const Tensor& x, const Tensor& weight, const Tensor& bias, Forward forward, Backward backward) {
    check(x.defined() && weight.defined(), "linear", "an operand is undefined");
    check(weight.dim() == 2, "linear", "weight must be [out, in], got ", weight.shape());
    const int64_t out_features = weight.size(0), in_features = weight.size(1);
    check(x.dim() >= 1 && x.size(-1) == in_features, "linear", "input ", x.shape(),
          " does not end in the weight's in_features ", in_features, " (weight ", weight.shape(), ")");
    check(!bias.defined() || bias.shape() == Shape{out_features}, "linear", "bias ",
          bias.defined() ? bias.shape() : Shape{}, " does not match weight ", weight.shape());
    detail::check_blas_size(out_features, "linear");
    detail::check_blas_size(in_features, "linear");
    const int64_t rows = x.numel() / std::max<int64_t>(in_features, 1);
    detail::check_blas_size(rows, "linear");
    Shape out_shape(x.shape().begin(), x.shape().end() - 1);
    out_shape.push_back(out_features);
    Tensor out = Tensor::empty(out_shape);
    float* po = out.data();
    if (bias.defined()) {  // the product is added to the bias (beta = 1)
        const float* pb = bias.data();
        detail::parallel_for(rows, std::max<int64_t>(1, detail::kElementwiseGrain / std::max<int64_t>(out_features, 1)),
                             [=](int64_t begin, int64_t end) {
            for (int64_t r = begin; r < end; ++r) std::copy_n(pb, out_features, po + r * out_features);
        });
    }
    forward(rows, x.data(), po, bias.defined());

    return record("linear", out, {x, weight, bias}, [x, weight, bias, rows, out_features, backward](const Tensor& g) {
        Tensor gx, gw, gb;
        if (x.requires_grad()) {  // dX = dY W
            gx = Tensor::empty(x.shape());
            backward(rows, g.data(), gx.data());
        }
        if (weight.requires_grad()) {  // dW = dY^T X
            gw = weight_gradient(weight, g, x, rows);
        }
        if (bias.defined() && bias.requires_grad()) gb = sum(reshape(g, {rows, out_features}), {0});
        return std::vector<Tensor>{gx, gw, gb};
    });
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
    const int64_t out_features = weight.defined() && weight.dim() == 2 ? weight.size(0) : 0;
    const int64_t in_features = weight.defined() && weight.dim() == 2 ? weight.size(1) : 0;
    return linear_by(
        x, weight, bias,
        [=](int64_t rows, const float* a, float* c, bool accumulate) {
        detail::gemm_weights(false, true, rows, out_features, in_features, a, weight.data(), c, accumulate);
        },
        [=](int64_t rows, const float* g, float* gx) {
        detail::gemm_weights(false, false, rows, in_features, out_features, g, weight.data(), gx, false);
    });
}

Tensor linear(const Tensor& x, const RepeatedWeight& weight, const Tensor& bias) {
    check(weight.tensor().defined(), "linear", "the repeated weight is empty");
    const detail::WeightPanels& forward = weight.forward_panels();
    return linear_by(
        x, weight.tensor(), bias,
        [&forward](int64_t rows, const float* a, float* c, bool accumulate) {
        forward.multiply(rows, a, c, accumulate);
        },
        [panels = weight.backward_panels()](int64_t rows, const float* g, float* gx) {
        panels->multiply(rows, g, gx, false);
    });
}

}  // namespace seqgrad
