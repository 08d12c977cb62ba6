// Indexing: embedding lookup (a gather whose gradient scatter-adds into the table), the sum of
// several lookups in one pass, index_select (the same along any axis) and where.
#include "kernels.h"
#include "seqgrad/core/autograd.h"
#include "seqgrad/core/ops.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

namespace seqgrad {

namespace {

// The gather behind embedding and index_select, on x viewed as [outer, count, inner]:
// out[o, i, :] = x[o, index[i], :] for i < picked. Indices are checked by the caller.
void gather_blocks(const float* x, float* out, const int64_t* index, int64_t picked, int64_t outer, int64_t count,
                   int64_t inner) {
    if (inner == 0) return;  // (an empty tensor has no storage to copy from)
    for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < picked; ++i)
            std::memcpy(out + (o * picked + i) * inner, x + (o * count + index[i]) * inner,
                        static_cast<size_t>(inner) * sizeof(float));
}

// Its gradient: gx[o, index[i], :] += g[o, i, :], in order, so a repeated index sums its copies.
void scatter_add_blocks(const float* g, float* gx, const int64_t* index, int64_t picked, int64_t outer, int64_t count,
                        int64_t inner) {
    for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < picked; ++i) {
            float* to = gx + (o * count + index[i]) * inner;
            const float* from = g + (o * picked + i) * inner;
            for (int64_t j = 0; j < inner; ++j) to[j] += from[j];
        }
}

// Every id within the table's rows, else an error naming the id, its place and the table (the
// message calls the ids `ids_name` and the table `table_name`).
void check_ids(const char* op, const IntTensor& ids, const std::string& ids_name, const Tensor& table,
               const char* table_name) {
    const int64_t vocab = table.size(0);
    const int64_t* pid = ids.data();
    for (int64_t i = 0; i < ids.numel(); ++i)
        check(pid[i] >= 0 && pid[i] < vocab, op, "id ", pid[i], " at position ", i, " of ", ids_name, " ", ids.shape(),
              " is outside the vocabulary of ", vocab, " (", table_name, " ", table.shape(), ")");
}

}  // namespace

Tensor embedding(const Tensor& weight, const IntTensor& ids) {
    check(weight.defined(), "embedding", "the weight is undefined");
    check(weight.dim() == 2, "embedding", "weight must be [vocab, dim], got ", weight.shape());
    const int64_t vocab = weight.size(0), dim = weight.size(1);
    check_ids("embedding", ids, "ids", weight, "weight");
    const int64_t* pid = ids.data();
    Shape out_shape = ids.shape();
    out_shape.push_back(dim);
    Tensor out = Tensor::empty(out_shape);
    gather_blocks(weight.data(), out.data(), pid, ids.numel(), 1, vocab, dim);
    return record("embedding", out, {weight}, [ids, vocab, dim](const Tensor& g) {
        Tensor gw = Tensor::zeros({vocab, dim});
        scatter_add_blocks(g.data(), gw.data(), ids.data(), ids.numel(), 1, vocab, dim);
        return std::vector<Tensor>{gw};
    });
}

