// xoshiro256** (Blackman and Vigna), seeded through splitmix64: small, fast and the same stream
// on every platform, unlike std::normal_distribution.
#include "seqgrad/core/random.h"

#include <cmath>
#include <numbers>

#include "seqgrad/core/error.h"
#include "seqgrad/core/hash.h"

namespace seqgrad {
namespace {

uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

}  // namespace

Generator::Generator(uint64_t seed) { this->seed(seed); }

void Generator::seed(uint64_t seed) {
    for (uint64_t& s : s_) s = splitmix64_next(seed);
}

uint64_t Generator::next_u64() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
}

float Generator::uniform() { return static_cast<float>(next_u64() >> 40) * 0x1.0p-24f; }

float Generator::uniform(float low, float high) { return low + (high - low) * uniform(); }

float Generator::normal(float mean, float stddev) {
    // u1 in (0, 1] keeps the logarithm finite.
    const double u1 = (static_cast<double>(next_u64() >> 11) + 1.0) * 0x1.0p-53;
    const double u2 = static_cast<double>(next_u64() >> 11) * 0x1.0p-53;
    const double r = std::sqrt(-2.0 * std::log(u1));
    return mean + stddev * static_cast<float>(r * std::cos(2.0 * std::numbers::pi * u2));
}

Generator::State Generator::state() const { return {s_[0], s_[1], s_[2], s_[3]}; }

void Generator::set_state(const State& state) {
    check(state[0] | state[1] | state[2] | state[3], "Generator::set_state", "the all-zero state is invalid");
    for (size_t i = 0; i < 4; ++i) s_[i] = state[i];
}

uint64_t Generator::below(uint64_t n) {
    check(n > 0, "Generator::below", "n must be positive");
    // Rejection keeps the result exactly uniform.
    const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do {
        x = next_u64();
    } while (x >= limit);
    return x % n;
}

}  // namespace seqgrad
