// `seqgrad train`: trains a model on a task (or resumes a run), with a progress bar, dev
// evaluation, checkpoints, and Ctrl-C saving before it exits; then shows what the model learned.
#include <nlohmann/json.hpp>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "commands.h"
#include "progress.h"
#include "seqgrad/core/threads.h"
#include "seqgrad/models/registry.h"
#include "seqgrad/nn/distributed.h"
#include "seqgrad/training/checkpoint.h"
#include "seqgrad/training/data.h"
#include "seqgrad/training/pairs.h"
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
    std::string task;  // default g2p, or corpus with --train
    std::string model;
    std::string config_file;
    std::string out;
    std::string resume;
    std::string dictionary;
    double minutes = 0;
    int64_t epochs = 0;
    int64_t max_steps = 0;
    int threads = 0;
    int64_t seed = -1;
    int64_t batch_size = 0;
    double lr = 0;
    int64_t dev_limit = -1;
    int64_t eval_every = -1;
    int64_t save_every = -1;
    int64_t show = 8;  // dev words to show at the end
    // A corpus of one's own (options.h has the meanings).
    std::vector<std::string> train_files, dev_files, test_files;
    std::string src_tokens, tgt_tokens, src_spm_model, tgt_spm_model, spm_type;
    int64_t spm_vocab_size = 0, min_count = 0, max_vocab = -1;
    bool skip_invalid = false;
};

// Paths as absolute ones, so that a run resumes and evaluates from any directory.
std::vector<std::string> absolute(const std::vector<std::string>& paths) {
    std::vector<std::string> out;
    for (const std::string& p : paths) out.push_back(std::filesystem::absolute(p).lexically_normal().string());
    return out;
}

// The corpus flags over the options (a config file's "training" object may set them too).
void apply_corpus_flags(const TrainFlags& flags, training::TrainingOptions& options) {
    if (!flags.train_files.empty()) options.train_files = absolute(flags.train_files);
    if (!flags.dev_files.empty()) options.dev_files = absolute(flags.dev_files);
    if (!flags.test_files.empty()) options.test_files = absolute(flags.test_files);
    if (!flags.src_tokens.empty()) options.src_tokens = flags.src_tokens;
    if (!flags.tgt_tokens.empty()) options.tgt_tokens = flags.tgt_tokens;
    if (!flags.src_spm_model.empty()) options.src_spm_model = std::filesystem::absolute(flags.src_spm_model).string();
    if (!flags.tgt_spm_model.empty()) options.tgt_spm_model = std::filesystem::absolute(flags.tgt_spm_model).string();
    if (!flags.spm_type.empty()) options.spm_type = flags.spm_type;
    if (flags.spm_vocab_size > 0) options.spm_vocab_size = flags.spm_vocab_size;
    if (flags.min_count > 0) options.min_count = flags.min_count;
    if (flags.max_vocab >= 0) options.max_vocab = flags.max_vocab;
    if (flags.skip_invalid) options.skip_invalid = true;
    if (!options.train_files.empty()) {
        check(flags.task.empty() || flags.task == "corpus", "train", "--train reads a corpus; drop --task ",
              flags.task);
        options.task = "corpus";
    } else if (!flags.task.empty()) {
        options.task = flags.task;
    }
    check(options.task != "corpus" || !options.train_files.empty(), "train",
          "the corpus task needs --train (a TSV file, or a source and a target file)");
}

