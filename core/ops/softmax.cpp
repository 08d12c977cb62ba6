// softmax and log_softmax along any axis. Each row is one fused pass: the max first (so large
// logits never overflow), then one exp per element, summed as it is written.
#include <algorithm>
#include <cmath>

#include "kernels.h"
#include "seqgrad/core/autograd.h"
#include "seqgrad/core/ops.h"

namespace seqgrad {
namespace {

using detail::dot;
using detail::exp_shifted;
using detail::exp_sum;
using detail::row_max;
using detail::row_max_blocks;

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

// Calls body(isa, x_row, y_row, ...) for every row, at the level isa_level() chose (isa is its
// IsaTag, isa_dispatch.h), with rows copied to and from contiguous scratch buffers when the axis
// is not the last one, so the row kernels below always see stride 1.
template <typename Body>
void for_each_row(const Rows& r, const float* a, const float* b, float* out, const Body& body) {
    detail::parallel_for(r.count(), std::max<int64_t>(1, detail::kElementwiseGrain / std::max<int64_t>(r.n, 1)),
                         [&](int64_t begin, int64_t end) {
        std::vector<float> ra, rb, ro;
        if (r.inner != 1) {
            ra.resize(static_cast<size_t>(r.n));
            rb.resize(static_cast<size_t>(r.n));
            ro.resize(static_cast<size_t>(r.n));
        }
        with_isa_level([&](auto isa) {
            for (int64_t row = begin; row < end; ++row) {
                const int64_t at = r.start(row);
                if (r.inner == 1) {
                    body(isa, a + at, b ? b + at : nullptr, out + at);
                    continue;
                }
                for (int64_t j = 0; j < r.n; ++j) {
                    ra[static_cast<size_t>(j)] = a[at + j * r.inner];
                    if (b) rb[static_cast<size_t>(j)] = b[at + j * r.inner];
                }
                body(isa, ra.data(), b ? rb.data() : nullptr, ro.data());
                for (int64_t j = 0; j < r.n; ++j) out[at + j * r.inner] = ro[static_cast<size_t>(j)];
            }
        });
    });
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t axis) {
    const Rows r = rows_of(x, axis, "softmax");
    Tensor out = Tensor::empty(x.shape());
    const int64_t n = r.n;
    for_each_row(r, x.data(), nullptr, out.data(), [n](auto isa, const float* xr, const float*, float* yr) {
        constexpr IsaLevel L = decltype(isa)::value;
        const float inv = 1.0f / exp_shifted<L>(xr, row_max<L>(xr, n), yr, n);
#pragma omp simd
        for (int64_t j = 0; j < n; ++j) yr[j] *= inv;
    });
    return record("softmax", out, {x}, [out, r](const Tensor& g) {
        // dx = y * (g - sum(g * y))
        Tensor gx = Tensor::empty(out.shape());
        const int64_t n = r.n;
        for_each_row(r, out.data(), g.data(), gx.data(), [n](auto, const float* yr, const float* gr, float* dr) {
            const float d = dot(gr, yr, n);
#pragma omp simd
            for (int64_t j = 0; j < n; ++j) dr[j] = yr[j] * (gr[j] - d);
        });
        return std::vector<Tensor>{gx};
    });
}

Tensor log_softmax(const Tensor& x, int64_t axis) {
    const Rows r = rows_of(x, axis, "log_softmax");
    Tensor out = Tensor::empty(x.shape());
    const int64_t n = r.n;
    for_each_row(r, x.data(), nullptr, out.data(), [n](auto isa, const float* xr, const float*, float* yr) {
        constexpr IsaLevel L = decltype(isa)::value;
        const float m = row_max<L>(xr, n);
        const float shift = m + std::log(exp_shifted<L>(xr, m, yr, n));
#pragma omp simd
        for (int64_t j = 0; j < n; ++j) yr[j] = xr[j] - shift;
    });
    return record("log_softmax", out, {x}, [out, r](const Tensor& g) {
        // dx = g - softmax(x) * sum(g)
        Tensor gx = Tensor::empty(out.shape());
        const int64_t n = r.n;
        for_each_row(r, out.data(), g.data(), gx.data(), [n](auto, const float* yr, const float* gr, float* dr) {
            float total = 0;
#pragma omp simd reduction(+ : total)
            for (int64_t j = 0; j < n; ++j) total += gr[j];
#pragma omp simd
            for (int64_t j = 0; j < n; ++j) dr[j] = gr[j] - detail::fast_exp(yr[j]) * total;
        });
        return std::vector<Tensor>{gx};
    });
}

TopK log_softmax_top_k(const Tensor& logits, int64_t k, std::span<const int64_t> barred) {
    const char* op = "log_softmax_top_k";
    check(logits.defined() && logits.dim() == 2, op, "expects logits [rows, n], got ",
          logits.defined() ? logits.shape() : Shape{});
    check(k >= 1, op, "k must be at least 1, got ", k);
    const int64_t rows = logits.size(0), n = logits.size(1);
    TopK out{Tensor::full({rows, k}, -INFINITY), IntTensor::full({rows, k}, -1)};
    const float* px = logits.data();
    float* pv = out.values.data();
    int64_t* pi = out.indices.data();
    detail::parallel_for(rows, 1, [&](int64_t begin, int64_t end) {
        std::vector<std::pair<float, int64_t>> top;  // best first
        top.reserve(static_cast<size_t>(k) + 1);
        with_isa_level([&](auto isa) {
            constexpr IsaLevel L = decltype(isa)::value;
            for (int64_t r = begin; r < end; ++r) {
                const float* xr = px + r * n;
                // One pass finds the row's largest value and its k largest: x - shift keeps x's order,
                // so the k best log-probabilities are those of the k largest logits.
                top.clear();
                const float m = row_max_blocks<L>(xr, n, [&](int64_t begin, int64_t end, const auto& block) {
                    // Once k are kept, a block with no value above the last kept one holds nothing to
                    // keep: most blocks end here.
                    if (static_cast<int64_t>(top.size()) == k && !block.above(top.back().first)) return;
                    for (int64_t j = begin; j < end; ++j) {
                        const float value = xr[j];
                        // A later index loses ties, so a value must beat the last kept one strictly.
                        if (static_cast<int64_t>(top.size()) == k && !(value > top.back().first)) continue;
                        if (std::find(barred.begin(), barred.end(), j) != barred.end()) continue;
                        auto at = top.end();
                        while (at != top.begin() && value > (at - 1)->first) --at;
                        top.insert(at, {value, j});
                        if (static_cast<int64_t>(top.size()) > k) top.pop_back();
                    }
                });
                // The shift exactly as log_softmax computes it (row_max_blocks's maximum is row_max's),
                // so each value is its log-probability bit for bit. Two logits a rounding apart can
                // become equal values: those are put back in index order, as the ties they now are.
                const float shift = m + std::log(exp_sum<L>(xr, m, n));
                for (auto& entry : top) entry.first -= shift;
                std::stable_sort(top.begin(), top.end(), [](const auto& a, const auto& b) {
                    return a.first > b.first || (a.first == b.first && a.second < b.second);
                });
                for (size_t c = 0; c < top.size(); ++c) {
                    pv[r * k + static_cast<int64_t>(c)] = top[c].first;
                    pi[r * k + static_cast<int64_t>(c)] = top[c].second;
                }
            }
        });
    });
    return out;
}

}  // namespace seqgrad
