// softmax and log_softmax along any axis, each a single fused pass per row with the row's max
// subtracted first, so large logits never overflow.
#include <cmath>

#include "kernels.h"
#include "seqgrad/core/autograd.h"
#include "seqgrad/core/ops.h"

namespace seqgrad {
namespace {

// The input seen as [outer, n, inner] around the axis; a row is n elements `inner` apart.
struct Rows {
    int64_t outer, n, inner;
    int64_t count() const { return outer * inner; }
    int64_t start(int64_t row) const { return (row / inner) * n * inner + row % inner; }
};

Rows rows_of(const Tensor& x, int64_t axis, const char* op) {
    check(x.defined(), op, "the operand is undefined");
    const size_t a = static_cast<size_t>(normalize_axis(axis, x.dim(), op));
    const Shape& s = x.shape();
    return {s.numel(0, a), s[a], s.numel(a + 1, s.size())};
}

template <typename Body>
void for_each_row(const Rows& r, const Body& body) {
    detail::parallel_for(r.count(), std::max<int64_t>(1, detail::kElementwiseGrain / std::max<int64_t>(r.n, 1)),
                         [&](int64_t begin, int64_t end) {
        for (int64_t row = begin; row < end; ++row) body(r.start(row), r.inner);
    });
}

// (max, log(sum(exp(x - max)))) of one row.
std::pair<float, float> row_max_and_log_sum(const float* x, int64_t n, int64_t stride) {
    float m = -INFINITY;
    for (int64_t j = 0; j < n; ++j) m = std::max(m, x[j * stride]);
    double total = 0;
    for (int64_t j = 0; j < n; ++j) total += std::exp(x[j * stride] - m);
    return {m, static_cast<float>(std::log(total))};
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t axis) {
    const Rows r = rows_of(x, axis, "softmax");
    Tensor out = Tensor::empty(x.shape());
    const float* px = x.data();
    float* py = out.data();
    for_each_row(r, [&](int64_t at, int64_t stride) {
        const auto [m, log_sum] = row_max_and_log_sum(px + at, r.n, stride);
        for (int64_t j = 0; j < r.n; ++j) py[at + j * stride] = std::exp(px[at + j * stride] - m - log_sum);
    });
    return record("softmax", out, {x}, [out, r](const Tensor& g) {
        // dx = y * (g - sum(g * y))
        Tensor gx = Tensor::empty(out.shape());
        const float* py = out.data();
        const float* pg = g.data();
        float* pd = gx.data();
        for_each_row(r, [&](int64_t at, int64_t stride) {
            double dot = 0;
            for (int64_t j = 0; j < r.n; ++j) dot += pg[at + j * stride] * py[at + j * stride];
            for (int64_t j = 0; j < r.n; ++j) {
                const int64_t k = at + j * stride;
                pd[k] = py[k] * (pg[k] - static_cast<float>(dot));
            }
        });
        return std::vector<Tensor>{gx};
    });
}

Tensor log_softmax(const Tensor& x, int64_t axis) {
    const Rows r = rows_of(x, axis, "log_softmax");
    Tensor out = Tensor::empty(x.shape());
    const float* px = x.data();
    float* py = out.data();
    for_each_row(r, [&](int64_t at, int64_t stride) {
        const auto [m, log_sum] = row_max_and_log_sum(px + at, r.n, stride);
        for (int64_t j = 0; j < r.n; ++j) py[at + j * stride] = px[at + j * stride] - m - log_sum;
    });
    return record("log_softmax", out, {x}, [out, r](const Tensor& g) {
        // dx = g - softmax(x) * sum(g)
        Tensor gx = Tensor::empty(out.shape());
        const float* py = out.data();
        const float* pg = g.data();
        float* pd = gx.data();
        for_each_row(r, [&](int64_t at, int64_t stride) {
            double total = 0;
            for (int64_t j = 0; j < r.n; ++j) total += pg[at + j * stride];
            for (int64_t j = 0; j < r.n; ++j) {
                const int64_t k = at + j * stride;
                pd[k] = pg[k] - std::exp(py[k]) * static_cast<float>(total);
            }
        });
        return std::vector<Tensor>{gx};
    });
}

}  // namespace seqgrad
