// What the decoding commands share: the checkpoints they read, and the search they run
// (models/search.h) as flags made from the decoding options' table, each command offering the
// options it uses.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "option_flags.h"
#include "seqgrad/core/precision.h"
#include "seqgrad/models/search.h"

namespace seqgrad::cli {

struct DecodingFlags {
    std::vector<std::string> checkpoints;  // several: an ensemble
    std::vector<double> weights;           // the ensemble's (none: equal)
    GivenOptions decoding;                 // the decoding options the command line gave, by key
    int threads = 0;
    bool int8 = false;
    bool bf16 = false;
};

// --checkpoint (one or several), --weights, the decoding options that `keys` name (--beam,
// --alpha, ...), --threads, --int8, --bf16.
void add_decoding_flags(CLI::App* cmd, DecodingFlags& f, const std::vector<std::string>& keys);

// A flag for each decoding option that `keys` names, in the table's order, in the help's
// "Decoding" group, its help showing `defaults`' value; what the command line gives goes to `given`.
void add_decoding_option_flags(CLI::App* cmd, const std::vector<std::string>& keys, GivenOptions& given,
                               const models::DecodingOptions& defaults = {});

// `base` with the options the command line gave over it, checked (models::DecodingOptions::validate).
models::DecodingOptions decoding_options(const GivenOptions& given, models::DecodingOptions base = {});
inline models::DecodingOptions decoding_of(const DecodingFlags& f) { return decoding_options(f.decoding); }

// --int8 and --bf16 (excluding each other), the packed weights' precision, for every command that
// decodes (eval, predict, generate).
void add_precision_flags(CLI::App* cmd, bool& int8, bool& bf16);
// The precision of the packed weights those flags ask for: int8, bf16, or float32.
Precision packed_precision(bool int8, bool bf16);
inline Precision precision_of(const DecodingFlags& f) { return packed_precision(f.int8, f.bf16); }

}  // namespace seqgrad::cli
