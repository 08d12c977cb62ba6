// Flags made from option tables: each option of a model config or of the training options
// (OptionInfo) becomes a flag whose name and help text come from its table, so that an
// option is declared once, where its struct is described.
#pragma once

#include <CLI/CLI.hpp>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "seqgrad/core/option_info.h"

namespace seqgrad::cli {

// The options a command line gave: key -> the words given to its flag (none for a bare flag).
using GivenOptions = std::map<std::string, std::vector<std::string>>;

// Adds a flag to `cmd`, in the help's `group`, for each of `options` but those whose keys are in
// `skip`; what the command line gives is recorded in `given` by key.
void add_option_flags(CLI::App* cmd, const std::vector<OptionInfo>& options, const std::string& group,
                      GivenOptions& given, const std::set<std::string>& skip = {});

// "--minutes, --lr": the flags of the given keys, for messages.
std::string flags_text(const GivenOptions& given, const std::vector<OptionInfo>& options);

}  // namespace seqgrad::cli
