// The seqgrad program's subcommands: each file adds one to the application.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

namespace seqgrad::cli {

// Flag checks whose messages read "--lr: must be positive, got -1" (CLI11's own number checks
// print the type's whole range).
inline CLI::Validator number_check(bool zero_allowed) {
    const std::string rule = zero_allowed ? "must be 0 or more" : "must be positive";
    return CLI::Validator(
        [zero_allowed, rule](std::string& text) -> std::string {
            double value = 0;
            if (!CLI::detail::lexical_cast(text, value)) return "expects a number, got " + text;
            return (zero_allowed ? value >= 0 : value > 0) ? std::string() : rule + ", got " + text;
        },
        zero_allowed ? "NONNEGATIVE" : "POSITIVE");
}
inline const CLI::Validator kPositive = number_check(false);
inline const CLI::Validator kNonNegative = number_check(true);

void add_demo_command(CLI::App& app);
void add_summary_command(CLI::App& app);
void add_attention_command(CLI::App& app);
void add_curves_command(CLI::App& app);
// Subcommands that decide the exit status themselves set `exit_status`.
void add_check_command(CLI::App& app, int& exit_status);
void add_train_command(CLI::App& app, int& exit_status);
void add_eval_command(CLI::App& app, int& exit_status);
void add_predict_command(CLI::App& app, int& exit_status);
void add_generate_command(CLI::App& app, int& exit_status);
void add_score_command(CLI::App& app, int& exit_status);
void add_average_command(CLI::App& app, int& exit_status);

}  // namespace seqgrad::cli
