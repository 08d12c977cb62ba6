// Shape operations: reshape (a free view), transpose and permute (copies), slice, concat,
// stack, split and chunk. Tensors stay contiguous, so every operation but reshape copies.
#include <algorithm>
#include <cstring>
#include <numeric>

#include "kernels.h"
#include "seqgrad/core/autograd.h"
#include "seqgrad/core/ops.h"

namespace seqgrad {
namespace {

// Copies x[o, start:start+len, i] for every o, i into out[o, out_start:out_start+len, i], where
// the middle axis has extent `from_extent` in the source and `to_extent` in the destination.
void copy_block(const float* from, int64_t from_extent, int64_t from_start, float* to, int64_t to_extent,
                int64_t to_start, int64_t len, int64_t outer, int64_t inner) {
    if (len * inner == 0) return;  // an empty piece (its data pointer may be null)
    for (int64_t o = 0; o < outer; ++o)
        std::memcpy(to + (o * to_extent + to_start) * inner, from + (o * from_extent + from_start) * inner,
                    static_cast<size_t>(len * inner) * sizeof(float));
}

// Copies of x's data as the consecutive pieces of `sizes` along `axis` (not recorded).
std::vector<Tensor> split_data(const Tensor& x, const std::vector<int64_t>& sizes, size_t axis) {
    const Shape& s = x.shape();
    const int64_t outer = s.numel(0, axis), inner = s.numel(axis + 1, s.size());
    std::vector<Tensor> pieces;
    int64_t start = 0;
    for (int64_t len : sizes) {
        Shape ps = s;
        ps[axis] = len;
        Tensor piece = Tensor::empty(ps);
        copy_block(x.data(), s[axis], start, piece.data(), len, 0, len, outer, inner);
        pieces.push_back(piece);
        start += len;
    }
    return pieces;
}

// Concatenation of the data along `axis` (not recorded); shapes already checked.
Tensor concat_data(const std::vector<Tensor>& xs, size_t axis) {
    Shape s = xs[0].shape();
    int64_t total = 0;
    for (const Tensor& t : xs) total += t.shape()[axis];
    s[axis] = total;
    Tensor out = Tensor::empty(s);
    const int64_t outer = s.numel(0, axis), inner = s.numel(axis + 1, s.size());
    int64_t start = 0;
    for (const Tensor& t : xs) {
        const int64_t len = t.shape()[axis];
        copy_block(t.data(), len, 0, out.data(), total, start, len, outer, inner);
        start += len;
    }
    return out;
}

}  // namespace

Tensor reshape(const Tensor& x, const Shape& shape) {
    check(x.defined(), "reshape", "the operand is undefined");
    Shape resolved = shape;
    int64_t known = 1, inferred = -1;
    for (size_t i = 0; i < resolved.size(); ++i) {
        if (resolved[i] == -1) {
            check(inferred < 0, "reshape", "more than one -1 in ", shape);
            inferred = static_cast<int64_t>(i);
        } else {
            check(resolved[i] >= 0, "reshape", "negative extent in ", shape);
            known *= resolved[i];
        }
    }
    if (inferred >= 0) {
        check(known > 0 && x.numel() % known == 0, "reshape", "cannot view shape ", x.shape(), " as ", shape);
        resolved[static_cast<size_t>(inferred)] = x.numel() / known;
    }
    check(resolved.numel() == x.numel(), "reshape", "cannot view shape ", x.shape(), " (", x.numel(), " elements) as ",
          shape);
    if (resolved == x.shape()) return x;
    auto impl = std::make_shared<TensorImpl>();
    impl->storage = x.impl()->storage;
    impl->shape = resolved;
    const Shape in_shape = x.shape();
    return record("reshape", Tensor(std::move(impl)), {x},
                  [in_shape](const Tensor& g) { return std::vector<Tensor>{reshape(g, in_shape)}; });
}

Tensor permute(const Tensor& x, const std::vector<int64_t>& order) {
    check(x.defined(), "permute", "the operand is undefined");
    const Shape& s = x.shape();
    check(static_cast<int64_t>(order.size()) == x.dim(), "permute", "order of ", order.size(),
          " axes for a tensor of shape ", s);
    std::vector<int64_t> axes, inverse(order.size());
    for (int64_t a : order) axes.push_back(normalize_axis(a, x.dim(), "permute"));
    std::vector<bool> used(order.size(), false);
    for (size_t i = 0; i < axes.size(); ++i) {
        check(!used[static_cast<size_t>(axes[i])], "permute", "axis ", axes[i], " appears twice");
        used[static_cast<size_t>(axes[i])] = true;
        inverse[static_cast<size_t>(axes[i])] = static_cast<int64_t>(i);
    }
    Shape out_shape;
    for (int64_t a : axes) out_shape.push_back(s[static_cast<size_t>(a)]);
    Tensor out = Tensor::empty(out_shape);
    const std::vector<int64_t> in_strides = detail::strides_of(s);
    const size_t rank = axes.size();
    if (rank > 0 && out.numel() > 0) {
        const int64_t inner = out_shape.back();
        const int64_t inner_stride = in_strides[static_cast<size_t>(axes.back())];
        const int64_t rows = out.numel() / inner;
        const float* px = x.data();
        float* po = out.data();
        detail::parallel_for(rows, std::max<int64_t>(1, detail::kElementwiseGrain / inner),
                             [&](int64_t begin, int64_t end) {
            for (int64_t row = begin; row < end; ++row) {
                int64_t rest = row, offset = 0;
                for (size_t d = rank - 1; d-- > 0;) {
                    offset += (rest % out_shape[d]) * in_strides[static_cast<size_t>(axes[d])];
                    rest /= out_shape[d];
                }
                float* dst = po + row * inner;
                if (inner_stride == 1) {  // the last axis stays last: whole rows (an LSTM stack's [B, T] to [T, B])
                    std::copy_n(px + offset, inner, dst);
                    continue;
                }
                for (int64_t j = 0; j < inner; ++j) dst[j] = px[offset + j * inner_stride];
            }
        });
    } else if (out.numel() == 1) {
        out.data()[0] = x.data()[0];
    }
    return record("permute", out, {x}, [inverse](const Tensor& g) { return std::vector<Tensor>{permute(g, inverse)}; });
}

Tensor transpose(const Tensor& x, int64_t axis0, int64_t axis1) {
    check(x.defined(), "transpose", "the operand is undefined");
    const int64_t a = normalize_axis(axis0, x.dim(), "transpose");
    const int64_t b = normalize_axis(axis1, x.dim(), "transpose");
    std::vector<int64_t> order(static_cast<size_t>(x.dim()));
    std::iota(order.begin(), order.end(), 0);
    std::swap(order[static_cast<size_t>(a)], order[static_cast<size_t>(b)]);
    return permute(x, order);
}

Tensor slice(const Tensor& x, int64_t axis, int64_t start, int64_t stop) {
    check(x.defined(), "slice", "the operand is undefined");
    const size_t a = static_cast<size_t>(normalize_axis(axis, x.dim(), "slice"));
    const Shape& s = x.shape();
    const int64_t n = s[a];
    const int64_t b = start < 0 ? start + n : start, e = stop < 0 ? stop + n : stop;
    check(0 <= b && b <= e && e <= n, "slice", "range [", start, ", ", stop, ") is outside axis ", a, " of shape ", s);
    Shape out_shape = s;
    out_shape[a] = e - b;
    Tensor out = Tensor::empty(out_shape);
    const int64_t outer = s.numel(0, a), inner = s.numel(a + 1, s.size());
    copy_block(x.data(), n, b, out.data(), e - b, 0, e - b, outer, inner);
    return record("slice", out, {x}, [s, a, b, e, outer, inner](const Tensor& g) {
        Tensor gx = Tensor::zeros(s);
        copy_block(g.data(), e - b, 0, gx.data(), s[a], b, e - b, outer, inner);
        return std::vector<Tensor>{gx};
    });
}

Tensor concat(const std::vector<Tensor>& xs, int64_t axis) {
    check(!xs.empty(), "concat", "needs at least one tensor");
    for (const Tensor& t : xs) check(t.defined(), "concat", "an operand is undefined");
    const Shape& first = xs[0].shape();
    const size_t a = static_cast<size_t>(normalize_axis(axis, xs[0].dim(), "concat"));
    std::vector<int64_t> sizes;
    for (const Tensor& t : xs) {
        const Shape& s = t.shape();
        bool fits = s.size() == first.size();
        for (size_t i = 0; fits && i < s.size(); ++i) fits = i == a || s[i] == first[i];
        check(fits, "concat", "shapes ", first, " and ", s, " differ outside axis ", a);
        sizes.push_back(s[a]);
    }
    Tensor out = concat_data(xs, a);
    return record("concat", out, xs, [sizes, a](const Tensor& g) { return split_data(g, sizes, a); });
}

Tensor stack(const std::vector<Tensor>& xs, int64_t axis) {
    check(!xs.empty(), "stack", "needs at least one tensor");
    for (const Tensor& t : xs) {
        check(t.defined(), "stack", "an operand is undefined");
        check(t.shape() == xs[0].shape(), "stack", "shapes ", xs[0].shape(), " and ", t.shape(), " differ");
    }
    const int64_t a = normalize_axis(axis, xs[0].dim() + 1, "stack");
    std::vector<Tensor> expanded;
    for (const Tensor& t : xs) {
        Shape s = t.shape();
        s.insert(static_cast<size_t>(a), 1);
        expanded.push_back(reshape(t, s));
    }
    return concat(expanded, a);
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t axis) {
    check(x.defined(), "split", "the operand is undefined");
    const size_t a = static_cast<size_t>(normalize_axis(axis, x.dim(), "split"));
    int64_t total = 0;
    for (int64_t len : sizes) {
        check(len >= 0, "split", "negative piece size ", len);
        total += len;
    }
    check(total == x.shape()[a], "split", "pieces add up to ", total, " but axis ", a, " of shape ", x.shape(), " has ",
          x.shape()[a]);
    std::vector<Tensor> pieces = split_data(x, sizes, a);
    return record("split", pieces, {x}, [a](std::span<const Tensor> grads) {
        return std::vector<Tensor>{concat_data(std::vector<Tensor>(grads.begin(), grads.end()), a)};
    });
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t axis) {
    check(x.defined(), "chunk", "the operand is undefined");
    const int64_t n = x.size(normalize_axis(axis, x.dim(), "chunk"));
    check(chunks > 0 && n % chunks == 0, "chunk", "axis ", axis, " of shape ", x.shape(), " does not divide into ",
          chunks, " equal parts");
    return split(x, std::vector<int64_t>(static_cast<size_t>(chunks), n / chunks), axis);
}

}  // namespace seqgrad
