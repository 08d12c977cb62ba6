// Indexing: embedding lookup (a gather whose gradient scatter-adds into the table),
// index_select (the same along any axis) and masked_fill.
#include "kernels.h"
#include "seqgrad/core/autograd.h"
#include "seqgrad/core/ops.h"

#include <cstring>

namespace seqgrad {

Tensor embedding(const Tensor& weight, const IntTensor& ids) {
    check(weight.defined(), "embedding", "the weight is undefined");
    check(weight.dim() == 2, "embedding", "weight must be [vocab, dim], got ", weight.shape());
    const int64_t vocab = weight.size(0), dim = weight.size(1);
    const int64_t* pid = ids.data();
    for (int64_t i = 0; i < ids.numel(); ++i)
        check(pid[i] >= 0 && pid[i] < vocab, "embedding", "id ", pid[i], " at position ", i, " of ids ",
              ids.shape(), " is outside the vocabulary of ", vocab, " (weight ", weight.shape(), ")");
    Shape out_shape = ids.shape();
    out_shape.push_back(dim);
    Tensor out = Tensor::empty(out_shape);
    for (int64_t i = 0; i < ids.numel(); ++i)
        std::memcpy(out.data() + i * dim, weight.data() + pid[i] * dim, static_cast<size_t>(dim) * sizeof(float));
    return record("embedding", out, {weight}, [ids, vocab, dim](const Tensor& g) {
        Tensor gw = Tensor::zeros({vocab, dim});
        const float* pg = g.data();
        float* pw = gw.data();
        const int64_t* p = ids.data();
        for (int64_t i = 0; i < ids.numel(); ++i) {
            float* row = pw + p[i] * dim;
            const float* grow = pg + i * dim;
            for (int64_t j = 0; j < dim; ++j) row[j] += grow[j];
        }
        return std::vector<Tensor>{gw};
    });
}

Tensor index_select(const Tensor& x, int64_t axis, const IntTensor& indices) {
    check(x.defined(), "index_select", "the operand is undefined");
    axis = normalize_axis(axis, x.dim(), "index_select");
    check(indices.dim() == 1, "index_select", "indices must be one-dimensional, got ", indices.shape());
    const Shape& shape = x.shape();
    const int64_t count = shape[static_cast<size_t>(axis)], picked = indices.numel();
    const int64_t* pi = indices.data();
    for (int64_t i = 0; i < picked; ++i)
        check(pi[i] >= 0 && pi[i] < count, "index_select", "index ", pi[i], " at position ", i, " is outside [0, ",
              count, ") of axis ", axis, " of ", shape);
    // x as [outer, count, inner]: each (outer, picked index) pair is one contiguous block of inner.
    const int64_t outer = shape.numel(0, static_cast<size_t>(axis));
    const int64_t inner = shape.numel(static_cast<size_t>(axis) + 1, shape.size());
    Shape out_shape = shape;
    out_shape[static_cast<size_t>(axis)] = picked;
    Tensor out = Tensor::empty(out_shape);
    const float* px = x.data();
    float* po = out.data();
    if (inner > 0)  // (an empty tensor has no storage to copy from)
        for (int64_t o = 0; o < outer; ++o)
            for (int64_t i = 0; i < picked; ++i)
                std::memcpy(po + (o * picked + i) * inner, px + (o * count + pi[i]) * inner,
                            static_cast<size_t>(inner) * sizeof(float));
    return record("index_select", out, {x}, [indices, shape, outer, count, picked, inner](const Tensor& g) {
        Tensor gx = Tensor::zeros(shape);
        const float* pg = g.data();
        float* pgx = gx.data();
        const int64_t* p = indices.data();
        for (int64_t o = 0; o < outer; ++o)
            for (int64_t i = 0; i < picked; ++i) {
                float* to = pgx + (o * count + p[i]) * inner;
                const float* from = pg + (o * picked + i) * inner;
                for (int64_t j = 0; j < inner; ++j) to[j] += from[j];
            }
        return std::vector<Tensor>{gx};
    });
}

Tensor masked_fill(const Tensor& x, const IntTensor& mask, float value) {
    check(x.defined(), "masked_fill", "the operand is undefined");
    check(broadcast_shapes(x.shape(), mask.shape(), "masked_fill") == x.shape(), "masked_fill", "mask ",
          mask.shape(), " does not broadcast to the input's shape ", x.shape());
    Tensor fill = Tensor::empty(mask.shape());  // 1 where the mask is set
    for (int64_t i = 0; i < mask.numel(); ++i) fill.data()[i] = mask.data()[i] != 0 ? 1.0f : 0.0f;
    Tensor out = detail::broadcast_zip(x, fill, x.shape(), [value](float v, float m) { return m != 0 ? value : v; });
    return record("masked_fill", out, {x}, [fill](const Tensor& g) {
        return std::vector<Tensor>{
            detail::broadcast_zip(g, fill, g.shape(), [](float gv, float m) { return m != 0 ? 0.0f : gv; })};
    });
}

}  // namespace seqgrad
