// Position information: the Transformer's positional encoding added to the embeddings
// (sinusoidal, after Vaswani et al. (2017), or learned), and rotary position embedding (RoPE), which
// MultiHeadAttention applies to its queries and keys instead.
#pragma once

#include <cstdint>

#include "seqgrad/nn/module.h"

namespace seqgrad::nn {

enum class PositionalKind {
    sinusoidal,  // a fixed table, the buffer "pe" (not a parameter, not in state_dict)
    learned,     // a trained table, the parameter "weight" [max_len, dim]
};

// x + table[:T] for x [B, T, dim]. The sinusoidal table is computed in float32 exactly as the
// PyTorch Transformer of tests/fixtures/make_fixtures.py does: pe[p, 2i] = sin(p * exp(2i *
// -ln(10000) / dim)), pe[p, 2i+1] = cos(the same). The learned table starts from the same values,
// so a learned encoding begins as the fixed one.
class PositionalEncoding : public Module {
public:
    PositionalEncoding(int64_t dim, int64_t max_len, PositionalKind kind = PositionalKind::sinusoidal);
    // Throws Error when T exceeds max_len.
    Tensor forward(const Tensor& x) const;

    PositionalKind kind;
    Tensor table;  // [max_len, dim]: the buffer "pe" or the parameter "weight"
};

// The sinusoidal table [max_len, dim]; dim must be even (as in the PyTorch Transformer, whose code
// fails otherwise).
Tensor sinusoidal_table(int64_t max_len, int64_t dim);

// Rotary position embedding (Su et al., RoFormer) for x [..., T, d] with d even: each pair of
// features (2i, 2i+1) at position p = offset + t is rotated by the angle p * 10000^(-2i/d).
// Applied to queries and keys, it makes their dot product depend only on the difference of
// their positions. Differentiable; no parameters.
Tensor apply_rotary(const Tensor& x, int64_t offset = 0);

}  // namespace seqgrad::nn
