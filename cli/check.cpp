// `seqgrad check FIXTURE...`: parity with PyTorch (docs/parity.md). One line per compared tensor, one
// per file, and last "N passed, M failed" (files). Exits 0 only when every file passes.
#include <cstdio>

#include "commands.h"
#include "seqgrad/core/error.h"
#include "seqgrad/models/parity.h"

namespace seqgrad::cli {
namespace {

struct CheckOptions {
    std::vector<std::string> files;
    models::Tolerance tolerance;
};

// Returns the process's exit status.
int run_check(const CheckOptions& options) {
    check(options.tolerance.atol >= 0 && options.tolerance.rtol >= 0, "check", "tolerances must be non-negative");
    int passed = 0, failed = 0;
    for (const std::string& path : options.files) {
        try {
            const models::FixtureResult result = models::check_fixture(path, options.tolerance);
            std::printf("%s (%s)\n", path.c_str(), result.kind.c_str());
            for (const std::string& note : result.notes) std::printf("  note: %s\n", note.c_str());
            for (const models::TensorCheck& c : result.checks) {
                std::printf("  %-52s %.3e %.3e %s", c.name.c_str(), c.max_abs_error, c.max_rel_error,
                            c.ok ? "ok" : "FAIL");
                if (!c.problem.empty()) std::printf(" (%s)", c.problem.c_str());
                std::printf("\n");
            }
            const bool ok = result.ok();
            std::printf("%s %s: %zu tensors compared\n", ok ? "PASS" : "FAIL", path.c_str(), result.checks.size());
            (ok ? passed : failed)++;
        } catch (const Error& e) {
            std::printf("FAIL %s: %s\n", path.c_str(), e.what());
            ++failed;
        }
        std::fflush(stdout);
    }
    std::printf("%d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}

}  // namespace

void add_check_command(CLI::App& app, int& exit_status) {
    auto options = std::make_shared<CheckOptions>();
    CLI::App* cmd = app.add_subcommand("check", "Compare seqgrad with PyTorch on fixture files (docs/parity.md)");
    cmd->footer(
        "Builds the model from each file's config and weights, runs forward and backward, and compares the "
        "logits, the loss and every parameter's gradient. An element passes when |seqgrad - pytorch| <= atol + "
        "rtol * |pytorch|. Prints one line per tensor (name, max abs error, max relative error over elements with "
        "|pytorch| >= atol, ok|FAIL), one per file, and 'N passed, M failed'. Exits 0 only when every file passes.");
    cmd->add_option("fixtures", options->files, "Fixture files (.safetensors)")->required();
    cmd->add_option("--atol", options->tolerance.atol, "Absolute tolerance")->capture_default_str();
    cmd->add_option("--rtol", options->tolerance.rtol, "Relative tolerance")->capture_default_str();
    cmd->callback([options, &exit_status] { exit_status = run_check(*options); });
}

}  // namespace seqgrad::cli
