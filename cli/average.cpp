// `seqgrad average`: the mean of a run's last kept weights (train --keep-checkpoints), or of any
// model files of one model, written as a new checkpoint.
#include <cstdio>

#include "commands.h"
#include "seqgrad/training/checkpoint.h"

namespace seqgrad::cli {
namespace {

struct AverageFlags {
    std::string checkpoint;          // a run's directory, for its kept weights and training state
    int64_t last = 0;                // 0: every kept file
    std::vector<std::string> files;  // or these
    std::string out;
};

int run_average(const AverageFlags& f) {
    check(f.checkpoint.empty() != f.files.empty(), "average",
          "give --checkpoint DIR (its kept weights) or model files, not both");
    std::vector<std::string> files = f.files;
    if (!f.checkpoint.empty()) {
        const training::CheckpointDir dir(f.checkpoint);
        check(dir.exists(), "average", "no checkpoint directory at ", f.checkpoint);
        files = dir.kept_files();
        check(!files.empty(), "average", f.checkpoint,
              " keeps no weights by step (step-*.safetensors): train with --keep-checkpoints N");
        check(f.last <= static_cast<int64_t>(files.size()), "average", "--last ", f.last, ", but ", f.checkpoint,
              " keeps ", files.size());
        if (f.last > 0) files.erase(files.begin(), files.end() - f.last);
    } else {
        check(f.last == 0, "average", "--last counts a checkpoint directory's kept weights: give --checkpoint");
    }
    training::write_averaged_checkpoint(files, f.checkpoint, f.out);
    std::printf("averaged %zu files into %s:\n", files.size(), training::CheckpointDir(f.out).model_file().c_str());
    for (const std::string& file : files) std::printf("  %s\n", file.c_str());
    if (training::CheckpointDir(f.out).has_training_state())
        std::printf("with %s's training state: `seqgrad train --resume %s` continues from the mean\n",
                    f.checkpoint.c_str(), f.out.c_str());
    return 0;
}

}  // namespace

void add_average_command(CLI::App& app, int& exit_status) {
    auto f = std::make_shared<AverageFlags>();
    CLI::App* cmd = app.add_subcommand(
        "average", "The mean of a run's last kept weights (train --keep-checkpoints N), or of model files of one "
                   "model, as a new checkpoint that eval, predict and train --resume read");
    cmd->add_option("--checkpoint", f->checkpoint, "A run's directory: average its kept step-*.safetensors");
    cmd->add_option("--last", f->last, "Only the newest N kept files (default: all)")->check(kPositive);
    cmd->add_option("files", f->files, "Model files (or checkpoint directories, for their best weights)");
    cmd->add_option("--out", f->out, "The new checkpoint directory")->required();
    cmd->callback([f, &exit_status] { exit_status = run_average(*f); });
}

}  // namespace seqgrad::cli
