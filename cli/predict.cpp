// `seqgrad predict`: outputs for inputs given as arguments, in files or on standard input, streamed
// in chunks so that a file of any length decodes in bounded memory. An encoder's checkpoint gives
// labels (a classifier: each input's most likely labels and their probabilities) or fills masks (a
// masked language model: the most likely tokens for each <mask> of an input).
#include <cstdio>
#include <iostream>
#include <memory>

#include "commands.h"
#include "decoding_flags.h"
#include "seqgrad/core/threads.h"
#include "seqgrad/training/line_reader.h"
#include "seqgrad/inference/text_classifier.h"
#include "seqgrad/inference/translator.h"
#include "seqgrad/models/registry.h"

namespace seqgrad::cli {
namespace {

struct PredictFlags : DecodingFlags {
    std::vector<std::string> inputs;  // words or sentences
    std::vector<std::string> input_files;
    int64_t chunk = 10000;
    int64_t top_k = 0;  // an encoder's: labels or tokens per input or mask (0: 1 label, 5 tokens)
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

    // The next at most `size` lines, in place of `chunk`'s; false when there were none.
    bool next_chunk(std::vector<std::string>& chunk, int64_t size) {
        chunk.clear();
        std::string line;
        while (static_cast<int64_t>(chunk.size()) < size && next(line)) chunk.push_back(line);
        return !chunk.empty();
    }

private:
    std::vector<std::string> words_, files_;
    size_t next_word_ = 0, next_file_ = 0;
    std::unique_ptr<training::LineReader> reader_;
};

// A classifier's labels for each input line (a tab between the texts of a pair), or a masked
// language model's guesses for each <mask> of each line: `input TAB label TAB probability` (K
// label-probability pairs with --top-k K), or `input TAB mask-number TAB token TAB probability ...`.
int predict_with_encoder(const PredictFlags& f, text::LoadedModel loaded) {
    InputLines input(f);
    std::string line;
    int64_t lines = 0;
    const auto show = [](const std::string& token) {  // a token made visible in a line of text
        return token == " "    ? std::string("\u2423")
               : token == "\t" ? std::string("\\t")
               : token == "\n" ? std::string("\\n")
                               : token;
    };
    if (loaded.labels.empty()) {
        const inference::MaskFiller filler(std::move(loaded), precision_of(f));
        const int64_t k = f.top_k > 0 ? f.top_k : 5;
        while (input.next(line)) {
            ++lines;
            const auto guesses = filler.fill(line, k);
            for (size_t m = 0; m < guesses.size(); ++m) {
                std::printf("%s\t%zu", line.c_str(), m + 1);
                for (const inference::TokenScore& g : guesses[m])
                    std::printf("\t%s\t%.4f", show(g.token).c_str(), g.probability);
                std::printf("\n");
            }
            std::fflush(stdout);
        }
    } else {
        inference::TextClassifier classifier(std::move(loaded), precision_of(f));
        const int64_t k = f.top_k > 0 ? f.top_k : 1;
        std::vector<std::string> chunk;
        while (input.next_chunk(chunk, f.chunk)) {
            const auto results = classifier.classify(chunk, k);
            for (size_t i = 0; i < chunk.size(); ++i) {
                std::printf("%s", chunk[i].c_str());
                for (const inference::LabelScore& r : results[i])
                    std::printf("\t%s\t%.4f", r.label.c_str(), r.probability);
                std::printf("\n");
            }
            lines += static_cast<int64_t>(chunk.size());
            std::fflush(stdout);
        }
    }
    check(lines > 0, "predict", "no input (give it as arguments, --input files or on standard input)");
    return 0;
}

int run_predict(const PredictFlags& f) {
    if (f.threads > 0) set_num_threads(f.threads);
    // The flags are refused before any checkpoint is read, and each checkpoint is read once.
    check(f.top_k >= 0, "predict", "--top-k must be positive, got ", f.top_k);
    const models::DecodingOptions options = decoding_of(f);
    check(f.chunk >= 1, "predict", "--chunk must be positive, got ", f.chunk);
    std::vector<text::LoadedModel> checkpoints;
    for (const std::string& path : f.checkpoints) checkpoints.push_back(text::load_model(path));
    for (const text::LoadedModel& loaded : checkpoints)
        if (models::family(loaded.model->config()) == models::Family::encoder) {
            check(checkpoints.size() == 1, "predict", loaded.path, " holds an encoder: give one --checkpoint");
            return predict_with_encoder(f, std::move(checkpoints.front()));
        }
    check(f.top_k == 0, "predict", "--top-k is an encoder's (labels, or tokens for masks); give --nbest for outputs");
    const inference::Translator translator(std::move(checkpoints), f.weights, precision_of(f));

    InputLines input(f);
    std::vector<std::string> chunk;
    int64_t line_number = 0, empty_lines = 0;
    while (input.next_chunk(chunk, f.chunk)) {
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
    cmd->add_option("--top-k", f->top_k,
                    "An encoder's: the K most likely labels of each input (default 1), or tokens of each <mask> "
                    "(default 5)");
    cmd->add_option("inputs", f->inputs, "Inputs (words, sentences; a classifier's pair: the two texts with a tab)");
    cmd->callback([f, &exit_status] { exit_status = run_predict(*f); });
}

}  // namespace seqgrad::cli
