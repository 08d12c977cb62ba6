// The small hashes seqgrad uses, each written once: SplitMix64 (Steele, Lea and Flood, 2014),
// which seeds the Generator and derives per-epoch and per-rank seeds and each dropout call's
// stream; a 32-bit xor-shift-multiply mix, which draws the dropout masks' elements; and FNV-1a
// (Fowler, Noll and Vo), which splits a corpus by a hash of each source and fingerprints what
// every rank of a data-parallel run has read.
#pragma once

#include <cstdint>
#include <string_view>

namespace seqgrad {

// SplitMix64's increment: 2^64 divided by the golden ratio.
inline constexpr uint64_t kSplitMixGamma = 0x9E3779B97F4A7C15ULL;

// SplitMix64's finaliser: a well-mixed 64-bit hash of a 64-bit value.
constexpr uint64_t splitmix64_mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

// The next number of the SplitMix64 stream whose state is `state` (advanced).
constexpr uint64_t splitmix64_next(uint64_t& state) { return splitmix64_mix(state += kSplitMixGamma); }

// A well-mixed 32-bit hash of a 32-bit value: two rounds of xor-shift and multiply, then a last
// xor-shift (the constants of C. Wellons's "lowbias32"); every output bit depends on every input
// bit. In 32-bit lanes it vectorises without 64-bit multiplies, which AVX2 lacks.
constexpr uint32_t mix32(uint32_t x) {
    x = (x ^ (x >> 16)) * 0x7FEB352Du;
    x = (x ^ (x >> 15)) * 0x846CA68Bu;
    return x ^ (x >> 16);
}

// The step of the dropout draws of key `key` for the elements whose index has high 32 bits `high`:
// the odd a and the b of dropout_draw, SplitMix64's hash of the key and of `high`.
struct DropoutStep {
    uint32_t a, b;
};
constexpr DropoutStep dropout_step(uint64_t key, uint64_t high) {
    const uint64_t ab = splitmix64_mix(key ^ (high * kSplitMixGamma));
    return {static_cast<uint32_t>(ab) | 1u, static_cast<uint32_t>(ab >> 32)};
}

// Element i's draw in the dropout mask of key `key`: mix32 of a step through the 32-bit integers,
// i * a + b, with dropout_step's a and b for i's high 32 bits. Calls (keys) thus walk distinct
// sequences (no two are shifted copies of each other), and the draws of a mask's first 2^32
// elements share one (a, b).
constexpr uint32_t dropout_draw(uint64_t key, uint64_t i) {
    const DropoutStep step = dropout_step(key, i >> 32);
    return mix32(static_cast<uint32_t>(i) * step.a + step.b);
}

// FNV-1a over bytes, 32 bits (offset basis 0x811C9DC5, prime 0x01000193).
constexpr uint32_t fnv1a_32(std::string_view bytes) {
    uint32_t hash = 0x811C9DC5u;
    for (const char c : bytes) hash = (hash ^ static_cast<unsigned char>(c)) * 0x01000193u;
    return hash;
}

// FNV-1a, 64 bits (offset basis 0xCBF29CE484222325, prime 0x100000001B3), fed piece by piece. Each
// piece ends with a byte 0xFF, which no UTF-8 text holds, so that ("ab", "c") and ("a", "bc")
// differ.
class Fnv1a64 {
public:
    constexpr Fnv1a64& add(std::string_view piece) {
        for (const char c : piece) byte(static_cast<unsigned char>(c));
        byte(0xFF);
        return *this;
    }
    constexpr uint64_t value() const { return hash_; }

private:
    constexpr void byte(unsigned char c) { hash_ = (hash_ ^ c) * 0x100000001B3ULL; }
    uint64_t hash_ = 0xCBF29CE484222325ULL;
};

}  // namespace seqgrad