Tensor embeddings_sum(const std::vector<Tensor>& tables, const std::vector<IntTensor>& ids) {
    const char* op = "embeddings_sum";
    check(!tables.empty() && tables.size() == ids.size(), op,
          "expects as many id tensors as tables (at least one), got ", tables.size(), " tables and ", ids.size(),
          " id tensors");
    const Shape& shape = ids[0].shape();
    int64_t dim = 0;
    for (size_t k = 0; k < tables.size(); ++k) {
        const Tensor& t = tables[k];
        check(t.defined() && t.dim() == 2, op, "table ", k, " must be [vocab, dim], got ",
              t.defined() ? t.shape() : Shape{});
        if (k == 0) dim = t.size(1);
        check(t.size(1) == dim, op, "table ", k, " ", t.shape(), " has not the first table's width ", dim);
        const Shape& s = ids[k].shape();
        check(s.size() <= shape.size() &&
                  std::equal(s.begin(), s.end(), shape.end() - static_cast<ptrdiff_t>(s.size())),
              op, "ids ", k, " ", s, " are not the trailing axes of the first ids' ", shape);
        check_ids(op, ids[k], "ids " + std::to_string(k), t, "table");
    }
    const int64_t rows = ids[0].numel();
    // an id tensor broadcasts over the first's leading axes: row r takes its entry r % count
    std::vector<const float*> from(tables.size());
    std::vector<const int64_t*> index(tables.size());
    std::vector<int64_t> count(tables.size());
    for (size_t k = 0; k < tables.size(); ++k) {
        from[k] = tables[k].data();
        index[k] = ids[k].data();
        count[k] = ids[k].numel();
    }
    Shape out_shape = shape;
    out_shape.push_back(dim);
    Tensor out = Tensor::empty(out_shape);
    float* po = out.data();
    constexpr int64_t kAhead = 8;
    if (rows > 0 && dim > 0) {
        detail::parallel_for(rows, std::max<int64_t>(1, detail::kElementwiseGrain / dim),
                             [&](int64_t begin, int64_t end) {
            with_isa_level([&](auto) {
                for (int64_t r = begin; r < end; ++r) {
                    if (r + kAhead < end) {
                        const char* next =
                            reinterpret_cast<const char*>(from[0] + index[0][(r + kAhead) % count[0]] * dim);
                        for (int64_t b = 0; b < dim * static_cast<int64_t>(sizeof(float)); b += 64)
                            __builtin_prefetch(next + b);
                    }
                    float* o = po + r * dim;
                    std::memcpy(o, from[0] + index[0][r % count[0]] * dim, static_cast<size_t>(dim) * sizeof(float));
                    // added one table at a time, as add(add(a, b), c) adds them
                    for (size_t k = 1; k < from.size(); ++k) {
                        const float* __restrict row = from[k] + index[k][r % count[k]] * dim;
#pragma omp simd
                        for (int64_t j = 0; j < dim; ++j) o[j] += row[j];
                    }
                }
            });
        });
    }
    return record(op, out, tables, [ids, tables, rows, dim](const Tensor& g) {
        std::vector<Tensor> grads;
        for (size_t k = 0; k < tables.size(); ++k) {
            // g's rows in order, each stretch of ids[k]'s count scattered by its ids (embedding's)
            Tensor gw = Tensor::zeros(tables[k].shape());
            const int64_t count = ids[k].numel();
            for (int64_t first = 0; first < rows; first += count)
                scatter_add_blocks(g.data() + first * dim, gw.data(), ids[k].data(), count, 1, tables[k].size(0), dim);
            grads.push_back(gw);
        }
        return grads;
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
    const int64_t outer = shape.numel(0, static_cast<size_t>(axis));
    const int64_t inner = shape.numel(static_cast<size_t>(axis) + 1, shape.size());
    Shape out_shape = shape;
    out_shape[static_cast<size_t>(axis)] = picked;
    Tensor out = Tensor::empty(out_shape);
    gather_blocks(x.data(), out.data(), pi, picked, outer, count, inner);
    return record("index_select", out, {x}, [indices, shape, outer, count, picked, inner](const Tensor& g) {
        Tensor gx = Tensor::zeros(shape);
        scatter_add_blocks(g.data(), gx.data(), indices.data(), picked, outer, count, inner);
        return std::vector<Tensor>{gx};
    });
}

Tensor where(const IntTensor& mask, const Tensor& x, float value) {
    check(x.defined(), "where", "the operand is undefined");
    check(broadcast_shapes(x.shape(), mask.shape(), "where") == x.shape(), "where", "mask ", mask.shape(),
          " does not broadcast to the input's shape ", x.shape());
    Tensor keep = Tensor::empty(mask.shape());  // 1 where the mask is set
    for (int64_t i = 0; i < mask.numel(); ++i) keep.data()[i] = mask.data()[i] != 0 ? 1.0f : 0.0f;
    Tensor out = detail::broadcast_zip(x, keep, x.shape(), [value](float v, float m) { return m != 0 ? v : value; });
    return record("where", out, {x}, [keep](const Tensor& g) {
        return std::vector<Tensor>{
            detail::broadcast_zip(g, keep, g.shape(), [](float gv, float m) { return m != 0 ? gv : 0.0f; })};
    });
}

}  // namespace seqgrad
