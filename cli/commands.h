// The seqgrad program's subcommands: each file adds one to the application.
#pragma once

#include <CLI/CLI.hpp>

namespace seqgrad::cli {

void add_demo_command(CLI::App& app);

}  // namespace seqgrad::cli