std::string read_file(const std::string& path) {
    std::ifstream in(path);
    check(in.good(), "train", "cannot read the config file ", path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

// Shows some dev words with the predictions of the best weights.
void show_examples(const std::string& dir, const training::TrainingOptions& options, int64_t count) {
    if (count <= 0) return;
    training::LoadedModel loaded = training::load_model(dir);
    training::DataRequest request;
    request.train = false;
    request.source_tokenizer = &loaded.source_tokenizer;
    request.target_tokenizer = &loaded.target_tokenizer;
    request.source_vocab = &loaded.source_vocab;
    request.target_vocab = &loaded.target_vocab;
    const training::TrainingData data = training::prepare_data(options, request);
    std::vector<training::Example> sample;
    const size_t stride = std::max<size_t>(1, data.dev.size() / static_cast<size_t>(count));
    for (size_t i = 0; i < data.dev.size() && static_cast<int64_t>(sample.size()) < count; i += stride)
        sample.push_back(data.dev[i]);
    std::vector<std::vector<std::string>> predictions;
    models::DecodingOptions decoding;
    decoding.max_len = options.eval_max_len;
    training::task(options.task).evaluate(*loaded.model, loaded, sample, decoding, &predictions);
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
        check(flags.model.empty() && flags.config_file.empty(), "train",
              "--resume continues a run with its own model and options; drop --model and --config");
        dir = flags.resume;
        if (group.is_root()) std::fprintf(stderr, "Resuming %s%s\n", dir.c_str(), ranks_text(group).c_str());
        result = training::resume(dir, flags.epochs, flags.minutes, flags.max_steps, listener, &g_stop);
        options = training::load_training_state(training::CheckpointDir(dir).training_file()).options;
    } else {
        check(!flags.model.empty(), "train", "--model is required (", models::model_kind_names(), ")");
        const models::ModelKind& kind = models::model_kind(flags.model);
        models::ModelConfig config = kind.recipe;
        if (!flags.config_file.empty()) {
            auto json = nlohmann::json::parse(read_file(flags.config_file), nullptr, false);
            check(!json.is_discarded() && json.is_object(), "train", flags.config_file, " is not a JSON object");
            if (json.contains("training")) {
                const auto training = json.at("training");
                json.erase("training");
                options = training::TrainingOptions::from_json(training.dump());
            }
            check(!json.contains("model") || json.at("model") == flags.model, "train", flags.config_file,
                  " describes model ", json.value("model", nlohmann::json()).dump(), " but --model is ", flags.model);
            try {
                config.update_from_json(json.dump());  // the file's model keys over the recipe
            } catch (const Error& e) {
                throw Error(flags.config_file + ": " + e.what());
            }
        } else {
            // The kind's recipe trains with its own schedule and rate.
            options.schedule = kind.schedule;
            if (flags.lr <= 0) options.lr = kind.lr;
        }
        apply_corpus_flags(flags, options);
        if (!flags.dictionary.empty()) options.dictionary = flags.dictionary;
        if (flags.minutes > 0) options.minutes = flags.minutes;
        if (flags.epochs > 0) options.epochs = flags.epochs;
        if (flags.max_steps > 0) options.max_steps = flags.max_steps;
        if (flags.seed >= 0) options.seed = static_cast<uint64_t>(flags.seed);
        if (flags.batch_size > 0) options.batches.max_sentences = flags.batch_size;
        if (flags.lr > 0) options.lr = flags.lr;
        if (flags.dev_limit >= 0) options.dev_limit = flags.dev_limit;
        if (flags.eval_every >= 0) options.eval_every_steps = flags.eval_every;
        if (flags.save_every >= 0) options.save_every_steps = flags.save_every;
        const std::string data_name = options.task == "corpus"
                                          ? std::filesystem::path(options.train_files.front()).stem().string()
                                          : options.task;
        dir = flags.out.empty() ? "runs/" + flags.model + "-" + data_name : flags.out;
        options.validate();
        const std::string data = options.task == "corpus" ? training::corpus_name(options.train_files) : options.task;
        if (group.is_root())
            std::fprintf(stderr, "Training %s on %s into %s (%d %s%s)\n", flags.model.c_str(), data.c_str(),
                         dir.c_str(), get_num_threads(), get_num_threads() == 1 ? "thread" : "threads",
                         ranks_text(group).c_str());
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
        std::printf("Best dev %s; weights in %s\n", training::task(options.task).describe(result.best_dev).c_str(),
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
    std::string kinds;
    for (const models::ModelKind& kind : models::model_kinds())
        kinds += "  " + kind.name + ": " + kind.description + "\n";
    cmd->footer("Models:\n" + kinds +
                "\nA --config file holds model keys and an optional \"training\" object.\n\nModel keys "
                "(each model reads its own; docs/parity.md):\n" +
                models::ModelConfig::describe() + "\nTraining keys:\n" + training::TrainingOptions::describe());
    cmd->add_option("--task", flags->task,
                    "g2p (CMUdict, the default), copy, reverse or sort; --train for your own data");
    cmd->add_option("--train", flags->train_files,
                    "Your own pairs: one TSV file (source<TAB>target) or a source and a target file")
        ->expected(1, 2);
    cmd->add_option("--dev", flags->dev_files,
                    "Dev pairs, likewise (default: carved from --train by a hash of the source)")
        ->expected(1, 2);
    cmd->add_option("--test", flags->test_files, "Test pairs, likewise (default: carved from --train)")->expected(1, 2);
    cmd->add_option("--src-tokens", flags->src_tokens, "How the source is read: char (default), space or sentencepiece")
        ->check(CLI::IsMember({"char", "space", "sentencepiece"}));
    cmd->add_option("--tgt-tokens", flags->tgt_tokens, "How the target is read: char (default), space or sentencepiece")
        ->check(CLI::IsMember({"char", "space", "sentencepiece"}));
    cmd->add_option("--src-spm-model", flags->src_spm_model,
                    "A SentencePiece .model for the source (default: train one)")
        ->check(CLI::ExistingFile);
    cmd->add_option("--tgt-spm-model", flags->tgt_spm_model,
                    "A SentencePiece .model for the target (default: train one)")
        ->check(CLI::ExistingFile);
    cmd->add_option("--spm-vocab-size", flags->spm_vocab_size,
                    "Pieces of each SentencePiece model trained (default 8000)")
        ->check(CLI::Range(int64_t{8}, int64_t{1} << 20));
    cmd->add_option("--spm-type", flags->spm_type, "The SentencePiece models trained: unigram (default) or bpe")
        ->check(CLI::IsMember({"unigram", "bpe"}));
    cmd->add_option("--min-count", flags->min_count, "Vocabularies keep symbols seen at least this often (default 1)")
        ->check(kPositive);
    cmd->add_option("--max-vocab", flags->max_vocab,
                    "Vocabularies keep at most this many symbols a side (default: all)")
        ->check(kNonNegative);
    cmd->add_flag("--skip-invalid", flags->skip_invalid,
                  "Train on the valid lines and count the others, instead of refusing");
    cmd->add_option("--model", flags->model, models::model_kind_names());
    cmd->add_option("--config", flags->config_file,
                    "JSON file: model keys (docs/parity.md) and an optional \"training\" object of training options");
    cmd->add_option("--out", flags->out, "Checkpoint directory (default runs/<model>-<task>)");
    cmd->add_option("--resume", flags->resume, "Continue the run in this checkpoint directory");
    cmd->add_option("--minutes", flags->minutes, "Budget: minutes of training in this session")->check(kPositive);
    cmd->add_option("--epochs", flags->epochs, "Budget: epochs in all")->check(kPositive);
    cmd->add_option("--max-steps", flags->max_steps, "Budget: optimizer steps in all")->check(kPositive);
    cmd->add_option("--threads", flags->threads,
                    "Threads (default: the number of cores, shared by the processes mpirun starts on a machine)")
        ->check(kPositive);
    cmd->add_option("--seed", flags->seed, "Random seed (default 1)")->check(kNonNegative);
    cmd->add_option("--batch-size", flags->batch_size, "Sentences per batch (default 256)")->check(kPositive);
    cmd->add_option("--lr", flags->lr, "Learning rate (constant schedule) or Noam factor")->check(kPositive);
    cmd->add_option("--dictionary", flags->dictionary, "The CMUdict file for g2p");
    cmd->add_option("--dev-limit", flags->dev_limit, "Evaluate on the first N dev words only (0: all)")
        ->check(kNonNegative);
    cmd->add_option("--eval-every", flags->eval_every, "Evaluate every N steps (0: after each epoch)")
        ->check(kNonNegative);
    cmd->add_option("--save-every", flags->save_every, "Write a checkpoint every N steps as well (0: with evaluations)")
        ->check(kNonNegative);
    cmd->add_option("--show", flags->show, "Dev words to show at the end")->capture_default_str()->check(kNonNegative);
    cmd->callback([flags, &exit_status] { exit_status = run_train(*flags); });
}

}  // namespace seqgrad::cli
