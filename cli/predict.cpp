// `seqgrad predict`: outputs for inputs given as arguments, in files or on standard input, streamed
// in chunks so that a file of any length decodes in bounded memory.
#include <cstdio>
#include <iostream>
#include <memory>

#include "commands.h"
#include "decoding_flags.h"
#include "seqgrad/core/threads.h"
#include "seqgrad/training/line_reader.h"
#include "seqgrad/inference/translator.h"

namespace seqgrad::cli {
namespace {

struct PredictFlags : DecodingFlags {
    std::vector<std::string> inputs;  // words or sentences
    std::vector<std::string> input_files;
    int64_t chunk = 10000;
};

// The inputs of `predict`, one line at a time: the arguments, else the files, else standard input.
class InputLines {
public:
    explicit InputLines(const PredictFlags& f) : words_(f.inputs), files_(f.input_files) {}
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

int run_predict(const PredictFlags& f) {
    if (f.threads > 0) set_num_threads(f.threads);
    const models::DecodingOptions options = decoding_of(f);  // refused before any checkpoint is read
    check(f.chunk >= 1, "predict", "--chunk must be positive, got ", f.chunk);
    const inference::Translator translator(f.checkpoints, f.weights, precision_of(f));

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
            if (options.nbest > 1) {
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
    const inference::Translator::Totals totals = translator.totals();
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

}  // namespace

void add_predict_command(CLI::App& app, int& exit_status) {
    auto f = std::make_shared<PredictFlags>();
    CLI::App* cmd = app.add_subcommand("predict", "Outputs for inputs given as arguments, in --input files, or one per "
                                                  "line on standard input");
    add_decoding_flags(cmd, *f, {"beam_size", "nbest", "length_penalty", "max_len"});
    cmd->add_option("--input", f->input_files, "Files of inputs, one a line (plain or gzip)");
    cmd->add_option("--chunk", f->chunk, "Lines read and decoded at a time (memory stays bounded)")
        ->capture_default_str();
    cmd->add_option("inputs", f->inputs, "Inputs (words, sentences)");
    cmd->callback([f, &exit_status] { exit_status = run_predict(*f); });
}

}  // namespace seqgrad::cli
