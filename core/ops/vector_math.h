// Branch-free float32 exp, tanh, sigmoid and erf that the compiler can vectorise (libm's versions
// are calls it cannot), accurate to a few float32 ulps, for the loops of softmax, the loss, the
// LSTM cell and the activations. Internal to core/.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

#include <immintrin.h>

#include "seqgrad/core/isa_dispatch.h"

namespace seqgrad::detail {

// e^x for x in [-87, 88]: x = n ln2 + r with |r| <= ln2/2, e^r by a degree-6 polynomial (Taylor,
// error < 2e-8 relative on that range), 2^n by building the exponent bits. NaN gives NaN, and x in
// (88.38, 88.7] gives +inf (n = 128): no conversion of a float to an integer, so no input is
// undefined behaviour.
inline float exp_in_range(float x) {
    // Round to nearest by adding and removing 1.5 * 2^23 (roundf is a library call the
    // compiler cannot vectorise). The sum's low bits hold n as an integer, 2^22 + n, so 2^n's
    // exponent field is read from them with one integer addition rather than a conversion.
    constexpr float kRound = 12582912.0f;
    const float shifted = x * 1.44269504088896341f + kRound;
    const float n = shifted - kRound;
    const float r = (x - n * 0.693145751953125f) - n * 1.42860682030941723212e-6f;
    float p = 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    const uint32_t bits = (std::bit_cast<uint32_t>(shifted) - (std::bit_cast<uint32_t>(kRound) - 127u)) << 23;
    return p * std::bit_cast<float>(bits);
}

// e^x, exp_in_range's values within its range. Results below the normal floats are 0 (a masked
// -1e9 score gives exactly 0, as in PyTorch); arguments above 88.7 give +inf and those in
// (88, 88.7] saturate at e^88; NaN gives NaN.
inline float fast_exp(float x) {
    const float input = x;
    // NaN fails the second test and becomes -87, and is given back at the end (the lanes of
    // fast_exp16 do the same).
    x = x > 88.0f ? 88.0f : x;
    x = x >= -87.0f ? x : -87.0f;
    const float y = exp_in_range(x);
    return input != input ? input : (input < -87.0f ? 0.0f : (input > 88.7f ? __builtin_inff() : y));
}

// e^x for x <= 0 where a caller needs no more than that, as erf's exp(-a^2) does: fast_exp's
// value for x in [-87, 0], and e^-87 (about 1.6e-38) below it and for NaN, which 1 - p t e cannot
// tell from 0. Without fast_exp's guards gelu takes a fifth fewer instructions.
inline float fast_exp_nonpositive(float x) { return exp_in_range(x >= -87.0f ? x : -87.0f); }

// The AVX-512 helpers below carry their level's target attribute: they run only from a kernel
// that with_isa_level (isa_dispatch.h) called at the avx512 level.
//
// GCC 12 warns that the plain forms of some AVX-512 intrinsics use an uninitialized vector (they
// start from an undefined one); their zero-masking forms with every lane kept are the same
// instructions without the warning.
constexpr __mmask16 kAllLanes = 0xFFFF;

// fast_exp on sixteen lanes, the same arithmetic step for step (with the fused multiply-adds GCC
// makes of fast_exp's products and sums, each lane equals fast_exp's result bit for bit). The
// compiler's own vectorisation of fast_exp prefers 256-bit vectors on some CPUs, and a sum of many
// exponentials then runs at half the speed.
// exp_in_range on sixteen lanes, for x in [-87, 88] (NaN gives NaN).
SEQGRAD_TARGET_AVX512 inline __m512 exp_in_range16(__m512 x) {
    const __m512 round = _mm512_set1_ps(12582912.0f);
    const __m512 n = _mm512_sub_ps(_mm512_fmadd_ps(x, _mm512_set1_ps(1.44269504088896341f), round), round);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860682030941723212e-6f), r);
    __m512 p = _mm512_set1_ps(1.0f / 720.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    const __m512i bits =
        _mm512_maskz_slli_epi32(kAllLanes,
                                _mm512_add_epi32(_mm512_maskz_cvtps_epi32(kAllLanes, n), _mm512_set1_epi32(127)), 23);
    return _mm512_mul_ps(p, _mm512_castsi512_ps(bits));
}

SEQGRAD_TARGET_AVX512 inline __m512 fast_exp16(__m512 input) {
    // min/max return their second operand when the first is NaN: NaN becomes 88, then is given
    // back at the end, as in fast_exp.
    __m512 x = _mm512_maskz_min_ps(kAllLanes, input, _mm512_set1_ps(88.0f));
    x = _mm512_maskz_max_ps(kAllLanes, x, _mm512_set1_ps(-87.0f));
    __m512 y = exp_in_range16(x);
    y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(input, _mm512_set1_ps(88.7f), _CMP_GT_OQ),
                           _mm512_set1_ps(__builtin_inff()));
    y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(input, _mm512_set1_ps(-87.0f), _CMP_LT_OQ), _mm512_setzero_ps());
    return _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(input, input, _CMP_UNORD_Q), input);
}

