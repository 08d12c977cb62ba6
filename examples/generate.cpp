// A language model's checkpoint used from C++: continues a prompt through
// seqgrad::inference::TextGenerator, printing each piece of text as the model writes it.
//
//   generate CHECKPOINT [PROMPT] [--tokens N] [--temperature T] [--top-k K] [--seed S]
//
// For example, after `seqgrad train --model gpt --text data/tinyshakespeare.txt --out runs/shakespeare`:
//   ./generate runs/shakespeare "ROMEO:" --tokens 300 --temperature 0.8
#include <seqgrad/seqgrad.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace sg = seqgrad;

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s CHECKPOINT [PROMPT] [--tokens N] [--temperature T] [--top-k K] [--seed S]\n",
                     argv[0]);
        return 2;
    }
    std::string prompt = "\n";
    sg::inference::GenerationOptions options;
    options.max_tokens = 200;
    options.decoding.temperature = 0.8f;
    options.decoding.seed = 1;
    for (int i = 2; i < argc; ++i) {
        const std::string arg = argv[i];
        const bool has_value = i + 1 < argc;
        if (arg == "--tokens" && has_value) options.max_tokens = std::atoll(argv[++i]);
        else if (arg == "--temperature" && has_value) options.decoding.temperature = std::strtof(argv[++i], nullptr);
        else if (arg == "--top-k" && has_value) options.decoding.top_k = std::atoll(argv[++i]);
        else if (arg == "--seed" && has_value) options.decoding.seed = std::strtoull(argv[++i], nullptr, 10);
        else prompt = arg;
    }
    try {
        const sg::inference::TextGenerator generator(argv[1]);
        std::fputs(prompt.c_str(), stdout);
        const sg::inference::Generation g = generator.generate(prompt, options, [](const std::string& piece) {
            std::fputs(piece.c_str(), stdout);
            std::fflush(stdout);
        });
        std::printf("\n");
        std::fprintf(stderr, "%lld tokens in %.2f s\n", static_cast<long long>(g.tokens), g.seconds);
    } catch (const sg::Error& e) {
        std::fprintf(stderr, "%s\n", e.what());
        return 1;
    }
    return 0;
}
