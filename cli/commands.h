// The seqgrad program's subcommands: each file adds one to the application.
#pragma once

#include <CLI/CLI.hpp>

namespace seqgrad::cli {

void add_demo_command(CLI::App& app);
void add_summary_command(CLI::App& app);
void add_attention_command(CLI::App& app);
void add_curves_command(CLI::App& app);
// Subcommands that decide the exit status themselves set `exit_status`.
void add_check_command(CLI::App& app, int& exit_status);
void add_train_command(CLI::App& app, int& exit_status);
void add_eval_command(CLI::App& app, int& exit_status);
void add_predict_command(CLI::App& app, int& exit_status);

}  // namespace seqgrad::cli