// fast_exp16 for arguments that cannot be positive, x - max(x) as softmax's are: the same lanes bit
// for bit (0 below -87, NaN for NaN) without the guards above 88, two thirds of fast_exp16's
// other guards' instructions fewer.
SEQGRAD_TARGET_AVX512 inline __m512 fast_exp16_nonpositive(__m512 input) {
    // max_ps gives its second operand when one is NaN: the NaN goes through the arithmetic.
    const __m512 y = exp_in_range16(_mm512_maskz_max_ps(kAllLanes, _mm512_set1_ps(-87.0f), input));
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(input, _mm512_set1_ps(-87.0f), _CMP_NLT_UQ), y);
}

// fast_exp on eight lanes for the avx2 level: fast_exp16's arithmetic in 256-bit vectors.
SEQGRAD_TARGET_AVX2 inline __m256 exp_in_range8(__m256 x) {
    const __m256 round = _mm256_set1_ps(12582912.0f);
    const __m256 n = _mm256_sub_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), round), round);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.42860682030941723212e-6f), r);
    __m256 p = _mm256_set1_ps(1.0f / 720.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
}

SEQGRAD_TARGET_AVX2 inline __m256 fast_exp8(__m256 input) {
    __m256 x = _mm256_min_ps(input, _mm256_set1_ps(88.0f));  // NaN becomes 88 (given back below)
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
    __m256 y = exp_in_range8(x);
    y = _mm256_blendv_ps(y, _mm256_set1_ps(__builtin_inff()), _mm256_cmp_ps(input, _mm256_set1_ps(88.7f), _CMP_GT_OQ));
    y = _mm256_blendv_ps(y, _mm256_setzero_ps(), _mm256_cmp_ps(input, _mm256_set1_ps(-87.0f), _CMP_LT_OQ));
    return _mm256_blendv_ps(y, input, _mm256_cmp_ps(input, input, _CMP_UNORD_Q));
}

// fast_exp16_nonpositive's eight lanes.
SEQGRAD_TARGET_AVX2 inline __m256 fast_exp8_nonpositive(__m256 input) {
    const __m256 y = exp_in_range8(_mm256_max_ps(_mm256_set1_ps(-87.0f), input));
    return _mm256_and_ps(y, _mm256_cmp_ps(input, _mm256_set1_ps(-87.0f), _CMP_NLT_UQ));
}

// The first `count` of eight lanes (all of them when count >= 8), as maskload/maskstore take it.
SEQGRAD_TARGET_AVX2 inline __m256i first_lanes8(int64_t count) {
    const __m256i index = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int32_t>(count < 8 ? count : 8)), index);
}

SEQGRAD_TARGET_AVX2 inline float sum_lanes8(__m256 v) {
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

SEQGRAD_TARGET_AVX2 inline float max_lanes8(__m256 v) {
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

// The first `count` of sixteen lanes (all of them when count >= 16): a remainder's mask.
SEQGRAD_TARGET_AVX512 inline __mmask16 first_lanes(int64_t count) {
    return count >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << count) - 1);
}

// The sum (Max false) or the largest (Max true) of the sixteen lanes of v, pairing them as halves,
// then quarters, then pairs, then neighbours (lane i with lane i ^ 8, ^ 4, ^ 2, ^ 1).
template <bool Max>
SEQGRAD_TARGET_AVX512 inline __m512 combine16(__m512 a, __m512 b) {
    if constexpr (Max) return _mm512_maskz_max_ps(kAllLanes, a, b);
    else return _mm512_add_ps(a, b);
}

template <bool Max>
SEQGRAD_TARGET_AVX512 inline float reduce_lanes16(__m512 v) {
    v = combine16<Max>(v, _mm512_maskz_shuffle_f32x4(kAllLanes, v, v, 0x4E));
    v = combine16<Max>(v, _mm512_maskz_shuffle_f32x4(kAllLanes, v, v, 0xB1));
    v = combine16<Max>(v, _mm512_maskz_permute_ps(kAllLanes, v, 0x4E));
    v = combine16<Max>(v, _mm512_maskz_permute_ps(kAllLanes, v, 0xB1));
    return _mm512_cvtss_f32(v);
}

SEQGRAD_TARGET_AVX512 inline float sum_lanes16(__m512 v) { return reduce_lanes16<false>(v); }
SEQGRAD_TARGET_AVX512 inline float max_lanes16(__m512 v) { return reduce_lanes16<true>(v); }

