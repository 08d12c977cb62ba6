// Cross-entropy over logits, fused with log-softmax, with ignore_index and label smoothing as
// PyTorch's F.cross_entropy defines them. Per position, with lse = log(sum(exp(logits))):
//   loss = (1 - eps) * (lse - x[target]) + eps * (lse - mean(x))
//   dloss/dx = softmax(x) - (1 - eps) * onehot(target) - eps / V
// averaged over the positions whose target is not ignore_index.
#include <cmath>

#include "kernels.h"
#include "seqgrad/core/autograd.h"
#include "seqgrad/core/ops.h"
#include "vector_math.h"

namespace seqgrad {

Tensor cross_entropy(const Tensor& logits, const IntTensor& targets, int64_t ignore_index, float label_smoothing) {
    check(logits.defined(), "cross_entropy", "the logits are undefined");
    check(logits.dim() >= 1, "cross_entropy", "logits need rank >= 1, got ", logits.shape());
    Shape expected = targets.shape();
    const int64_t vocab = logits.size(-1);
    expected.push_back(vocab);
    check(logits.shape() == expected, "cross_entropy", "logits ", logits.shape(), " do not match targets ",
          targets.shape(), " (expected logits ", expected, ")");
    check(label_smoothing >= 0 && label_smoothing <= 1, "cross_entropy", "label_smoothing must be in [0, 1], got ",
          label_smoothing);
    check(vocab > 0, "cross_entropy", "the class axis is empty: logits ", logits.shape());
    const int64_t n = targets.numel();
    const int64_t* pt = targets.data();
    int64_t counted = 0;
    for (int64_t i = 0; i < n; ++i) {
        if (pt[i] == ignore_index) continue;
        check(pt[i] >= 0 && pt[i] < vocab, "cross_entropy", "target ", pt[i], " at position ", i, " is outside [0, ",
              vocab, ")");
        ++counted;
    }
    const float eps = label_smoothing;
    const float* px = logits.data();
    Tensor lse = Tensor::empty({n});
    float* plse = lse.data();
    std::vector<double> row_loss(static_cast<size_t>(n), 0.0);
    detail::parallel_for(n, std::max<int64_t>(1, detail::kElementwiseGrain / vocab), [&](int64_t begin, int64_t end) {
        with_isa_level([&](auto isa) {
            constexpr IsaLevel L = decltype(isa)::value;
            for (int64_t i = begin; i < end; ++i) {
                if (pt[i] == ignore_index) continue;
                const float* row = px + i * vocab;
                // The maximum and the sum of exponentials as softmax takes them (kernels.h): a
                // plain max reduction stays scalar at the avx2 level, and one running sum waits
                // on each addition.
                const float m = detail::row_max<L>(row, vocab);
                const float total = detail::exp_sum<L>(row, m, vocab);
                float sum_x = 0;
#pragma omp simd reduction(+ : sum_x)
                for (int64_t c = 0; c < vocab; ++c) sum_x += row[c];
                const double log_sum = m + std::log(static_cast<double>(total));
                plse[i] = static_cast<float>(log_sum);
                row_loss[static_cast<size_t>(i)] =
                    (1 - eps) * (log_sum - row[pt[i]]) + eps * (log_sum - sum_x / static_cast<double>(vocab));
            }
        });
    });
    double total_loss = 0;  // summed in order: the same result for any number of threads
    for (double l : row_loss) total_loss += l;
    Tensor loss = Tensor::scalar(counted > 0 ? static_cast<float>(total_loss / static_cast<double>(counted)) : 0.0f);

    return record("cross_entropy", loss, {logits}, [logits, targets, lse, ignore_index, eps, counted](const Tensor& g) {
        const int64_t v = logits.size(-1);
        const int64_t rows = targets.numel();
        Tensor gx = Tensor::empty(logits.shape());
        const float scale = counted > 0 ? g.item() / static_cast<float>(counted) : 0.0f;
        const float* px = logits.data();
        const float* plse = lse.data();
        const int64_t* pt = targets.data();
        float* pd = gx.data();
        detail::parallel_for(rows, std::max<int64_t>(1, detail::kElementwiseGrain / v),
                             [&](int64_t begin, int64_t end) {
            with_isa_level([&](auto) {
                for (int64_t i = begin; i < end; ++i) {
                    float* drow = pd + i * v;
                    if (pt[i] == ignore_index) {
                        std::fill_n(drow, v, 0.0f);
                        continue;
                    }
                    const float* row = px + i * v;
                    const float lse_i = plse[i], uniform = eps / static_cast<float>(v);
#pragma omp simd
                    for (int64_t c = 0; c < v; ++c) drow[c] = scale * (detail::fast_exp(row[c] - lse_i) - uniform);
                    drow[pt[i]] -= scale * (1 - eps);
                }
            });
        });
        return std::vector<Tensor>{gx};
    });
}

}  // namespace seqgrad
