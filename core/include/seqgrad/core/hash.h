// The two small hashes seqgrad uses, each written once: SplitMix64 (Steele, Lea and Flood, 2014),
// which seeds the Generator, draws dropout masks and derives per-epoch and per-rank seeds; and
// FNV-1a (Fowler, Noll and Vo), which splits a corpus by a hash of each source and fingerprints
// what every rank of a data-parallel run has read.
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

// The i-th number (from 0) of the stream that starts at state `key`, without walking the stream:
// counter-based, so that element i of a dropout mask depends on (key, i) alone.
constexpr uint64_t splitmix64_at(uint64_t key, uint64_t i) { return splitmix64_mix(key + (i + 1) * kSplitMixGamma); }

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
