// Weights packed once for inference: y = x W^T + b through oneDNN's matmul kernels, with W
// reordered, at packing time, into the blocked layout those kernels read, instead of being copied
// into panels at every product as sgemm does. Three precisions:
//
//   float32  the same arithmetic as linear(), summed in another order (results agree to float
//            rounding); about 1.3-1.5x sgemm's speed at decoding's shapes (64-128 rows). Products
//            of at most 4 rows (one sequence decoded, or a beam of four) read the packed weights
//            with seqgrad's own AVX-512 loop instead of oneDNN's kernel, at the rate memory gives
//            (about twice oneDNN's at one row: packed.cpp).
//   int8     W quantized per output row and x per row as it arrives, summed exactly in int32 on
//            AMX or AVX-512 VNNI where the CPU has them, and scaled back to float32. Faster still,
//            and it changes results: an option, never the default.
//   bf16     W rounded to bfloat16 once and x as it arrives (precision.h), the products summed in
//            float32: on CPUs with AVX512_BF16 or AMX only (elsewhere an Error). Within bfloat16's
//            rounding of float32 (about 0.2% of each operand), and an option too.
//
// Int8 quantization is symmetric: row r of W is stored as round(W[r, :] / s_r) in [-L, L] with
// s_r = max |W[r, :]| / L, and row i of x as round(x[i, :] / s_i) in [-127, 127] with its own s_i, so
//     y[i, r] = s_i * s_r * sum_k qx[i, k] * qW[r, k] + b[r],
// summed exactly. L is int8_weight_levels(): 127 on CPUs with AVX-512 VNNI, AVX-VNNI or AMX; 63 on
// the others (AVX2, AVX-512 without VNNI), whose int8 instructions add pairs of products in 16
// bits, which 127 levels would overflow.
//
// Packing needs oneDNN (Debian's libdnnl-dev, found at build time). Without it, float32 packing is
// not done (Module::pack_weights leaves layers on sgemm) and int8 and bf16 are Errors.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "seqgrad/core/precision.h"
#include "seqgrad/core/tensor.h"

namespace seqgrad {

// Whether weights can be packed in this precision: the build has oneDNN and, for float32, oneDNN
// has a kernel for this CPU that reads the packed layout as it is (brgemm: AVX-512 and newer; on
// other CPUs float32 layers stay on sgemm, which is as fast there).
bool packing_available(Precision precision);
// The kernel oneDNN runs for this precision on this CPU ("brg:avx512_core", "brg:avx512_core_amx_int8",
// "brg:avx512_core_vnni", "gemm:jit", ...), or why there is none.
std::string packed_kernel_name(Precision precision);
// Turns packing off (false) for the whole process, or back on: packing_available() then answers
// false for both precisions, as on a CPU or build without the kernels, so that the sgemm fallback
// (and int8's refusal) can be tested on any machine. PackedMatrix itself is unaffected.
void set_packing_enabled(bool enabled);
// L, the levels each side of zero of int8 weights on this CPU (127 or 63; see above). oneDNN's
// ONEDNN_MAX_CPU_ISA, read once, lowers it as it lowers the kernels.
int int8_weight_levels();

// A weight matrix [out, in] packed for oneDNN's kernels (quantized first for int8), once, in column
// blocks (one per thread of seqgrad's pool at packing time, so the threads read disjoint weights).
// A snapshot: later changes to the weight do not reach it. Immutable and safe to share between
// threads.
class PackedMatrix {
public:
    // Throws Error if the build has no oneDNN, or weight is not a 2-D tensor with finite values
    // (int8) and extents that fit oneDNN's.
    PackedMatrix(const Tensor& weight, Precision precision);
    ~PackedMatrix();
    PackedMatrix(const PackedMatrix&) = delete;
    PackedMatrix& operator=(const PackedMatrix&) = delete;

    Precision precision() const;
    int64_t out_features() const;
    int64_t in_features() const;
    const float* scales() const;  // int8: s_r, [out]; float32: nullptr

    struct Impl;
    const Impl& impl() const { return *impl_; }

private:
    std::unique_ptr<Impl> impl_;
};

// What linear_packed applies to each output after the bias, in the same pass over the product's
// results: nothing, relu, or the exact (erf) gelu; the same values as relu() or gelu() on its output.
enum class PackedActivation { none, relu, gelu };

// linear(x, W, bias) with the packed W, for x [..., in] -> [..., out], then `activation`. Records
// nothing for autograd: x must not require grad while grad mode is on (Error).
Tensor linear_packed(const Tensor& x, const PackedMatrix& weight, const Tensor& bias,
                     PackedActivation activation = PackedActivation::none);

// linear_packed(x, weights[i], biases[i]) for each i, the weights packed in one precision with x's
// in_features: x is rounded (bf16) or quantized (int8) once for all of them, as a self-attention's
// queries, keys and values need it. biases[i] may be undefined (no bias).
std::vector<Tensor> linear_packed(const Tensor& x, const std::vector<const PackedMatrix*>& weights,
                                  const std::vector<Tensor>& biases);

// linear_packed(activation(linear_packed(x, first, first_bias)), second, second_bias), the two
// weights packed in one precision (a feed-forward block's two layers, between them its activation).
// For many rows through small weights each thread takes a chunk of rows through both products in
// turn, so that the rows between them stay in its cache; else the two run one after the other.
// The same values either way.
Tensor linear_packed(const Tensor& x, const PackedMatrix& first, const Tensor& first_bias, PackedActivation between,
                     const PackedMatrix& second, const Tensor& second_bias);

}  // namespace seqgrad
