// `seqgrad eval` (WER and PER of a checkpoint on a split) and `seqgrad predict` (pronunciations
// of words given as arguments or on standard input).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "commands.h"
#include "progress.h"
#include "seqgrad/core/threads.h"
#include "seqgrad/training/batching.h"
#include "seqgrad/training/checkpoint.h"
#include "seqgrad/training/evaluate.h"
#include "seqgrad/training/tasks.h"

namespace seqgrad::cli {
namespace {

struct UseFlags {
    std::string checkpoint;
    std::string split = "dev";
    std::string dictionary;
    int64_t beam = 1;
    float alpha = 0.6f;
    int64_t max_len = 40;
    int threads = 0;
    std::vector<std::string> words;
};

// Words decoded together: 256, or fewer with wide beams, so that a batch holds at most 2,048
// hypotheses (or one word's beams).
int64_t words_per_batch(int64_t beam) { return std::clamp<int64_t>(2048 / beam, 1, 256); }

models::DecodeOptions decode_options_of(const UseFlags& f) {
    check(f.max_len >= 1, "decode", "--max-len must be at least 1, got ", f.max_len);
    models::DecodeOptions o;
    o.beam_size = f.beam;
    o.length_penalty = f.alpha;
    o.max_len = f.max_len;
    return o;
}

// The training options of the run that wrote the checkpoint (for its task's data), or the
// defaults for the model's task.
training::TrainingOptions run_options(const std::string& checkpoint, const std::string& task) {
    const std::filesystem::path training = std::filesystem::path(checkpoint) / "training.safetensors";
    training::TrainingOptions options;
    if (std::filesystem::is_directory(checkpoint) && std::filesystem::exists(training))
        options = training::load_training_state(training.string()).options;
    options.task = task;
    return options;
}

int run_eval(const UseFlags& f) {
    if (f.threads > 0) set_num_threads(f.threads);
    check(f.split == "dev" || f.split == "test", "eval", "--split must be dev or test, got ", f.split);
    training::LoadedModel loaded = training::load_model(f.checkpoint);
    training::TrainingOptions options = run_options(f.checkpoint, loaded.task);
    if (!f.dictionary.empty()) options.dictionary = f.dictionary;
    const training::Dataset data = training::load_dataset(options);
    const training::EvalResult r = training::evaluate(*loaded.model, data.split(f.split), loaded.source_vocab,
                                                  loaded.target_vocab, decode_options_of(f), words_per_batch(f.beam));
    std::printf("%s %s (%s, step %lld, beam %lld): WER %.2f%%  PER %.2f%%  (%lld words)\n", loaded.task.c_str(),
                f.split.c_str(), loaded.path.c_str(), static_cast<long long>(loaded.step), static_cast<long long>(f.beam),
                r.wer, r.per, static_cast<long long>(r.words));
    return 0;
}

int run_predict(UseFlags f) {
    if (f.threads > 0) set_num_threads(f.threads);
    training::LoadedModel loaded = training::load_model(f.checkpoint);
    if (f.words.empty())
        for (std::string line; std::getline(std::cin, line);)
            if (line.find_first_not_of(" \t\r") != std::string::npos) f.words.push_back(line.substr(0, line.find_last_not_of(" \t\r") + 1));
    check(!f.words.empty(), "predict", "no words given (as arguments or on standard input)");
    std::vector<training::Example> examples;
    for (const std::string& word : f.words) {
        training::Example e;
        e.name = word;
        e.source = training::source_symbols(loaded.task, word);
        check(!e.source.empty(), "predict", "an empty word");
        for (const std::string& s : e.source)
            if (!loaded.source_vocab.contains(s))
                std::fprintf(stderr, "note: \"%s\" in \"%s\" is not in the model's alphabet (read as <unk>)\n", s.c_str(), word.c_str());
        e.references = {{}};
        examples.push_back(std::move(e));
    }
    std::vector<std::vector<std::string>> predictions;
    const auto encoded = training::encode_for_evaluation(examples, loaded.source_vocab, loaded.target_vocab);
    training::BatchOptions batch_options;
    batch_options.max_sentences = words_per_batch(f.beam);
    predictions.resize(examples.size());
    for (const training::Batch& batch : training::make_eval_batches(encoded, batch_options)) {
        const auto hypotheses = models::decode(*loaded.model, batch.src, decode_options_of(f));
        for (size_t row = 0; row < hypotheses.size(); ++row)
            predictions[static_cast<size_t>(batch.example_index[row])] = loaded.target_vocab.decode(hypotheses[row].tokens);
    }
    for (size_t i = 0; i < examples.size(); ++i) {
        std::string phones;
        for (const auto& p : predictions[i]) phones += (phones.empty() ? "" : " ") + p;
        std::printf("%s\t%s\n", examples[i].name.c_str(), phones.c_str());
    }
    return 0;
}

void add_decoding_flags(CLI::App* cmd, UseFlags& f) {
    cmd->add_option("--checkpoint", f.checkpoint, "A checkpoint directory (its best weights) or a model file")->required();
    cmd->add_option("--beam", f.beam, "Beam size (1: greedy)")->capture_default_str()->check(CLI::Range(int64_t{1}, kMaxBeam));
    cmd->add_option("--alpha", f.alpha, "Beam search length penalty ((5+len)/6)^alpha")->capture_default_str();
    cmd->add_option("--max-len", f.max_len, "Longest output, in tokens")->capture_default_str();
    cmd->add_option("--threads", f.threads, "Threads (default: the number of cores)")->check(kPositive);
}

}  // namespace

void add_eval_command(CLI::App& app, int& exit_status) {
    auto f = std::make_shared<UseFlags>();
    CLI::App* cmd = app.add_subcommand("eval", "WER and PER of a checkpoint on the dev or test split");
    add_decoding_flags(cmd, *f);
    cmd->add_option("--split", f->split, "dev or test")->capture_default_str();
    cmd->add_option("--dictionary", f->dictionary, "The CMUdict file for g2p");
    cmd->callback([f, &exit_status] { exit_status = run_eval(*f); });
}

void add_predict_command(CLI::App& app, int& exit_status) {
    auto f = std::make_shared<UseFlags>();
    CLI::App* cmd = app.add_subcommand("predict", "Pronounce words (arguments, or one per line on standard input)");
    add_decoding_flags(cmd, *f);
    cmd->add_option("words", f->words, "Words to pronounce");
    cmd->callback([f, &exit_status] { exit_status = run_predict(*f); });
}

}  // namespace seqgrad::cli
