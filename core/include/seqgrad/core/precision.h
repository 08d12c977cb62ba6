// Number formats. Packed weights for decoding come in float32, int8 and bfloat16 (packed.h); the
// matrix products of training in float32 or bfloat16 (the mixed precision of "precision": "bf16").
//
// bfloat16 is float32 with the low 16 bits of the mantissa cut off: the same 8-bit exponent (the
// same range), 8 bits of precision instead of 24 (a relative rounding error up to 2^-9, about
// 0.2%). CPUs with AVX512_BF16 or AMX multiply pairs of them and add the products into float32
// sums, at two (AVX512_BF16) or many (AMX) times the float32 rate.
#pragma once

#include <cstdint>
#include <string>

namespace seqgrad {

enum class Precision { float32, int8, bf16 };
const char* precision_name(Precision precision);  // "float32", "int8", "bf16"
// "float32", "int8" or "bf16"; anything else is an Error naming `what` (the option being read).
Precision parse_precision(const std::string& name, const char* what);

// x rounded to the nearest bfloat16 (ties to even); a NaN stays a NaN, values past bfloat16's
// largest round to infinity as float32's do.
uint16_t to_bf16(float x);
float from_bf16(uint16_t h);

// Whether bfloat16 products run here: the build has oneDNN, the CPU has AVX512_BF16 or AMX (oneDNN
// emulates bfloat16 on other CPUs, slower than float32; seqgrad refuses instead), and they have
// not been turned off with set_bf16_enabled(false).
bool bf16_available();
// The kernel oneDNN runs bfloat16 products with on this CPU ("brg:avx512_core_bf16",
// "brg:avx512_core_amx", ...), or why there is none.
std::string bf16_kernel_name();
// Turns bfloat16 off for the whole process (false) or back on: bf16_available() then answers
// false, as on a CPU without the instructions, so that the refusals can be tested on any machine.
void set_bf16_enabled(bool enabled);
// Why bfloat16 is not available here, as a sentence for an error message ("" when it is).
std::string bf16_unavailable_reason();

// The precision of the matrix products of linear layers, LSTM gates and plain matmul, process-wide
// (they run on every thread of the pool): float32, the default, or bf16 (each operand rounded to
// bfloat16, the products summed in float32 into a float32 result, so accumulating into a gradient
// stays float32). Attention's per-head products stay float32 either way.
Precision matmul_precision();

// Which library runs the float32 products of weight matrices in training and evaluation (linear
// layers, the LSTM's gates; plain matmul and attention's per-head products stay on sgemm, and
// decoding's packed weights are oneDNN's already): "sgemm" (OpenBLAS) or "onednn" (oneDNN's
// float32 matmul, 5-10% faster at training's shapes on AVX-512).
// Each thread of the pool runs its own block with one thread of the library either way, so a
// result is bit-identical run to run at a given thread count. The default is "onednn" where
// oneDNN's float32 kernel on this CPU is an AVX-512 one, else "sgemm"; the environment variable
// SEQGRAD_FLOAT32_PRODUCTS=sgemm|onednn|auto sets it for a process (read at the first product).
std::string float32_products();  // "sgemm" or "onednn"
// The kernel behind it: "OpenBLAS sgemm (Cooperlake)", "oneDNN brg:avx512_core", ...
std::string float32_products_kernel();
// "sgemm", "onednn" or "auto" (the default's rule), process-wide; Error for any other name, and
// for "onednn" in a build without oneDNN.
void set_float32_products(const std::string& which);

// Sets matmul_precision() for its lifetime and restores the previous one after. Throws Error for
// int8, and for bf16 where bf16_available() is false (saying why).
class MatmulPrecisionScope {
public:
    explicit MatmulPrecisionScope(Precision precision);
    ~MatmulPrecisionScope();
    MatmulPrecisionScope(const MatmulPrecisionScope&) = delete;
    MatmulPrecisionScope& operator=(const MatmulPrecisionScope&) = delete;

private:
    Precision previous_;
};

}  // namespace seqgrad
