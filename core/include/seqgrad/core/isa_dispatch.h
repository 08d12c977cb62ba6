// Running a loop at the level isa_level() chose (cpu.h), from a library built for x86-64-v2.
//
//   with_isa_level([&](auto isa) { layer_norm_rows(x, y, begin, end, d); });
//
// calls the lambda from one of three copies of a small function, each compiled for its level
// (GCC's and clang's `target` attribute) and `flatten`ed: the lambda and every function it calls
// whose body is in sight (the kernel, vector_math.h's exp) are inlined into that copy and
// vectorised there, 4, 8 or 16 floats wide. The kernel itself is written once, as plain C++; code
// with intrinsics of one level takes the level as a compile-time constant (`decltype(isa)::value`,
// an IsaLevel) and chooses its branch with `if constexpr`, its intrinsic helpers marked with the
// level's SEQGRAD_TARGET_ attribute.
//
// Nothing compiled for a higher level is reachable from a lower one: every translation unit is
// compiled for the baseline, so an inline function or template that the linker keeps one copy of
// is the baseline's wherever it came from; only the copies below (and functions marked with a
// level's attribute) hold higher instructions, and they run only behind the level's check.
// (Compiling whole files with higher -m flags would not be safe: the linker may keep such a file's
// copy of an inline function for callers everywhere.)
#pragma once

#include <type_traits>

#include "seqgrad/core/cpu.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define SEQGRAD_TARGET_AVX2 __attribute__((target("avx2,fma,bmi,bmi2,f16c,lzcnt,popcnt")))
#if defined(__clang__)
#define SEQGRAD_TARGET_AVX512 \
    __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,bmi,bmi2,f16c,lzcnt,popcnt")))
#else
// GCC's generic tuning may prefer 256-bit vectors; seqgrad's loops want all sixteen lanes.
#define SEQGRAD_TARGET_AVX512                                                                                     \
    __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,bmi,bmi2,f16c,lzcnt,popcnt,prefer-vector-" \
                          "width=512")))
#endif
#define SEQGRAD_FLATTEN __attribute__((flatten))
#define SEQGRAD_HAVE_ISA_LEVELS 1
#else
#define SEQGRAD_TARGET_AVX2
#define SEQGRAD_TARGET_AVX512
#define SEQGRAD_FLATTEN
#define SEQGRAD_HAVE_ISA_LEVELS 0
#endif

namespace seqgrad {

template <IsaLevel L>
using IsaTag = std::integral_constant<IsaLevel, L>;

namespace detail {

template <typename F>
SEQGRAD_FLATTEN inline void run_portable(F& f) {
    f(IsaTag<IsaLevel::portable>{});
}

#if SEQGRAD_HAVE_ISA_LEVELS
template <typename F>
SEQGRAD_FLATTEN SEQGRAD_TARGET_AVX2 inline void run_avx2(F& f) {
    f(IsaTag<IsaLevel::avx2>{});
}

template <typename F>
SEQGRAD_FLATTEN SEQGRAD_TARGET_AVX512 inline void run_avx512(F& f) {
    f(IsaTag<IsaLevel::avx512>{});
}
#endif

}  // namespace detail

// f(IsaTag<level>{}) from the copy compiled for isa_level(). Throws what isa_level() throws.
template <typename F>
void with_isa_level(F&& f) {
#if SEQGRAD_HAVE_ISA_LEVELS
    switch (isa_level()) {
        case IsaLevel::avx512: return detail::run_avx512(f);
        case IsaLevel::avx2: return detail::run_avx2(f);
        case IsaLevel::portable: break;
    }
#endif
    detail::run_portable(f);
}

}  // namespace seqgrad
