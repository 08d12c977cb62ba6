// The synthetic tasks (copy, reverse, sort): generated in memory from a seed, quick to learn, so
// that tests can prove a model converges.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "seqgrad/core/random.h"
#include "seqgrad/training/dataset.h"

namespace seqgrad::training {

struct SyntheticOptions {
    std::string task = "copy";  // "copy", "reverse" or "sort"
    int64_t vocab_size = 10;    // symbols 'a', 'b', ... (at most 26)
    int64_t min_length = 3;
    int64_t max_length = 10;
    int64_t train_size = 10000;
    int64_t dev_size = 500;
    int64_t test_size = 500;
};

bool is_synthetic_task(std::string_view task);
// Random sources of uniform length and symbols, each with its one answer: the source itself, its
// reverse, or its symbols sorted. The splits are independent draws (short sequences can repeat).
Dataset synthetic_dataset(const SyntheticOptions& options, Generator& gen);

}  // namespace seqgrad::training
