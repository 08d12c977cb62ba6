// `seqgrad generate`: a language model's checkpoint continues a prompt, each token's text written to
// standard output as it is made; then the tokens per second to standard error.
#include <cstdio>

#include "commands.h"
#include "decoding_flags.h"
#include "seqgrad/core/threads.h"
#include "seqgrad/inference/text_generator.h"
#include "seqgrad/text/utf8.h"

namespace seqgrad::cli {
namespace {

struct GenerateFlags {
    std::string checkpoint;
    std::string prompt = "\n";
    std::string prompt_file;
    int64_t num_samples = 1;
    GivenOptions generation, decoding;  // the options the command line gave, by key
    bool int8 = false;
    bool bf16 = false;
    int threads = 0;
};

// What `seqgrad generate` writes unless told otherwise: 500 tokens, sampled at temperature 0.8.
inference::GenerationOptions generate_defaults() {
    inference::GenerationOptions o;
    o.max_tokens = 500;
    o.decoding.temperature = 0.8f;
    return o;
}

int run_generate(const GenerateFlags& f) {
    if (f.threads > 0) set_num_threads(f.threads);
    // Refused before the checkpoint is read: nothing is computed for options out of range.
    inference::GenerationOptions options = generate_defaults();
    for (const auto& [key, words] : f.generation) options.set(key, words);
    for (const auto& [key, words] : f.decoding) options.decoding.set(key, words);
    options.validate();  // the decoding options' checks among its own
    check(f.num_samples >= 1, "generate", "--num-samples must be 1 or more, got ", f.num_samples);
    const std::string prompt = f.prompt_file.empty() ? f.prompt : text::read_file(f.prompt_file);
    const inference::TextGenerator generator(f.checkpoint, packed_precision(f.int8, f.bf16));
    const uint64_t seed = options.decoding.seed;
    int64_t tokens = 0;
    double seconds = 0;
    for (int64_t sample = 0; sample < f.num_samples; ++sample) {
        options.decoding.seed = seed + static_cast<uint64_t>(sample);
        if (sample > 0) std::fputs("\n---------------\n", stdout);
        std::fputs(prompt.c_str(), stdout);
        const inference::Generation g = generator.generate(prompt, options, [](const std::string& piece) {
            std::fputs(piece.c_str(), stdout);
            std::fflush(stdout);
        });
        if (sample == 0 && g.unknown_in_prompt > 0)
            std::fprintf(stderr,
                         "\nnote: %lld of the prompt's %lld symbols are not in the model's vocabulary (read "
                         "as <unk>; --strict refuses them)\n",
                         static_cast<long long>(g.unknown_in_prompt), static_cast<long long>(g.prompt_tokens));
        tokens += g.tokens;
        seconds += g.seconds;
    }
    std::fputs("\n", stdout);
    std::fflush(stdout);
    std::fprintf(stderr, "generated %lld tokens in %.2f s: %.1f tokens/s (%d %s)\n", static_cast<long long>(tokens),
                 seconds, static_cast<double>(tokens) / std::max(seconds, 1e-9), get_num_threads(),
                 get_num_threads() == 1 ? "thread" : "threads");
    return 0;
}

}  // namespace

void add_generate_command(CLI::App& app, int& exit_status) {
    auto f = std::make_shared<GenerateFlags>();
    CLI::App* cmd = app.add_subcommand("generate", "A language model continues a prompt, writing its text as it goes");
    cmd->footer("Each token is sampled from the model's distribution at --temperature (0: the most likely), among "
                "the --top-k most likely and the smallest set of tokens whose probability reaches --top-p; the same "
                "--seed writes the same text (sample i of --num-samples uses seed + i). Past the model's context the "
                "window slides: the last half of it is read again and generation goes on.");
    cmd->add_option("--checkpoint", f->checkpoint,
                    "A language model's checkpoint directory (its best weights) or "
                    "model file")
        ->required();
    CLI::Option* prompt = cmd->add_option("--prompt", f->prompt, "The text to continue (default: a new line)");
    cmd->add_option("--prompt-file", f->prompt_file, "Read the prompt from this file instead")->excludes(prompt);
    cmd->add_option("--num-samples", f->num_samples, "Texts to write, one after another")->capture_default_str();
    const inference::GenerationOptions defaults = generate_defaults();
    add_option_flags(cmd, inference::GenerationOptions::options(defaults), "Generation", f->generation);
    add_decoding_option_flags(cmd, {"temperature", "top_k", "top_p", "seed"}, f->decoding, defaults.decoding);
    add_precision_flags(cmd, f->int8, f->bf16);
    cmd->add_option("--threads", f->threads, "Threads (default: the number of cores)")->check(kPositive);
    cmd->callback([f, &exit_status] { exit_status = run_generate(*f); });
}

}  // namespace seqgrad::cli
