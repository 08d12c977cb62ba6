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
