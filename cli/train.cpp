// `seqgrad train`: trains a model on a task (or resumes a run), with a progress bar, dev
// evaluation, checkpoints, and Ctrl-C saving before it exits; then shows what the model learned.
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <set>
#include <tuple>

#include "commands.h"
#include "option_flags.h"
#include "progress.h"
#include "seqgrad/core/cpu.h"
#include "seqgrad/core/precision.h"
#include "seqgrad/core/threads.h"
#include "seqgrad/inference/text_generator.h"
#include "seqgrad/models/registry.h"
#include "seqgrad/nn/distributed.h"
#include "seqgrad/text/model_file.h"
#include "seqgrad/training/checkpoint.h"
#include "seqgrad/training/config_file.h"
#include "seqgrad/training/data.h"
#include "seqgrad/training/pairs.h"
#include "seqgrad/training/recipe.h"
#include "seqgrad/training/task.h"
#include "seqgrad/training/trainer.h"

namespace seqgrad::cli {
namespace {

std::atomic<bool> g_stop{false};

// Ctrl-C (SIGINT), SIGTERM (a job scheduler), or SIGUSR1 (which mpirun passes on to every rank,
// where its own Ctrl-C ends them at once): stop after this step, with a checkpoint.
extern "C" void on_interrupt(int signal) {
    g_stop = true;
    std::signal(signal, SIG_DFL);  // a second one ends the program at once
}

struct TrainFlags {
    std::string model;
    std::string config_file;
    std::string out;
    std::string resume;
    int threads = 0;
    int64_t show = 8;  // dev examples to show at the end
    // The training options and model keys the command line gave, each by its table's flag.
    GivenOptions training, model_keys;
};

// The options a resumed run takes from the command line: its budgets; the rest is the run's own.
const std::set<std::string> kResumeKeys = {"epochs", "minutes", "max_steps"};

// A path as an absolute one, so that a run resumes and evaluates from any directory.
std::string absolute(const std::string& path) {
    return path.empty() ? path : std::filesystem::absolute(path).lexically_normal().string();
}

// The command line's training options over `options` (the recipe's or the config file's), then
// what follows from them: paths made absolute, and a corpus given with --train, or a text with
// --text, makes the task.
void apply_training_flags(const TrainFlags& flags, training::TrainingOptions& options) {
    for (const auto& [key, words] : flags.training) options.set(key, words);
    for (std::vector<std::string>* paths : {&options.train_files, &options.dev_files, &options.test_files})
        for (std::string& path : *paths) path = absolute(path);
    for (std::string* path :
         {&options.src_spm_model, &options.tgt_spm_model, &options.text, &options.val, &options.spm_model})
        *path = absolute(*path);
    check(options.train_files.empty() || options.text.empty(), "train",
          "--train reads pairs and --text a text: give one of them");
    // --train reads labelled texts for classify and pairs otherwise; --text is masked for mlm and
    // continued otherwise.
    const std::string given = flags.training.count("task") ? options.task : std::string();
    for (const auto& [files_given, flag, task, encoder_task] :
         {std::tuple{!options.train_files.empty(), "train", "corpus", "classify"},
          std::tuple{!options.text.empty(), "text", "text", "mlm"}}) {
        if (!files_given) continue;
        const bool encoder = given == encoder_task ||
                             (given.empty() && training::task(options.task).family() == models::Family::encoder);
        check(given.empty() || given == task || given == encoder_task, "train", "--", flag, " makes the task ", task,
              " (or ", encoder_task, "); drop --task ", given);
        options.task = encoder ? encoder_task : task;
    }
}

// Shows some dev words with the predictions of the best weights; for a text, a sample of `count`
// lines' worth of text the best weights write.
void show_examples(const std::string& dir, const training::TrainingOptions& options, int64_t count) {
    if (count <= 0) return;
    if (training::task(options.task).family() == models::Family::encoder) return;  // eval shows a classifier's
    if (!training::task(options.task).reads_source()) {
        inference::TextGenerator generator(dir);
        inference::GenerationOptions sample;
        sample.max_tokens = 40 * count;
        sample.decoding.temperature = 0.8f;
        std::printf("A sample of the best weights (temperature 0.8, from a new line):\n");
        generator.generate("\n", sample, [](const std::string& piece) { std::fputs(piece.c_str(), stdout); });
        std::printf("\n");
        return;
    }
    text::LoadedModel loaded = text::load_model(dir);
    training::DataRequest request;
    request.train = false;
    request.read_as(loaded);
    const training::PairData data = training::prepare_pairs(options, request);
    std::vector<training::Example> sample;
    const size_t stride = std::max<size_t>(1, data.dev.size() / static_cast<size_t>(count));
    for (size_t i = 0; i < data.dev.size() && static_cast<int64_t>(sample.size()) < count; i += stride)
        sample.push_back(data.dev[i]);
    std::vector<std::vector<std::string>> predictions;
    models::DecodingOptions decoding;
    decoding.max_len = options.eval_max_len;
    training::evaluate(*loaded.model, sample, loaded.source_vocab, loaded.target_vocab, decoding, &predictions);
    std::printf("Some dev examples (prediction | reference):\n");
    for (size_t i = 0; i < sample.size(); ++i) {
        const std::string predicted = loaded.target_tokenizer.detokenize(predictions[i]);
        const std::string reference = sample[i].reference_texts.front();
        const bool right = std::find(sample[i].references.begin(), sample[i].references.end(), predictions[i]) !=
                           sample[i].references.end();
        std::printf("  %-16s %-28s | %s%s\n", sample[i].name.c_str(), predicted.c_str(), reference.c_str(),
                    right ? "" : "   (wrong)");
    }
}

// ", on each of 4 processes" under mpirun, else nothing.
std::string ranks_text(const nn::Distributed& group) {
    return group.size() > 1 ? ", on each of " + std::to_string(group.size()) + " processes" : "";
}

// ", avx512 kernels, products on oneDNN brg:avx512_core" (seqgrad's kernel level; then float32:
// OpenBLAS's sgemm or oneDNN, float32_products()),
// ", bf16 products on oneDNN brg:avx512_core_bf16"; nothing for bf16 where the CPU has none (training
// refuses to start and says why).
std::string products_text(const std::string& precision) {
    const std::string kernels = std::string(", ") + isa_level_name(isa_level()) + " kernels";
    if (precision == "bf16")
        return kernels + (bf16_available() ? ", bf16 products on oneDNN " + bf16_kernel_name() : "");
    return kernels + ", products on " + float32_products_kernel();
}

int run_train(const TrainFlags& flags) {
    const nn::Distributed& group = nn::Distributed::current();
    // Ranks on one machine share its cores.
    if (flags.threads > 0) set_num_threads(flags.threads);
    else if (group.local_size() > 1) set_num_threads(std::max(1, get_num_threads() / group.local_size()));
    ProgressDisplay display(100);
    const auto listener = group.is_root() ? training::TrainingListener(std::ref(display))
                                          : training::TrainingListener();
    g_stop = false;
    std::signal(SIGINT, on_interrupt);
    std::signal(SIGTERM, on_interrupt);
    std::signal(SIGUSR1, on_interrupt);
    training::TrainingResult result;
    std::string dir;
    training::TrainingOptions options;
    if (!flags.resume.empty()) {
        GivenOptions others = flags.training;
        for (const std::string& key : kResumeKeys) others.erase(key);
        check(flags.model.empty() && flags.config_file.empty() && flags.model_keys.empty() && others.empty(), "train",
              "--resume continues a run with its own model and options (only --minutes, --epochs and --max-steps "
              "apply); drop ",
              flags.model.empty() && flags.config_file.empty() ? "" : "--model, --config ",
              flags_text(flags.model_keys, models::ModelConfig::options()), " ",
              flags_text(others, training::TrainingOptions::options()));
        training::TrainingOptions budgets;
        for (const auto& [key, words] : flags.training) budgets.set(key, words);
        dir = flags.resume;
        if (group.is_root())
            std::fprintf(stderr, "%s\nResuming %s%s\n", nn::runtime_line().c_str(), dir.c_str(),
                         ranks_text(group).c_str());
        options = training::load_training_state(training::CheckpointDir(dir).training_file()).options;
        display.set_log_every(options.log_every);
        result = training::resume(dir, budgets.epochs, budgets.minutes, budgets.max_steps, listener, &g_stop);
    } else {
        std::optional<training::ConfigFile> file;
        if (!flags.config_file.empty()) file = training::ConfigFile::read(flags.config_file);
        // The model: --model, or the config file's "model"; when both name one, the same.
        std::string model = flags.model;
        if (file && !file->model().empty()) {
            check(model.empty() || model == file->model(), "train", flags.config_file, " describes model ",
                  file->model(), " but --model is ", model);
            model = file->model();
        }
        check(!model.empty(), "train", "--model is required (", models::model_kind_names(),
              "), or a --config file that names one");
        // The kind's recipe (training/recipe.h), a config file's keys over it, the flags over both.
        training::Recipe start = training::recipe(model);
        models::ModelConfig config = start.model;
        options = start.training;
        if (file) {
            file->apply_model_keys(config);
            options = file->training(options);
        }
        for (const auto& [key, words] : flags.model_keys) config.set(key, words);
        apply_training_flags(flags, options);
        options.validate();
        const training::Task& task = training::task(options.task);
        dir = flags.out.empty() ? "runs/" + model + "-" + task.short_name(options) : flags.out;
        display.set_log_every(options.log_every);
        const std::string data = task.data_name(options);
        if (group.is_root())
            std::fprintf(stderr, "%s\nTraining %s on %s into %s (%d %s%s%s)\n", nn::runtime_line().c_str(),
                         model.c_str(), data.c_str(), dir.c_str(), get_num_threads(),
                         get_num_threads() == 1 ? "thread" : "threads", ranks_text(group).c_str(),
                         products_text(options.precision).c_str());
        result = training::train(config, options, dir, listener, &g_stop);
    }
    display.finish_line();
    std::signal(SIGINT, SIG_DFL);
    std::signal(SIGTERM, SIG_DFL);
    std::signal(SIGUSR1, SIG_DFL);
    if (result.stop_reason == "diverged") return 3;
    if (!group.is_root()) return result.stop_reason == "interrupted" ? 130 : 0;  // rank 0 reports
    std::printf("Stopped (%s) after %lld steps, %lld epochs, %s of training.\n", result.stop_reason.c_str(),
                static_cast<long long>(result.steps), static_cast<long long>(result.epochs),
                format_duration(60 * result.minutes).c_str());
    if (result.has_best)
        std::printf("Best dev %s; weights in %s\n",
                    training::task(options.task).evaluator(options)->describe(result.best_dev).c_str(),
                    training::CheckpointDir(dir).best_file().c_str());
    if (result.stop_reason == "interrupted") {
        std::printf("Interrupted: continue with  seqgrad train --resume %s\n", dir.c_str());
        return 130;
    }
    show_examples(dir, options, flags.show);
    return 0;
}

}  // namespace

void add_train_command(CLI::App& app, int& exit_status) {
    auto flags = std::make_shared<TrainFlags>();
    CLI::App* cmd =
        app.add_subcommand("train", "Train a model on a task (or resume a run), evaluating on dev as it goes");
    std::string kinds, tasks;
    for (const models::ModelKind& kind : models::model_kinds())
        kinds += "  " + kind.name + ": " + kind.description + "\n";
    for (const auto& task : training::tasks()) tasks += "  " + task->name() + ": " + task->description() + "\n";
    cmd->footer("Models:\n" + kinds + "\nTasks:\n" + tasks +
                "\nEach model starts from its recipe (the configs/ file the README trains it with); a --config "
                "file's model keys and \"training\" object of training options go over it, and flags over "
                "both. Each model reads its own keys (docs/parity.md).");
    cmd->add_option("--model", flags->model, models::model_kind_names());
    cmd->add_option("--config", flags->config_file,
                    "JSON file: model keys (docs/parity.md) and an optional \"training\" object of training options");
    cmd->add_option("--out", flags->out, "Checkpoint directory (default runs/<model>-<task>)");
    cmd->add_option("--resume", flags->resume, "Continue the run in this checkpoint directory");
    cmd->add_option("--threads", flags->threads,
                    "Threads (default: the number of cores, shared by the processes mpirun starts on a machine)")
        ->check(kPositive);
    cmd->add_option("--show", flags->show, "Dev words to show at the end")->capture_default_str()->check(kNonNegative);
    // Every training option and model key, from their tables (the synthetic task's sizes and the
    // vocabulary sizes, which come from the data, are a config file's).
    add_option_flags(cmd, training::TrainingOptions::options(), "Training options", flags->training);
    add_option_flags(cmd, models::ModelConfig::options(), "Model keys (the --model's own)", flags->model_keys,
                     {"model", "src_vocab", "tgt_vocab", "vocab"});
    cmd->callback([flags, &exit_status] { exit_status = run_train(*flags); });
}

}  // namespace seqgrad::cli
