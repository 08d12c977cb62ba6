// The seqgrad program's subcommands: each file adds one to the application.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>

namespace seqgrad::cli {

// The widest beam the decoding commands accept. Beam search runs every beam of every word as a
// row of one batch (with the Transformer's key/value cache per row), so memory grows with the
// beam; past a few dozen beams G2P gains nothing.
inline constexpr int64_t kMaxBeam = 256;

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