// 1 / (1 + e^-x). The argument of e is clamped to [-87, 88.5] by tests that keep NaN, and
// exp_in_range gives NaN back for NaN and +inf above 88.38: sigmoid(-inf) is 0, sigmoid(inf) 1.
// Without fast_exp's guards (each a compare and a blend) the LSTM cell's gates, four sigmoids
// and tanhs and a tanh a unit, took 4.4 ns a unit on one AVX2 core; now 2.9 (AMD EPYC, Zen 4).
inline float fast_sigmoid(float x) {
    float t = -x;
    t = t > 88.5f ? 88.5f : t;
    t = t < -87.0f ? -87.0f : t;
    return 1.0f / (1.0f + exp_in_range(t));
}

// tanh(x) = sign(x) (1 - e^{-2|x|}) / (1 + e^{-2|x|}); absolute error below 1e-7. Past |x| = 43.5
// the argument stays at -87, where the quotient is 1 already; NaN passes through as NaN.
inline float fast_tanh(float x) {
    float t = -2.0f * std::fabs(x);
    t = t < -87.0f ? -87.0f : t;
    const float e = exp_in_range(t);
    return std::copysign((1.0f - e) / (1.0f + e), x);
}

// erf(a) for a >= 0, given e = exp(-a^2): Abramowitz and Stegun 7.1.26 refined, |error| < 1.5e-7
// (absolute).
inline float erf_nonnegative(float a, float e) {
    const float t = 1.0f / (1.0f + 0.3275911f * a);
    float p = 1.061405429f;
    p = p * t - 1.453152027f;
    p = p * t + 1.421413741f;
    p = p * t - 0.284496736f;
    p = p * t + 0.254829592f;
    return 1.0f - p * t * e;
}

// gelu(x) = x Phi(x) and its slope Phi(x) + x phi(x) (Phi, phi: the standard normal's distribution
// and density) at once: Phi(x) = (1 + erf(x / sqrt 2)) / 2, and the exp(-x^2 / 2) that erf needs
// is phi's too, so the pair costs one exp and one division.
struct GeluSlope {
    float value, slope;
};
inline GeluSlope gelu_with_slope(float x) {
    constexpr float inv_sqrt2 = 0.70710678118654752f;
    constexpr float inv_sqrt_2pi = 0.39894228040143268f;
    const float z = x * inv_sqrt2;
    const float az = std::fabs(z);
    const float e = fast_exp_nonpositive(-az * az);  // x NaN: e finite, x * cdf NaN
    const float r = erf_nonnegative(az, e);
    const float cdf = 0.5f * (1 + std::copysign(r, z));
    return {x * cdf, cdf + x * (inv_sqrt_2pi * e)};
}

