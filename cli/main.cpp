// The seqgrad program: parses the subcommand, runs it, and turns errors into a message and a
// non-zero exit status.
#include <csignal>
#include <cstdio>
#include <exception>

#include "commands.h"
#include "seqgrad/core/error.h"

int main(int argc, char** argv) {
    // Past a file-size limit (ulimit -f), a write should fail with EFBIG and a clear message
    // rather than kill the program.
    std::signal(SIGXFSZ, SIG_IGN);
    CLI::App app{"seqgrad: reverse-mode autograd and sequence models, from scratch in C++20"};
    app.require_subcommand(1);
    int exit_status = 0;
    seqgrad::cli::add_demo_command(app);
    seqgrad::cli::add_train_command(app, exit_status);
    seqgrad::cli::add_eval_command(app, exit_status);
    seqgrad::cli::add_predict_command(app, exit_status);
    seqgrad::cli::add_score_command(app, exit_status);
    seqgrad::cli::add_check_command(app, exit_status);
    seqgrad::cli::add_summary_command(app);
    seqgrad::cli::add_attention_command(app);
    seqgrad::cli::add_curves_command(app);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    } catch (const seqgrad::Error& e) {
        std::fprintf(stderr, "seqgrad: error: %s\n", e.what());
        return 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "seqgrad: unexpected error: %s\n", e.what());
        return 2;
    }
    return exit_status;
}
