// `seqgrad eval` (WER and PER of a checkpoint on a split or a file of pairs, and BLEU and chrF
// when asked) and `seqgrad predict` (outputs for inputs given as arguments, in files or on
// standard input, streamed in chunks so that a file of any length decodes in bounded memory).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>

#include "commands.h"
#include "progress.h"
#include "seqgrad/core/threads.h"
#include "seqgrad/training/checkpoint.h"
#include "seqgrad/training/data.h"
#include "seqgrad/training/line_reader.h"
#include "seqgrad/training/pairs.h"
#include "seqgrad/training/task.h"
#include "seqgrad/training/evaluate.h"
#include "seqgrad/training/text_metrics.h"
#include "seqgrad/training/translator.h"

namespace seqgrad::cli {
namespace {

struct UseFlags {
    std::string checkpoint;
    std::string split = "dev";
    std::string dictionary;
    std::vector<std::string> test_files;
    std::vector<std::string> metrics;
    bool skip_invalid = false;
    int64_t beam = 1;
    int64_t nbest = 1;
    float alpha = 0.6f;
    int64_t max_len = 0;
    int threads = 0;
    bool int8 = false;
    std::vector<std::string> inputs;  // predict: words or sentences
    std::vector<std::string> input_files;
    int64_t chunk = 10000;
};

// The search the flags ask for (the longest output: --max-len, or search.h's default).
models::DecodingOptions decoding_of(const UseFlags& f) {
    models::DecodingOptions o;
    o.beam_size = f.beam;
    o.nbest = f.nbest;
    o.length_penalty = f.alpha;
    o.max_len = f.max_len;
    return o;
}

// The training options of the run that wrote the checkpoint (for its task's data), or the
// defaults for the model's task.
training::TrainingOptions run_options(const std::string& checkpoint, const std::string& task) {
    const training::CheckpointDir dir(checkpoint);
    training::TrainingOptions options;
    if (dir.exists() && dir.has_training_state()) options = training::load_training_state(dir.training_file()).options;
    options.task = task;
    return options;
}

int run_eval(const UseFlags& f) {
    if (f.threads > 0) set_num_threads(f.threads);
    check(f.split == "dev" || f.split == "test", "eval", "--split must be dev or test, got ", f.split);
    training::LoadedModel loaded = training::load_model(f.checkpoint);
    loaded.model->pack_weights(f.int8 ? Precision::int8 : Precision::float32);
    std::vector<training::Example> examples;
    std::string what;
    if (!f.test_files.empty()) {
        std::vector<std::string> report;
        examples = training::read_examples(f.test_files, loaded.source_tokenizer, loaded.target_tokenizer,
                                           f.skip_invalid, &report);
        for (const std::string& line : report) std::fprintf(stderr, "%s\n", line.c_str());
        what = training::corpus_name(f.test_files);
    } else {
        training::TrainingOptions options = run_options(f.checkpoint, loaded.task);
        if (!f.dictionary.empty()) options.dictionary = f.dictionary;
        options.skip_invalid = options.skip_invalid || f.skip_invalid;
        training::DataRequest request;
        request.train = false;
        request.test = f.split == "test";
        request.source_tokenizer = &loaded.source_tokenizer;
        request.target_tokenizer = &loaded.target_tokenizer;
        request.source_vocab = &loaded.source_vocab;
        request.target_vocab = &loaded.target_vocab;
        training::TrainingData data = training::prepare_data(options, request);
        examples = std::move(f.split == "test" ? data.test : data.dev);
        what = loaded.task + " " + f.split;
    }
    check(!examples.empty(), "eval", what, " has no examples to evaluate");
    std::vector<std::vector<std::string>> predictions;
    const training::Task& task = training::task(loaded.task);
    const training::EvalResult r =
        task.evaluate(*loaded.model, loaded, examples, decoding_of(f), f.metrics.empty() ? nullptr : &predictions);
    std::printf("%s (%s, step %lld, beam %lld): %s", what.c_str(), loaded.path.c_str(),
                static_cast<long long>(loaded.step), static_cast<long long>(f.beam), task.describe(r).c_str());
    if (!f.metrics.empty()) {
        std::vector<std::string> hypotheses;
        std::vector<std::vector<std::string>> references;
        for (size_t i = 0; i < examples.size(); ++i) {
            hypotheses.push_back(loaded.target_tokenizer.detokenize(predictions[i]));
            references.push_back(examples[i].reference_texts);
        }
        for (const std::string& metric : f.metrics) {
            if (metric == "bleu") std::printf("  BLEU %.2f", training::corpus_bleu(hypotheses, references).score);
            else std::printf("  chrF %.2f", training::corpus_chrf(hypotheses, references));
        }
    }
    std::printf("\n");
    return 0;
}

// The inputs of `predict`, one line at a time: the arguments, else the files, else standard input.
class InputLines {
public:
    explicit InputLines(const UseFlags& f) : words_(f.inputs), files_(f.input_files) {}
    bool next(std::string& line) {
        if (!words_.empty()) {
            if (next_word_ >= words_.size()) return false;
            line = words_[next_word_++];
            return true;
        }
        if (files_.empty()) {
            if (!std::getline(std::cin, line)) return false;
            if (!line.empty() && line.back() == '\r') line.pop_back();
            return true;
        }
        while (true) {
            if (!reader_) {
                if (next_file_ >= files_.size()) return false;
                reader_ = std::make_unique<training::LineReader>(files_[next_file_++]);
            }
            if (reader_->next(line)) return true;
            reader_.reset();
        }
    }

private:
    std::vector<std::string> words_, files_;
    size_t next_word_ = 0, next_file_ = 0;
    std::unique_ptr<training::LineReader> reader_;
};

int run_predict(const UseFlags& f) {
    if (f.threads > 0) set_num_threads(f.threads);
    check(f.nbest <= f.beam, "predict", "--nbest ", f.nbest, " needs a beam at least as wide (--beam ", f.beam, ")");
    check(f.chunk >= 1, "predict", "--chunk must be positive, got ", f.chunk);
    const training::Translator translator(f.checkpoint, f.int8 ? Precision::int8 : Precision::float32);
    const models::DecodingOptions options = decoding_of(f);

    InputLines input(f);
    std::vector<std::string> chunk;
    int64_t line_number = 0, empty_lines = 0;
    std::string line;
    bool more = true;
    while (more) {
        chunk.clear();
        while (static_cast<int64_t>(chunk.size()) < f.chunk && (more = input.next(line))) chunk.push_back(line);
        if (chunk.empty()) break;
        const auto results = translator.translate(chunk, options);
        for (size_t i = 0; i < chunk.size(); ++i) {
            ++line_number;
            if (chunk[i].empty()) ++empty_lines;
            if (f.nbest > 1) {
                for (size_t rank = 0; rank < results[i].size(); ++rank)
                    std::printf("%lld\t%zu\t%s\t%.4f\n", static_cast<long long>(line_number), rank + 1,
                                results[i][rank].text.c_str(), results[i][rank].score);
            } else {
                std::printf("%s\t%s\n", chunk[i].c_str(), results[i].front().text.c_str());
            }
        }
        std::fflush(stdout);
    }
    check(line_number > 0, "predict", "no input (give it as arguments, --input files or on standard input)");
    const training::Translator::Totals totals = translator.totals();
    std::fprintf(stderr, "decoded %lld lines (%lld output tokens) in %.2f s: %.1f lines/s, %.1f tokens/s\n",
                 static_cast<long long>(totals.inputs), static_cast<long long>(totals.output_tokens), totals.seconds,
                 static_cast<double>(totals.inputs) / std::max(totals.seconds, 1e-9),
                 static_cast<double>(totals.output_tokens) / std::max(totals.seconds, 1e-9));
    if (totals.unknown_source_tokens > 0)
        std::fprintf(stderr, "note: %lld of %lld input tokens are not in the model's vocabulary (read as <unk>)\n",
                     static_cast<long long>(totals.unknown_source_tokens),
                     static_cast<long long>(totals.source_tokens));
    if (empty_lines > 0)
        std::fprintf(stderr, "note: %lld empty input lines gave empty outputs\n", static_cast<long long>(empty_lines));
    return 0;
}

void add_decoding_flags(CLI::App* cmd, UseFlags& f) {
    cmd->add_option("--checkpoint", f.checkpoint, "A checkpoint directory (its best weights) or a model file")
        ->required();
    cmd->add_option("--beam", f.beam, "Beam size (1: greedy)")
        ->capture_default_str()
        ->check(CLI::Range(int64_t{1}, kMaxBeam));
    cmd->add_option("--alpha", f.alpha, "Beam search length penalty ((5+len)/6)^alpha")->capture_default_str();
    cmd->add_option("--threads", f.threads, "Threads (default: the number of cores)")->check(kPositive);
    cmd->add_flag("--int8", f.int8,
                  "Int8 weights and products (oneDNN): faster on CPUs with AMX or AVX-512 VNNI, within rounding of "
                  "float32");
}

}  // namespace

void add_eval_command(CLI::App& app, int& exit_status) {
    auto f = std::make_shared<UseFlags>();
    CLI::App* cmd = app.add_subcommand("eval", "Sequence and token error rates (printed as WER and PER) of a "
                                               "checkpoint on a split or a file");
    add_decoding_flags(cmd, *f);
    cmd->add_option("--max-len", f->max_len,
                    "Longest output, in tokens (default: twice the longest input + 10, at least 40)")
        ->check(kPositive);
    cmd->add_option("--split", f->split, "dev or test (of the run's own data)")->capture_default_str();
    cmd->add_option("--test", f->test_files,
                    "Evaluate on these pairs instead: one TSV file, or a source and a target file")
        ->expected(1, 2);
    cmd->add_option("--metric", f->metrics, "Also bleu and/or chrf (sacreBLEU's definitions), for sentence targets")
        ->check(CLI::IsMember({"bleu", "chrf"}));
    cmd->add_flag("--skip-invalid", f->skip_invalid,
                  "Evaluate the valid lines and count the others, instead of refusing");
    cmd->add_option("--dictionary", f->dictionary, "The CMUdict file for g2p");
    cmd->callback([f, &exit_status] { exit_status = run_eval(*f); });
}

void add_predict_command(CLI::App& app, int& exit_status) {
    auto f = std::make_shared<UseFlags>();
    CLI::App* cmd = app.add_subcommand("predict", "Outputs for inputs given as arguments, in --input files, or one per "
                                                  "line on standard input");
    add_decoding_flags(cmd, *f);
    cmd->add_option("--max-len", f->max_len,
                    "Longest output, in tokens (default: twice the longest input + 10, at least 40)")
        ->check(kPositive);
    cmd->add_option("--nbest", f->nbest, "Hypotheses per input (at most --beam): TSV of line, rank, output, score")
        ->capture_default_str()
        ->check(CLI::Range(int64_t{1}, kMaxBeam));
    cmd->add_option("--input", f->input_files, "Files of inputs, one a line (plain or gzip)");
    cmd->add_option("--chunk", f->chunk, "Lines read and decoded at a time (memory stays bounded)")
        ->capture_default_str();
    cmd->add_option("inputs", f->inputs, "Inputs (words, sentences)");
    cmd->callback([f, &exit_status] { exit_status = run_predict(*f); });
}

}  // namespace seqgrad::cli
