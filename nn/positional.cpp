// Positional encodings: the sinusoidal or learned table added to embeddings, and rotary position
// embedding for queries and keys.
#include "seqgrad/nn/positional.h"

#include <cmath>
#include <vector>

#include "seqgrad/core/ops.h"
#include "seqgrad/nn/trace.h"

namespace seqgrad::nn {

Tensor sinusoidal_table(int64_t max_len, int64_t dim) {
    check(max_len > 0 && dim > 0 && dim % 2 == 0, "sinusoidal_table",
          "needs a positive max_len and a positive even dim, got ", max_len, " and ", dim);
    // The PyTorch Transformer's float32 steps: div_term = exp(float(2i) * float(-ln(10000) / dim)),
    // angle = float(p) * div_term.
    const float log_step = static_cast<float>(-std::log(10000.0) / static_cast<double>(dim));
    Tensor table = Tensor::empty({max_len, dim});
    float* pe = table.data();
    for (int64_t i = 0; 2 * i < dim; ++i) {
        const float div_term = std::exp(static_cast<float>(2 * i) * log_step);
        for (int64_t p = 0; p < max_len; ++p) {
            const float angle = static_cast<float>(p) * div_term;
            pe[p * dim + 2 * i] = std::sin(angle);
            pe[p * dim + 2 * i + 1] = std::cos(angle);
        }
    }
    return table;
}

PositionalEncoding::PositionalEncoding(int64_t dim, int64_t max_len, PositionalKind kind_) : kind(kind_) {
    if (kind == PositionalKind::sinusoidal) table = register_buffer("pe", sinusoidal_table(max_len, dim));
    else table = register_parameter("weight", sinusoidal_table(max_len, dim));
}

Tensor PositionalEncoding::forward(const Tensor& x) const {
    check(x.dim() == 3 && x.size(2) == table.size(1), "PositionalEncoding", "expects [batch, len, ", table.size(1),
          "], got ", x.shape());
    const int64_t len = x.size(1);
    check(len <= table.size(0), "PositionalEncoding", "sequence length ", len, " exceeds max_len ", table.size(0));
    // [len, dim] broadcast over the batch; slicing the parameter keeps its gradient path.
    Tensor y = add(x, len == table.size(0) ? table : slice(table, 0, 0, len));
    trace(*this, y);
    return y;
}

Tensor apply_rotary(const Tensor& x, int64_t offset) {
    check(x.dim() >= 2 && x.size(-1) % 2 == 0, "apply_rotary", "expects [..., len, d] with d even, got ", x.shape());
    check(offset >= 0, "apply_rotary", "negative position offset ", offset);
    const int64_t len = x.size(-2), d = x.size(-1);
    // y[2i] = x[2i] cos - x[2i+1] sin,  y[2i+1] = x[2i+1] cos + x[2i] sin
    //   = x * cos_table + swap_pairs(x) * signed_sin_table, tables [len, d].
    const float log_step = static_cast<float>(-std::log(10000.0) / static_cast<double>(d));
    std::vector<float> cos_values(static_cast<size_t>(len * d)), sin_values(static_cast<size_t>(len * d));
    for (int64_t t = 0; t < len; ++t)
        for (int64_t i = 0; 2 * i < d; ++i) {
            const float angle = static_cast<float>(offset + t) * std::exp(static_cast<float>(2 * i) * log_step);
            const size_t at = static_cast<size_t>(t * d + 2 * i);
            cos_values[at] = cos_values[at + 1] = std::cos(angle);
            sin_values[at] = -std::sin(angle);
            sin_values[at + 1] = std::sin(angle);
        }
    const Tensor cos_table = Tensor::from_vector(cos_values, {len, d});
    const Tensor sin_table = Tensor::from_vector(sin_values, {len, d});

    Shape pairs = x.shape();  // [..., len, d/2, 2]
    pairs[pairs.size() - 1] = d / 2;
    pairs.push_back(2);
    const std::vector<Tensor> halves = split(reshape(x, pairs), {1, 1}, -1);  // x[2i], x[2i+1]
    const Tensor swapped = reshape(concat({halves[1], halves[0]}, -1), x.shape());
    return add(mul(x, cos_table), mul(swapped, sin_table));
}

}  // namespace seqgrad::nn
