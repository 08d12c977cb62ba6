// Generator: an explicit, seedable source of random numbers (xoshiro256**, seeded by splitmix64),
// so every random tensor, dropout mask and shuffle is reproducible on every platform.
#pragma once

#include <array>
#include <cstdint>

namespace seqgrad {

class Generator {
public:
    explicit Generator(uint64_t seed = 0x5eed);
    void seed(uint64_t seed);
    uint64_t next_u64();
    float uniform();                         // [0, 1)
    float uniform(float low, float high);    // [low, high)
    float normal(float mean, float stddev);  // Box-Muller, one value per call
    uint64_t below(uint64_t n);              // uniform integer in [0, n), n > 0

    // The whole state, to save with a checkpoint and restore for an exact resume. An all-zero
    // state is invalid for xoshiro and refused.
    using State = std::array<uint64_t, 4>;
    State state() const;
    void set_state(const State& state);

private:
    uint64_t s_[4];
};

}  // namespace seqgrad
