// Layer normalisation over the last axis, fused: one pass for the statistics, one for the output,
// and a backward that needs only the saved mean and reciprocal standard deviation of each row.
//   y = (x - mean) / sqrt(var + eps) * gamma + beta,  var biased (as nn::LayerNorm)
#include <algorithm>
#include <cmath>

#include "../scratch.h"
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

// Adds rows [begin, end)'s g * xhat into dgamma and g into dbeta, row after row.
void parameter_gradient_rows(const float* __restrict x, const float* __restrict g, const float* __restrict mean,
                             const float* __restrict rstd, float* __restrict dgamma, float* __restrict dbeta,
                             int64_t begin, int64_t end, int64_t d) {
    for (int64_t r = begin; r < end; ++r) {
        const float* row = x + r * d;
        const float* grow = g + r * d;
        const float mean_r = mean[r], rstd_r = rstd[r];
#pragma omp simd
        for (int64_t j = 0; j < d; ++j) {
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
        // Stretches of kStretchRows rows, each one task: its rows' dx, and its own sums of g * xhat
        // and g for dgamma and dbeta while the rows are in the cache; then each column adds its
        // stretches' sums in order. The stretches are fixed, so every sum's order is the same on
        // any number of threads (up to kStretchRows rows, the rows' own order).
        constexpr int64_t kStretchRows = 64;
        const bool input = x.requires_grad(), parameters = gamma.requires_grad() || beta.requires_grad();
        const int64_t stretches = (rows + kStretchRows - 1) / kStretchRows;
        Tensor gx = input ? Tensor::empty(x.shape()) : Tensor();
        thread_local detail::Scratch<float> partial;  // each stretch's sums, from zero
        float* pp = parameters ? partial.get(2 * stretches * d) : nullptr;
        if (parameters) std::fill_n(pp, 2 * stretches * d, 0.0f);
        const float* px = x.data();
        const float* pgo = g.data();
        const float* pgam = gamma.data();
        const float* pm = mean.data();
        const float* pr = rstd.data();
        float* pdx = input ? gx.data() : nullptr;
        const int64_t grain =
            std::max<int64_t>(1, detail::kElementwiseGrain / (kStretchRows * std::max<int64_t>(d, 1)));
        detail::parallel_for(stretches, grain, [&](int64_t first, int64_t last) {
            with_isa_level([&](auto) {
                for (int64_t st = first; st < last; ++st)
                    for (int64_t r = st * kStretchRows; r < std::min(rows, (st + 1) * kStretchRows); ++r) {
                        if (input) input_gradient_rows(px, pgo, pgam, pm, pr, pdx, r, r + 1, d);
                        if (parameters)
                            parameter_gradient_rows(px, pgo, pm, pr, pp + 2 * st * d, pp + (2 * st + 1) * d, r, r + 1,
                                                    d);
                    }
            });
        });
        Tensor ggamma, gbeta;
        if (parameters) {
            ggamma = Tensor::empty({d});
            gbeta = Tensor::empty({d});
            float* pgg = ggamma.data();
            float* pgb = gbeta.data();
            for (int64_t j = 0; j < d; ++j) {
                float sum_gamma = 0.0f, sum_beta = 0.0f;
                for (int64_t st = 0; st < stretches; ++st) {
                    sum_gamma += pp[2 * st * d + j];
                    sum_beta += pp[(2 * st + 1) * d + j];
                }
                pgg[j] = sum_gamma;
                pgb[j] = sum_beta;
            }
        }
        return std::vector<Tensor>{gx, ggamma, gbeta};
    });
}

}  // namespace seqgrad
