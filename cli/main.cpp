// The seqgrad program: parses the subcommand, runs it, and turns errors into a message and a
// non-zero exit status. Started by mpirun as several processes, `train` trains data-parallel;
// an error on any rank ends them all.

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <optional>
#include <string>

#include "commands.h"
#include "seqgrad/core/cpu.h"
#include "seqgrad/core/error.h"
#include "seqgrad/core/precision.h"
#include "seqgrad/core/threads.h"
#include "seqgrad/nn/distributed.h"

namespace {

// Prints the error (naming the rank when there are several) and ends the program: every rank of
// the run at once, so that none waits forever for one that stopped.
int fail(const seqgrad::nn::Distributed* group, const char* kind, const char* what, int status) {
    if (group != nullptr && group->size() > 1) {
        std::fprintf(stderr, "seqgrad: %s on rank %d of %d: %s\n", kind, group->rank(), group->size(), what);
        group->abort(status);
    }
    std::fprintf(stderr, "seqgrad: %s: %s\n", kind, what);
    return status;
}

}  // namespace

int main(int argc, char** argv) {
    // OpenBLAS reads OPENBLAS_CORETYPE once, as it loads. Where it did not recognise the CPU and runs
    // its generic x86-64 kernels (Debian's 0.3.21 on an Intel Xeon with AMX: products several times
    // slower) and the environment names no core, the program starts itself again with the CPU's core
    // named (threads.h); the computing commands' warning below covers a core the environment forces.
    seqgrad::restart_with_blas_core(argv);
    std::optional<seqgrad::nn::Distributed> group;
    try {
        group.emplace(&argc, &argv);
    } catch (const seqgrad::Error& e) {
        return fail(nullptr, "error", e.what(), 1);
    }
    if (group->size() > 1 && (argc < 2 || std::strcmp(argv[1], "train") != 0))
        return fail(&*group, "error", "only `seqgrad train` runs as several processes; run this command as one", 1);
    // The level of seqgrad's kernels, settled before any work: a SEQGRAD_MAX_CPU_ISA this CPU cannot
    // honour is refused here, in one sentence.
    try {
        seqgrad::isa_level();
    } catch (const seqgrad::Error& e) {
        return fail(&*group, "error", e.what(), 1);
    }
    // The pool's threads settled before any work, and OpenBLAS's idle ones stopped (threads.cpp).
    seqgrad::get_num_threads();
    // Past a file-size limit (ulimit -f), a write should fail with EFBIG and a clear message
    // rather than kill the program.
    std::signal(SIGXFSZ, SIG_IGN);
    // The commands that compute: a slow BLAS is worth a line before they start.
    if (argc >= 2 && group->rank() == 0)
        for (const char* command : {"train", "eval", "predict", "generate", "demo"})
            if (std::strcmp(argv[1], command) == 0)
                if (const std::string warning = seqgrad::blas_kernel_warning(); !warning.empty())
                    std::fprintf(stderr, "seqgrad: warning: %s\n", warning.c_str());
    CLI::App app{"seqgrad: reverse-mode autograd and sequence models, from scratch in C++20"};
    // --version names what this machine runs: seqgrad's kernel level, the libraries and their kernels.
    app.set_version_flag("--version", std::function<std::string()>([] {
                             std::string text = "seqgrad " + seqgrad::version();
                             for (const seqgrad::RuntimePart& part : seqgrad::nn::runtime_parts())
                                 text += "\n" + part.name + ": " + part.value;
                             return text;
                         }));
    app.require_subcommand(1);
    int exit_status = 0;
    seqgrad::cli::add_demo_command(app);
    seqgrad::cli::add_train_command(app, exit_status);
    seqgrad::cli::add_eval_command(app, exit_status);
    seqgrad::cli::add_predict_command(app, exit_status);
    seqgrad::cli::add_generate_command(app, exit_status);
    seqgrad::cli::add_score_command(app, exit_status);
    seqgrad::cli::add_average_command(app, exit_status);
    seqgrad::cli::add_check_command(app, exit_status);
    seqgrad::cli::add_summary_command(app);
    seqgrad::cli::add_attention_command(app);
    seqgrad::cli::add_curves_command(app);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    } catch (const seqgrad::Error& e) {
        return fail(&*group, "error", e.what(), 1);
    } catch (const std::exception& e) {
        return fail(&*group, "unexpected error", e.what(), 2);
    }
    return exit_status;
}
