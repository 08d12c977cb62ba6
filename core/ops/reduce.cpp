// Reductions: sum and mean over any set of axes, max and argmax along one. A reduction over a
// run of adjacent axes is a view of the input as [outer, reduced, inner]; other sets of axes are
// reduced one run at a time. Sums accumulate in double, so a long sum keeps float32 accuracy.
#include <algorithm>
#include <memory>

#include "../scratch.h"
#include "kernels.h"
#include "seqgrad/core/autograd.h"
#include "seqgrad/core/ops.h"

namespace seqgrad {
namespace {

// out[o, i] = sum_r x[o, r, i]
Tensor sum_block(const Tensor& x, int64_t outer, int64_t reduced, int64_t inner, const Shape& out_shape) {
    Tensor out = Tensor::empty(out_shape);
    const float* px = x.data();
    float* po = out.data();
    if (inner == 1) {
        detail::parallel_for(outer, std::max<int64_t>(1, detail::kElementwiseGrain / std::max<int64_t>(reduced, 1)),
                             [&](int64_t begin, int64_t end) {
            for (int64_t o = begin; o < end; ++o) {
                const float* row = px + o * reduced;
                double acc = 0;
                for (int64_t r = 0; r < reduced; ++r) acc += row[r];
                po[o] = static_cast<float>(acc);
            }
        });
        return out;
    }
    // Each slice's rows in stretches of kStretchRows, its columns in blocks of kColumnBlock: a task
    // sums one stretch of one block into double partial sums, reading the rows' block in order (a
    // bias gradient's rows are read as one stream, not as a thread's half of every row, which the
    // prefetchers lost track of at every page: 7-10 GB/s). Then each column adds its stretches'
    // partial sums in order. Stretches and blocks are fixed, so the order of every sum is the same
    // on any number of threads; up to kStretchRows rows it is the rows' own order.
    constexpr int64_t kStretchRows = 64, kColumnBlock = 1024;
    if (outer * inner == 0) return out;  // no sums to make
    if (reduced == 0) {                  // a sum of nothing
        std::fill_n(po, outer * inner, 0.0f);
        return out;
    }
    const int64_t stretches = (reduced + kStretchRows - 1) / kStretchRows;
    const int64_t blocks = (inner + kColumnBlock - 1) / kColumnBlock;
    thread_local detail::Scratch<double> partial;  // each task sets its own sums before adding
    double* pp = partial.get(outer * stretches * inner);
    const int64_t task_elements = std::min(reduced, kStretchRows) * std::min(inner, kColumnBlock);
    detail::parallel_for(outer * stretches * blocks, std::max<int64_t>(1, detail::kElementwiseGrain / task_elements),
                         [&](int64_t begin, int64_t end) {
        for (int64_t task = begin; task < end; ++task) {
            const int64_t o = task / (stretches * blocks), st = task / blocks % stretches, b = task % blocks;
            const int64_t r0 = st * kStretchRows, r1 = std::min(reduced, r0 + kStretchRows);
            const int64_t i0 = b * kColumnBlock, i1 = std::min(inner, i0 + kColumnBlock);
            with_isa_level([&](auto) {
                double* __restrict sums = pp + (o * stretches + st) * inner + i0;
                for (int64_t i = 0; i < i1 - i0; ++i) sums[i] = 0.0;
                for (int64_t r = r0; r < r1; ++r) {
                    const float* __restrict row = px + (o * reduced + r) * inner + i0;
                    for (int64_t i = 0; i < i1 - i0; ++i) sums[i] += row[i];
                }
            });
        }
    });
    detail::parallel_for(outer * inner, std::max<int64_t>(1, detail::kElementwiseGrain / stretches),
                         [&](int64_t begin, int64_t end) {
        for (int64_t c = begin; c < end; ++c) {
            const int64_t o = c / inner, i = c % inner;
            const double* column = pp + o * stretches * inner + i;
            double total = column[0];
            for (int64_t st = 1; st < stretches; ++st) total += column[st * inner];
            po[c] = static_cast<float>(total);
        }
    });
    return out;
}

// Sum over a sorted set of distinct axes, keeping them as extent 1. Not recorded.
Tensor sum_keepdim(const Tensor& x, const std::vector<int64_t>& axes) {
    Tensor result = x;
    // Runs of adjacent axes, last run first so the earlier axes keep their positions.
    size_t end = axes.size();
    while (end > 0) {
        size_t begin = end - 1;
        while (begin > 0 && axes[begin - 1] + 1 == axes[begin]) --begin;
        const Shape& s = result.shape();
        const size_t first = static_cast<size_t>(axes[begin]), last = static_cast<size_t>(axes[end - 1]) + 1;
        Shape out_shape = s;
        for (size_t a = first; a < last; ++a) out_shape[a] = 1;
        result = sum_block(result, s.numel(0, first), s.numel(first, last), s.numel(last, s.size()), out_shape);
        end = begin;
    }
    return result;
}

std::vector<int64_t> normalize_axes(const std::vector<int64_t>& axes, int64_t rank, const char* op) {
    std::vector<int64_t> out;
    for (int64_t a : axes) out.push_back(normalize_axis(a, rank, op));
    std::sort(out.begin(), out.end());
    check(std::adjacent_find(out.begin(), out.end()) == out.end(), op, "an axis is repeated");
    return out;
}

Shape reduced_shape(const Shape& s, const std::vector<int64_t>& axes, bool keepdim) {
    Shape out;
    for (size_t i = 0; i < s.size(); ++i) {
        const bool reduced = std::binary_search(axes.begin(), axes.end(), static_cast<int64_t>(i));
        if (!reduced) out.push_back(s[i]);
        else if (keepdim) out.push_back(1);
    }
    return out;
}

// Broadcasts g (the reduced shape with kept axes) back to `shape`, times `scale`.
Tensor expand_back(const Tensor& g_keepdim, const Shape& shape, float scale) {
    Tensor ones = Tensor::full(shape, scale);
    return mul(ones, g_keepdim);
}

}  // namespace

Tensor sum(const Tensor& x, const std::vector<int64_t>& axes, bool keepdim) {
    check(x.defined(), "sum", "the operand is undefined");
    const std::vector<int64_t> ax = normalize_axes(axes, x.dim(), "sum");
    const Shape in_shape = x.shape();
    const Shape keep_shape = reduced_shape(in_shape, ax, true);
    Tensor out = sum_keepdim(x.detach(), ax);
    if (!keepdim) out = reshape(out, reduced_shape(in_shape, ax, false));
    return record("sum", out, {x}, [in_shape, keep_shape](const Tensor& g) {
        return std::vector<Tensor>{expand_back(reshape(g, keep_shape), in_shape, 1.0f)};
    });
}

Tensor sum(const Tensor& x) {
    check(x.defined(), "sum", "the operand is undefined");
    std::vector<int64_t> all(static_cast<size_t>(x.dim()));
    for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int64_t>(i);
    return sum(x, all, false);
}

Tensor mean(const Tensor& x, const std::vector<int64_t>& axes, bool keepdim) {
    check(x.defined(), "mean", "the operand is undefined");
    const std::vector<int64_t> ax = normalize_axes(axes, x.dim(), "mean");
    int64_t count = 1;
    for (int64_t a : ax) count *= x.shape()[static_cast<size_t>(a)];
    return mul(sum(x, ax, keepdim), 1.0f / static_cast<float>(count));  // over nothing: 0 * inf = NaN, as 0 / 0
}

Tensor mean(const Tensor& x) {
    check(x.defined(), "mean", "the operand is undefined");
    return mul(sum(x), 1.0f / static_cast<float>(x.numel()));
}

Tensor max(const Tensor& x, int64_t axis, bool keepdim) {
    check(x.defined(), "max", "the operand is undefined");
    const int64_t a = normalize_axis(axis, x.dim(), "max");
    const Shape& s = x.shape();
    const int64_t n = s[static_cast<size_t>(a)];
    check(n > 0, "max", "cannot take the max over an empty axis of shape ", s);
    const int64_t outer = s.numel(0, static_cast<size_t>(a)), inner = s.numel(static_cast<size_t>(a) + 1, s.size());
    Tensor out = Tensor::empty(reduced_shape(s, {a}, keepdim));
    auto where = std::make_shared<std::vector<int64_t>>(static_cast<size_t>(outer * inner));
    const float* px = x.data();
    float* po = out.data();
    for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < inner; ++i) {
            int64_t best = 0;
            for (int64_t r = 1; r < n; ++r)
                if (px[(o * n + r) * inner + i] > px[(o * n + best) * inner + i]) best = r;
            po[o * inner + i] = px[(o * n + best) * inner + i];
            (*where)[static_cast<size_t>(o * inner + i)] = (o * n + best) * inner + i;
        }
    const Shape in_shape = s;
    return record("max", out, {x}, [in_shape, where](const Tensor& g) {
        Tensor gx = Tensor::zeros(in_shape);
        const float* pg = g.data();
        for (size_t k = 0; k < where->size(); ++k) gx.data()[(*where)[k]] += pg[k];
        return std::vector<Tensor>{gx};
    });
}

IntTensor argmax(const Tensor& x, int64_t axis) {
    check(x.defined(), "argmax", "the operand is undefined");
    const int64_t a = normalize_axis(axis, x.dim(), "argmax");
    const Shape& s = x.shape();
    const int64_t n = s[static_cast<size_t>(a)];
    check(n > 0, "argmax", "cannot take the argmax over an empty axis of shape ", s);
    const int64_t outer = s.numel(0, static_cast<size_t>(a)), inner = s.numel(static_cast<size_t>(a) + 1, s.size());
    IntTensor out = IntTensor::zeros(reduced_shape(s, {a}, false));
    const float* px = x.data();
    for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < inner; ++i) {
            int64_t best = 0;
            for (int64_t r = 1; r < n; ++r)
                if (px[(o * n + r) * inner + i] > px[(o * n + best) * inner + i]) best = r;
            out.data()[o * inner + i] = best;
        }
    return out;
}

}  // namespace seqgrad
