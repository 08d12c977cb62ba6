// What `seqgrad eval` and `seqgrad predict` share: the checkpoints they read and the search they run
// (models/search.h), as flags.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "seqgrad/core/precision.h"
#include "seqgrad/models/search.h"

namespace seqgrad::cli {

struct DecodingFlags {
    std::vector<std::string> checkpoints;  // several: an ensemble
    std::vector<double> weights;           // the ensemble's (none: equal)
    int64_t beam = 1;
    int64_t nbest = 1;
    float alpha = 0.6f;
    int64_t max_len = 0;  // 0: the search's default
    int threads = 0;
    bool int8 = false;
    bool bf16 = false;
};

// --checkpoint (one or several), --weights, --beam, --alpha, --threads, --int8, --bf16 (each command adds
// its own --max-len, whose help says what it decodes).
void add_decoding_flags(CLI::App* cmd, DecodingFlags& f);

// --int8 and --bf16 (excluding each other), the packed weights' precision, for every command that
// decodes (eval, predict, generate).
void add_precision_flags(CLI::App* cmd, bool& int8, bool& bf16);
// The precision of the packed weights those flags ask for: int8, bf16, or float32.
Precision packed_precision(bool int8, bool bf16);
inline Precision precision_of(const DecodingFlags& f) { return packed_precision(f.int8, f.bf16); }

// The search the flags ask for.
models::DecodingOptions decoding_of(const DecodingFlags& f);

}  // namespace seqgrad::cli
