// The flags of the decoding commands (decoding_flags.h).
#include "decoding_flags.h"

#include <algorithm>

#include "commands.h"

namespace seqgrad::cli {

void add_decoding_flags(CLI::App* cmd, DecodingFlags& f, const std::vector<std::string>& keys) {
    cmd->add_option("--checkpoint", f.checkpoints,
                    "A checkpoint directory (its best weights) or a model file; the flag repeated, several decode "
                    "together (an ensemble: their target sides must be the same)")
        ->required()
        ->allow_extra_args(false);
    cmd->add_option("--weights", f.weights,
                    "An ensemble's weights, one per checkpoint, positive (divided by their sum; default: equal)")
        ->check(kPositive);
    add_decoding_option_flags(cmd, keys, f.decoding);
    cmd->add_option("--threads", f.threads, "Threads (default: the number of cores)")->check(kPositive);
    add_precision_flags(cmd, f.int8, f.bf16);
}

void add_decoding_option_flags(CLI::App* cmd, const std::vector<std::string>& keys, GivenOptions& given,
                               const models::DecodingOptions& defaults) {
    std::vector<OptionInfo> offered;
    for (const OptionInfo& option : models::DecodingOptions::options(defaults))
        if (std::find(keys.begin(), keys.end(), option.key) != keys.end()) offered.push_back(option);
    add_option_flags(cmd, offered, "Decoding", given);
}

models::DecodingOptions decoding_options(const GivenOptions& given, models::DecodingOptions base) {
    for (const auto& [key, words] : given) base.set(key, words);
    base.validate();
    return base;
}

void add_precision_flags(CLI::App* cmd, bool& int8, bool& bf16) {
    CLI::Option* int8_flag = cmd->add_flag("--int8", int8,
                                           "Int8 weights and products (oneDNN): faster on CPUs with AMX or AVX-512 "
                                           "VNNI, within rounding of float32");
    cmd->add_flag("--bf16", bf16,
                  "Bfloat16 weights and products with float32 sums (oneDNN; CPUs with AVX512_BF16 or AMX), within "
                  "rounding of float32")
        ->excludes(int8_flag);
}

Precision packed_precision(bool int8, bool bf16) {
    return int8 ? Precision::int8 : bf16 ? Precision::bf16 : Precision::float32;
}

}  // namespace seqgrad::cli