// gelu_with_slope on N vectors of eight lanes from x (value into value, slope into slope unless
// null), each step taken across all N vectors before the next: one vector's steps wait on one
// another (the exponential's polynomial, erf's), and the compiler's loop over single vectors
// keeps too few of them in flight for a core's out-of-order window to fill its units. The same
// operations as gelu_with_slope's (exp_in_range's and erf_nonnegative's coefficients, in their
// order), fused as the compiler fuses those, so each lane equals its result bit for bit. On an AMD
// EPYC Zen 1 (two threads), `gelu/forward_backward/25165824` went from 53.6 to 45.4-47.9 ms (N = 2
// and 3: 47.8-48.2), the GPT's GELU from 2.2 to 1.8 ms a step.
template <int N>
SEQGRAD_TARGET_AVX2 inline void gelu_with_slope8(const float* x, float* value, float* slope) {
    const __m256 sign = _mm256_set1_ps(-0.0f), one = _mm256_set1_ps(1.0f), half = _mm256_set1_ps(0.5f);
    const __m256 round = _mm256_set1_ps(12582912.0f);  // exp_in_range's kRound
    __m256 xv[N], z[N], az[N], t[N], shifted[N], r[N], p[N], q[N], e[N];
#define SEQGRAD_EACH(statement) \
    _Pragma("GCC unroll 8") for (int v = 0; v < N; ++v) { statement; }
    SEQGRAD_EACH(xv[v] = _mm256_loadu_ps(x + 8 * v))
    SEQGRAD_EACH(z[v] = _mm256_mul_ps(xv[v], _mm256_set1_ps(0.70710678118654752f)))
    SEQGRAD_EACH(az[v] = _mm256_andnot_ps(sign, z[v]))
    // -az^2, at least -87 (NaN becomes -87 too: max_ps gives its second operand for NaN)
    SEQGRAD_EACH(t[v] = _mm256_max_ps(_mm256_mul_ps(_mm256_xor_ps(az[v], sign), az[v]), _mm256_set1_ps(-87.0f)))
    SEQGRAD_EACH(q[v] = _mm256_div_ps(one, _mm256_fmadd_ps(az[v], _mm256_set1_ps(0.3275911f), one)))
    // e = exp_in_range(t)
    SEQGRAD_EACH(shifted[v] = _mm256_fmadd_ps(t[v], _mm256_set1_ps(1.44269504088896341f), round))
    SEQGRAD_EACH(r[v] = _mm256_sub_ps(shifted[v], round))
    SEQGRAD_EACH(t[v] = _mm256_fnmadd_ps(r[v], _mm256_set1_ps(0.693145751953125f), t[v]))
    SEQGRAD_EACH(t[v] = _mm256_fnmadd_ps(r[v], _mm256_set1_ps(1.42860682030941723212e-6f), t[v]))
    SEQGRAD_EACH(p[v] = _mm256_fmadd_ps(_mm256_set1_ps(1.0f / 720.0f), t[v], _mm256_set1_ps(1.0f / 120.0f)))
    SEQGRAD_EACH(p[v] = _mm256_fmadd_ps(p[v], t[v], _mm256_set1_ps(1.0f / 24.0f)))
    SEQGRAD_EACH(p[v] = _mm256_fmadd_ps(p[v], t[v], _mm256_set1_ps(1.0f / 6.0f)))
    SEQGRAD_EACH(p[v] = _mm256_fmadd_ps(p[v], t[v], half))
    SEQGRAD_EACH(p[v] = _mm256_fmadd_ps(p[v], t[v], one))
    SEQGRAD_EACH(p[v] = _mm256_fmadd_ps(p[v], t[v], one))
    SEQGRAD_EACH(e[v] = _mm256_mul_ps(
                     p[v],
                     _mm256_castsi256_ps(_mm256_slli_epi32(
                         _mm256_sub_epi32(_mm256_castps_si256(shifted[v]), _mm256_set1_epi32(0x4B400000 - 127)), 23))))
    // r = erf_nonnegative(az, e), then given z's sign, and the distribution 0.5 (1 + r)
    SEQGRAD_EACH(p[v] = _mm256_fmadd_ps(_mm256_set1_ps(1.061405429f), q[v], _mm256_set1_ps(-1.453152027f)))
    SEQGRAD_EACH(p[v] = _mm256_fmadd_ps(p[v], q[v], _mm256_set1_ps(1.421413741f)))
    SEQGRAD_EACH(p[v] = _mm256_fmadd_ps(p[v], q[v], _mm256_set1_ps(-0.284496736f)))
    SEQGRAD_EACH(p[v] = _mm256_fmadd_ps(p[v], q[v], _mm256_set1_ps(0.254829592f)))
    SEQGRAD_EACH(r[v] = _mm256_fnmadd_ps(_mm256_mul_ps(p[v], q[v]), e[v], one))
    SEQGRAD_EACH(r[v] = _mm256_or_ps(_mm256_andnot_ps(sign, r[v]), _mm256_and_ps(z[v], sign)))
    SEQGRAD_EACH(r[v] = _mm256_mul_ps(half, _mm256_add_ps(one, r[v])))
    SEQGRAD_EACH(_mm256_storeu_ps(value + 8 * v, _mm256_mul_ps(xv[v], r[v])))
    if (slope != nullptr)
        SEQGRAD_EACH(_mm256_storeu_ps(
            slope + 8 * v, _mm256_fmadd_ps(xv[v], _mm256_mul_ps(_mm256_set1_ps(0.39894228040143268f), e[v]), r[v])))
#undef SEQGRAD_EACH
}

// value[i] = gelu(x[i]) and, unless slope is null, slope[i] = its slope, for i < n, at level L (from
// with_isa_level's copy for L): 32 at a time through gelu_with_slope8 at avx2, the rest (and every
// element at the other levels) through gelu_with_slope, which the compiler vectorises.
template <IsaLevel L>
inline void gelu_values(const float* __restrict x, float* __restrict value, float* __restrict slope, int64_t n) {
    int64_t i = 0;
#if SEQGRAD_HAVE_ISA_LEVELS
    if constexpr (L == IsaLevel::avx2)
        for (; i + 32 <= n; i += 32) gelu_with_slope8<4>(x + i, value + i, slope != nullptr ? slope + i : nullptr);
#endif
    if (slope == nullptr) {
        for (; i < n; ++i) value[i] = gelu_with_slope(x[i]).value;
        return;
    }
    for (; i < n; ++i) {
        const GeluSlope r = gelu_with_slope(x[i]);
        value[i] = r.value;
        slope[i] = r.slope;
    }
}

}  // namespace seqgrad::detail
