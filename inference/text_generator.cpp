// Text from a language model's checkpoint (text_generator.h).
#include "seqgrad/inference/text_generator.h"

#include <algorithm>
#include <chrono>
#include <iterator>

#include "seqgrad/core/autograd.h"
#include "seqgrad/core/hash.h"
#include "seqgrad/internal/option_table.h"
#include "seqgrad/models/registry.h"
#include "seqgrad/text/utf8.h"

namespace seqgrad::inference {
namespace {

const char* kOp = "generate";

const internal::OptionTable<GenerationOptions>& generation_table() {
    using G = GenerationOptions;
    static const internal::OptionTable<G> table =
        internal::OptionTable<G>("generate")
            .add("max_tokens", "new tokens to write", &G::max_tokens)
            .at_least(0)
            .add("context", "the window the model reads, at most its context (0: its context)", &G::context)
            .at_least(0)
            .add("strict", "refuse a prompt with symbols the vocabulary lacks (else they read as <unk>)", &G::strict)
            .rule([](const G& o) {
                check(o.decoding.beam_size == 1, kOp, "generation samples one text: beam size must be 1, got ",
                      o.decoding.beam_size);
                o.decoding.validate();
            });
    return table;
}

}  // namespace

void GenerationOptions::validate() const { generation_table().validate(*this); }

std::vector<OptionInfo> GenerationOptions::options() { return options(GenerationOptions{}); }

std::vector<OptionInfo> GenerationOptions::options(const GenerationOptions& defaults) {
    return generation_table().options(&defaults);
}

void GenerationOptions::set(const std::string& key, const std::vector<std::string>& words) {
    generation_table().set(*this, key, words);
}

TextGenerator::TextGenerator(const std::string& checkpoint, Precision precision)
    : loaded_(text::load_model(checkpoint)) {
    check(!models::reads_source(loaded_.model->config()), kOp, loaded_.path, " holds a \"",
          loaded_.model->config().model, "\" model, which reads a source: generate continues a language model's text ",
          "(translate with predict)");
    loaded_.model->pack_weights(precision);
}

int64_t TextGenerator::context() const { return loaded_.model->max_decode_length(); }

Generation TextGenerator::generate(const std::string& prompt, const GenerationOptions& options,
                                   const std::function<void(const std::string&)>& on_text) const {
    options.validate();
    check(options.context <= context(), kOp, "a context of ", options.context, " tokens is above the model's, ",
          context());
    const int64_t window = options.context > 0 ? options.context : context();
    check(window >= 2, kOp, "a window of ", window, " tokens leaves no room to generate");
    check(text::is_utf8(prompt) || loaded_.target_tokenizer.kind() == "byte", kOp, "the prompt is not valid UTF-8");
    std::lock_guard<std::mutex> lock(mutex_);
    const auto start = std::chrono::steady_clock::now();
    Generation out;

    // The prompt as ids; symbols the vocabulary lacks read as <unk>, or are refused.
    std::vector<int64_t> ids;
    std::vector<std::string> unknown;
    loaded_.target_tokenizer.each_symbol(prompt, [&](std::string_view symbol) {
        const int64_t id = loaded_.target_vocab.id(symbol);
        if (id == models::kUnk && symbol != text::Vocabulary::kSpecials[models::kUnk])
            unknown.push_back(text::printable(symbol));
        ids.push_back(id);
    });
    check(!ids.empty(), kOp, "the prompt is empty: a language model continues at least one token (a new line, say)");
    out.prompt_tokens = static_cast<int64_t>(ids.size());
    out.unknown_in_prompt = static_cast<int64_t>(unknown.size());
    if (options.strict && !unknown.empty()) {
        std::string shown;
        for (size_t i = 0; i < std::min<size_t>(unknown.size(), 5); ++i)
            shown += (i ? ", \"" : "\"") + unknown[i] + "\"";
        throw Error(detail::concat(kOp, ": the prompt has ", unknown.size(), " symbols the vocabulary lacks (", shown,
                                   unknown.size() > 5 ? ", ..." : "", "); without --strict they read as <unk>"));
    }

    // Generated symbols, and their text as it comes for the callback.
    std::vector<std::string> symbols;
    text::Tokenizer::Stream stream(loaded_.target_tokenizer);
    const auto emit = [&](int64_t token) {
        symbols.push_back(loaded_.target_vocab.symbol(token));
        const std::string text = stream.add(symbols.back());
        if (!text.empty() && on_text) on_text(text);
    };
    NoGradGuard no_grad;
    std::vector<int64_t> all = ids;  // the prompt and every token since
    int64_t remaining = options.max_tokens;
    for (uint64_t segment = 0; remaining > 0; ++segment) {
        // The first segment reads the prompt (its last `window` tokens); each later one the last
        // half window of everything so far.
        const int64_t keep = segment == 0 ? std::min<int64_t>(window, static_cast<int64_t>(all.size()))
                                          : std::max<int64_t>(1, window / 2);
        const std::vector<int64_t> prefix(all.end() - keep, all.end());
        models::DecodingOptions step = options.decoding;
        step.max_len = std::min(remaining, window - keep + 1);
        step.min_len = step.max_len + 1;  // a text has no end: </s> is never chosen
        // Nor does a text hold <pad> or <s>: the model never learned to write them, and one still
        // learning (or sampled hot) would.
        step.barred.insert(step.barred.end(), std::begin(models::kNotInText), std::end(models::kNotInText));
        step.seed = segment == 0 ? options.decoding.seed : splitmix64_mix(options.decoding.seed + segment);
        const auto found = models::search(*loaded_.model, IntTensor::zeros({1, 0}),
                                          IntTensor::from_vector(prefix, {1, keep}), step,
                                          [&](int64_t, int64_t token) { emit(token); });
        const models::Hypothesis& h = found.front().front();
        all.insert(all.end(), h.tokens.begin(), h.tokens.end());
        remaining -= static_cast<int64_t>(h.tokens.size());
        out.tokens += static_cast<int64_t>(h.tokens.size());
        if (h.tokens.empty()) break;  // nothing it could write
    }
    if (const std::string rest = stream.finish(); !rest.empty() && on_text) on_text(rest);
    out.text = loaded_.target_tokenizer.detokenize(symbols);
    out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return out;
}

}  // namespace seqgrad::inference
