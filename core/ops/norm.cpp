// Layer normalisation over the last axis, fused: one pass for the statistics, one for the output,
// and a backward that needs only the saved mean and reciprocal standard deviation of each row.
//   y = (x - mean) / sqrt(var + eps) * gamma + beta,  var biased (as nn::LayerNorm)
#include <cmath>

#include "kernels.h"
#include "seqgrad/core/autograd.h"
#include "seqgrad/core/ops.h"

namespace seqgrad {

namespace {

// The kernels run at the level isa_level() chose (with_isa_level, isa_dispatch.h), and take their
// arrays as restrict-qualified parameters: read through a lambda's captures
// instead, the pointers live behind references and GCC's `omp simd` loops reload them per lane
// (gathers), several times slower.

// dx for rows [begin, end): dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)).
void input_gradient_rows(const float* __restrict x, const float* __restrict g, const float* __restrict gamma,
                         const float* __restrict mean, const float* __restrict rstd, float* __restrict dx,
                         int64_t begin, int64_t end, int64_t d) {
    for (int64_t r = begin; r < end; ++r) {
        const float* row = x + r * d;
        const float* grow = g + r * d;
        const float mean_r = mean[r], rstd_r = rstd[r];
        const float sum_dxhat = detail::row_sum(d, [=](int64_t j) { return grow[j] * gamma[j]; });
        const float sum_dxhat_xhat =
            detail::row_sum(d, [=](int64_t j) { return grow[j] * gamma[j] * (row[j] - mean_r) * rstd_r; });
        const float mean_dxhat = sum_dxhat / static_cast<float>(d);
        const float mean_dxhat_xhat = sum_dxhat_xhat / static_cast<float>(d);
        float* out = dx + r * d;
#pragma omp simd
        for (int64_t j = 0; j < d; ++j) {
            const float xhat = (row[j] - mean_r) * rstd_r;
            out[j] = rstd_r * (grow[j] * gamma[j] - mean_dxhat - xhat * mean_dxhat_xhat);
        }
    }
}

// dgamma and dbeta for columns [j0, j1): sums over the rows of g * xhat and of g.
void parameter_gradient_columns(const float* __restrict x, const float* __restrict g, const float* __restrict mean,
                                const float* __restrict rstd, float* __restrict dgamma, float* __restrict dbeta,
                                int64_t rows, int64_t d, int64_t j0, int64_t j1) {
    for (int64_t r = 0; r < rows; ++r) {
        const float* row = x + r * d;
        const float* grow = g + r * d;
        const float mean_r = mean[r], rstd_r = rstd[r];
#pragma omp simd
        for (int64_t j = j0; j < j1; ++j) {
            dgamma[j] += grow[j] * (row[j] - mean_r) * rstd_r;
            dbeta[j] += grow[j];
        }
    }
}

// The forward pass for rows [begin, end): each row's mean and rstd, and y.
void forward_rows(const float* __restrict x, const float* __restrict gamma, const float* __restrict beta,
                  float* __restrict y, float* __restrict mean, float* __restrict rstd, int64_t begin, int64_t end,
                  int64_t d, float eps) {
    for (int64_t r = begin; r < end; ++r) {
        const float* row = x + r * d;
        const float m = detail::row_sum(d, [=](int64_t j) { return row[j]; }) / static_cast<float>(d);
        // the second pass over the centred values keeps the variance accurate
        const float sq = detail::row_sum(d, [=](int64_t j) { return (row[j] - m) * (row[j] - m); });
        const float inv = 1.0f / std::sqrt(sq / static_cast<float>(d) + eps);
        mean[r] = m;
        rstd[r] = inv;
        float* out = y + r * d;
#pragma omp simd
        for (int64_t j = 0; j < d; ++j) out[j] = (row[j] - m) * inv * gamma[j] + beta[j];
    }
}

}  // namespace

Tensor layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps) {
    check(x.defined() && gamma.defined() && beta.defined(), "layer_norm", "an operand is undefined");
    check(x.dim() >= 1, "layer_norm", "needs rank >= 1, got ", x.shape());
    const int64_t d = x.size(-1);
    check(gamma.shape() == Shape{d} && beta.shape() == Shape{d}, "layer_norm", "gamma ", gamma.shape(), " and beta ",
          beta.shape(), " must both be [", d, "] for input ", x.shape());
    check(eps >= 0, "layer_norm", "eps must be non-negative, got ", eps);
    const int64_t rows = x.numel() / std::max<int64_t>(d, 1);
    Tensor out = Tensor::empty(x.shape());
    Tensor mean = Tensor::empty({rows});
    Tensor rstd = Tensor::empty({rows});  // 1 / sqrt(var + eps)
    const float* px = x.data();
    const float* pg = gamma.data();
    const float* pb = beta.data();
    float* py = out.data();
    float* pm = mean.data();
    float* pr = rstd.data();
    detail::parallel_for(rows, std::max<int64_t>(1, detail::kElementwiseGrain / std::max<int64_t>(d, 1)),
                         [&](int64_t begin, int64_t end) {
        with_isa_level([&](auto) { forward_rows(px, pg, pb, py, pm, pr, begin, end, d, eps); });
    });
    return record("layer_norm", out, {x, gamma, beta}, [x, gamma, beta, mean, rstd, rows, d](const Tensor& g) {
        // With xhat = (x - mean) * rstd and dxhat = g * gamma:
        //   dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))
        //   dgamma = sum over rows of g * xhat,  dbeta = sum over rows of g
        Tensor gx = Tensor::empty(x.shape());
        const float* px = x.data();
        const float* pgo = g.data();
        const float* pgam = gamma.data();
        const float* pm = mean.data();
        const float* pr = rstd.data();
        float* pdx = gx.data();
        detail::parallel_for(rows, std::max<int64_t>(1, detail::kElementwiseGrain / std::max<int64_t>(d, 1)),
                             [&](int64_t begin, int64_t end) {
            with_isa_level([&](auto) { input_gradient_rows(px, pgo, pgam, pm, pr, pdx, begin, end, d); });
        });
        Tensor ggamma, gbeta;
        if (gamma.requires_grad() || beta.requires_grad()) {
            // Column sums over the rows; each thread owns a block of columns, so the order of
            // every sum is fixed.
            ggamma = Tensor::zeros({d});
            gbeta = Tensor::zeros({d});
            float* pgg = ggamma.data();
            float* pgb = gbeta.data();
            detail::parallel_for(d, 64, [&](int64_t j0, int64_t j1) {
                with_isa_level([&](auto) { parameter_gradient_columns(px, pgo, pm, pr, pgg, pgb, rows, d, j0, j1); });
            });
        }
        return std::vector<Tensor>{x.requires_grad() ? gx : Tensor(), ggamma, gbeta};
    });
}

}  // namespace seqgrad
