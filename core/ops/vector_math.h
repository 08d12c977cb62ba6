// Branch-free float32 exp, tanh, sigmoid and erf that the compiler can vectorise (libm's versions
// are calls it cannot), accurate to a few float32 ulps, for the loops of softmax, the loss, the
// LSTM cell and the activations. Internal to core/.
#pragma once

#include <bit>
#include <cstdint>

namespace seqgrad::detail {

// e^x: x = n ln2 + r with |r| <= ln2/2, e^r by a degree-6 polynomial (Taylor, error < 2e-8
// relative on that range), 2^n by building the exponent bits. Results below the normal floats
// are 0 (a masked -1e9 score gives exactly 0, as in PyTorch); arguments above 88.7 give +inf and
// those in (88, 88.7] saturate at e^88; NaN gives NaN.
inline float fast_exp(float x) {
    const float input = x;
    // Written so that NaN fails the second test and becomes -87: converting NaN to an integer
    // below is undefined. The NaN is given back at the end.
    x = x > 88.0f ? 88.0f : x;
    x = x >= -87.0f ? x : -87.0f;
    // Round to nearest by adding and removing 1.5 * 2^23 (roundf is a library call the
    // compiler cannot vectorise).
    constexpr float kRound = 12582912.0f;
    const float n = (x * 1.44269504088896341f + kRound) - kRound;
    const float r = (x - n * 0.693145751953125f) - n * 1.42860682030941723212e-6f;
    float p = 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
    const float y = p * std::bit_cast<float>(bits);
    return input != input ? input : (input < -87.0f ? 0.0f : (input > 88.7f ? __builtin_inff() : y));
}

inline float fast_sigmoid(float x) { return 1.0f / (1.0f + fast_exp(-x)); }

// tanh(x) = sign(x) (1 - e^{-2|x|}) / (1 + e^{-2|x|}); absolute error below 1e-7.
inline float fast_tanh(float x) {
    const float ax = x < 0 ? -x : x;
    const float t = fast_exp(-2.0f * ax);
    const float y = (1.0f - t) / (1.0f + t);
    return x < 0 ? -y : y;
}

// erf by Abramowitz and Stegun 7.1.26 refined: |error| < 1.5e-7 (absolute).
inline float fast_erf(float x) {
    const float ax = x < 0 ? -x : x;
    const float t = 1.0f / (1.0f + 0.3275911f * ax);
    float p = 1.061405429f;
    p = p * t - 1.453152027f;
    p = p * t + 1.421413741f;
    p = p * t - 0.284496736f;
    p = p * t + 0.254829592f;
    const float y = 1.0f - p * t * fast_exp(-ax * ax);
    return x < 0 ? -y : y;
}

}  // namespace seqgrad::detail
