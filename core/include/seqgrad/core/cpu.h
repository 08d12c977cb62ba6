// The instruction-set level seqgrad's own loops run at. One build runs on every x86-64 CPU from
// x86-64-v2 up: each of seqgrad's kernels (the activations, softmax and the loss, layer norm,
// attention, dropout, Adam, the LSTM cell, the packed products of a few rows) is compiled once per
// level, and the level is chosen once, at the first use, from the CPU:
//   portable  x86-64-v2 (SSE4.2): every x86-64 CPU of the last fifteen years
//   avx2      x86-64-v3: AVX2 and FMA (Intel since Haswell, AMD since Zen)
//   avx512    x86-64-v4: AVX-512 F, BW, DQ and VL (Intel Xeons since Skylake, AMD since Zen 4)
// The environment variable SEQGRAD_MAX_CPU_ISA=portable|avx2|avx512 caps it, so that any machine
// can run (and test) the lower levels' code; a level this CPU lacks is refused, as is an unknown
// name. The libraries seqgrad calls choose their own kernels (OpenBLAS: OPENBLAS_CORETYPE;
// oneDNN: ONEDNN_MAX_CPU_ISA).
#pragma once

#include <string>

namespace seqgrad {

enum class IsaLevel { portable = 0, avx2 = 1, avx512 = 2 };

// "portable", "avx2" or "avx512".
const char* isa_level_name(IsaLevel level);

// The highest level this CPU (and its operating system) supports.
IsaLevel cpu_isa_level();

// The highest level this process may run: cpu_isa_level(), capped by SEQGRAD_MAX_CPU_ISA. Throws
// Error, naming the variable, when it holds an unknown name or a level above the CPU's; every call
// (and every call of isa_level()) then throws the same.
IsaLevel max_isa_level();

// The level seqgrad's kernels run at now: max_isa_level() unless set_isa_level() chose a lower one.
IsaLevel isa_level();

// Runs seqgrad's kernels at `level` from now on, process-wide (to compare the levels' results in one
// process, or to run the portable code on purpose). Error for a level above max_isa_level().
void set_isa_level(IsaLevel level);

// One line for a start line or a header: "avx2 (AVX2 + FMA; this CPU: avx512, capped by
// SEQGRAD_MAX_CPU_ISA=avx2)".
std::string isa_description();

}  // namespace seqgrad
