// Text from a language model's checkpoint: the class a C++ program uses to continue a prompt.
//
//   seqgrad::inference::TextGenerator generator("runs/shakespeare");   // a checkpoint directory or file
//   seqgrad::inference::GenerationOptions options;
//   options.max_tokens = 500;
//   options.decoding.temperature = 0.8f;                          // and top_k, top_p, seed
//   generator.generate("ROMEO:", options, [](const std::string& piece) { std::cout << piece << std::flush; });
//
// Each new token's text goes to the callback as it is made. The model steps through its key/value
// cache; past its context (or options.context, a shorter window) the window slides: the last half
// of the window is read again as a new prompt and generation goes on from there, so that every
// token is predicted from at least half a window of the tokens before it. Each such segment s > 0
// samples with the seed splitmix64_mix(seed + s) (core/hash.h), the first with the seed itself.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "seqgrad/core/option_info.h"
#include "seqgrad/core/packed.h"
#include "seqgrad/models/search.h"
#include "seqgrad/text/model_file.h"

namespace seqgrad::inference {

struct GenerationOptions {
    int64_t max_tokens = 256;  // new tokens (a text has no end: </s> is never chosen, nor <pad> or <s>)
    // The sampler: temperature 0 is greedy; above it, top_k and top_p restrict the draw, and the
    // same seed draws the same text. Its beam size must stay 1.
    models::DecodingOptions decoding;
    int64_t context = 0;  // the window the model reads, at most its own context (0: its context)
    bool strict = false;  // refuse a prompt with symbols the vocabulary lacks (else they read as <unk>)

    // Throws Error naming the first option out of range, the decoding options' included (one table,
    // text_generator.cpp, with the decoding options' own, search.cpp).
    void validate() const;
    // The options a command line offers besides the decoding ones (`seqgrad generate`), their help
    // showing `defaults`' values, and setting one from the words given to its flag.
    static std::vector<OptionInfo> options();
    static std::vector<OptionInfo> options(const GenerationOptions& defaults);
    void set(const std::string& key, const std::vector<std::string>& words);
};

struct Generation {
    std::string text;               // the new text, without the prompt
    int64_t tokens = 0;             // new tokens
    int64_t prompt_tokens = 0;      // the prompt's
    int64_t unknown_in_prompt = 0;  // prompt symbols read as <unk>
    double seconds = 0;             // generating (the prompt's pass included)
};

class TextGenerator {
public:
    // The model's weights are packed for decoding (float32 by default, as the Translator's).
    // Error if the checkpoint is not a language model's.
    explicit TextGenerator(const std::string& checkpoint, Precision precision = Precision::float32);

    // Continues `prompt` (at least one token once tokenized; a new line is a common start).
    // Errors: an empty prompt, invalid UTF-8, unknown symbols with `strict`, options out of range,
    // a context above the model's.
    Generation generate(const std::string& prompt, const GenerationOptions& options,
                        const std::function<void(const std::string&)>& on_text = {}) const;

    const text::LoadedModel& checkpoint() const { return loaded_; }
    int64_t context() const;  // the model's

private:
    text::LoadedModel loaded_;
    mutable std::mutex mutex_;  // calls from several threads take turns
};

}  // namespace seqgrad::inference
