// Layer normalisation over the last axis, fused: one pass for the statistics, one for the output,
// and a backward that needs only the saved mean and reciprocal standard deviation of each row.
//   y = (x - mean) / sqrt(var + eps) * gamma + beta,  var biased (seed 001's LayerNorm)
#include <cmath>

#include "kernels.h"
#include "seqgrad/core/autograd.h"
#include "seqgrad/core/ops.h"

namespace seqgrad {

Tensor layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps) {
    check(x.defined() && gamma.defined() && beta.defined(), "layer_norm", "an operand is undefined");
    check(x.dim() >= 1, "layer_norm", "needs rank >= 1, got ", x.shape());
    const int64_t d = x.size(-1);
    check(gamma.shape() == Shape{d} && beta.shape() == Shape{d}, "layer_norm", "gamma ", gamma.shape(),
          " and beta ", beta.shape(), " must both be [", d, "] for input ", x.shape());
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
        for (int64_t r = begin; r < end; ++r) {
            const float* row = px + r * d;
            double sum = 0;
            for (int64_t j = 0; j < d; ++j) sum += row[j];
            const double mu = sum / static_cast<double>(d);
            double sq = 0;
            for (int64_t j = 0; j < d; ++j) sq += (row[j] - mu) * (row[j] - mu);
            const float inv = static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(d) + eps));
            const float m = static_cast<float>(mu);
            pm[r] = m;
            pr[r] = inv;
            for (int64_t j = 0; j < d; ++j) py[r * d + j] = (row[j] - m) * inv * pg[j] + pb[j];
        }
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
            for (int64_t r = begin; r < end; ++r) {
                const float* row = px + r * d;
                const float* grow = pgo + r * d;
                double sum_dxhat = 0, sum_dxhat_xhat = 0;
                for (int64_t j = 0; j < d; ++j) {
                    const float xhat = (row[j] - pm[r]) * pr[r];
                    const float dxhat = grow[j] * pgam[j];
                    sum_dxhat += dxhat;
                    sum_dxhat_xhat += dxhat * xhat;
                }
                const float mean_dxhat = static_cast<float>(sum_dxhat / static_cast<double>(d));
                const float mean_dxhat_xhat = static_cast<float>(sum_dxhat_xhat / static_cast<double>(d));
                for (int64_t j = 0; j < d; ++j) {
                    const float xhat = (row[j] - pm[r]) * pr[r];
                    pdx[r * d + j] = pr[r] * (grow[j] * pgam[j] - mean_dxhat - xhat * mean_dxhat_xhat);
                }
            }
        });
        Tensor ggamma, gbeta;
        if (gamma.requires_grad() || beta.requires_grad()) {
            std::vector<double> acc_gamma(static_cast<size_t>(d), 0.0), acc_beta(static_cast<size_t>(d), 0.0);
            for (int64_t r = 0; r < rows; ++r)
                for (int64_t j = 0; j < d; ++j) {
                    const float xhat = (px[r * d + j] - pm[r]) * pr[r];
                    acc_gamma[static_cast<size_t>(j)] += pgo[r * d + j] * xhat;
                    acc_beta[static_cast<size_t>(j)] += pgo[r * d + j];
                }
            ggamma = Tensor::empty({d});
            gbeta = Tensor::empty({d});
            for (int64_t j = 0; j < d; ++j) {
                ggamma.data()[j] = static_cast<float>(acc_gamma[static_cast<size_t>(j)]);
                gbeta.data()[j] = static_cast<float>(acc_beta[static_cast<size_t>(j)]);
            }
        }
        return std::vector<Tensor>{x.requires_grad() ? gx : Tensor(), ggamma, gbeta};
    });
}

}  // namespace seqgrad
