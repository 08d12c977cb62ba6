// A trained checkpoint used from C++: turns lines of text into their best outputs (or the n best,
// with scores) through seqgrad::inference::Translator, which carries the model's tokenizers and
// vocabularies, so text goes in and text comes out.
//
//   translate CHECKPOINT [--beam K] [--nbest N] [INPUT...]     inputs as arguments, or stdin lines
//
// For example, after `seqgrad train --task g2p ... --out runs/g2p`:
//   ./translate runs/g2p --beam 5 --nbest 3 phoenix seqgrad
#include <seqgrad/seqgrad.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

namespace sg = seqgrad;

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s CHECKPOINT [--beam K] [--nbest N] [INPUT...]\n", argv[0]);
        return 2;
    }
    sg::models::DecodingOptions options;
    options.beam_size = 5;
    std::vector<std::string> inputs;
    for (int i = 2; i < argc; ++i) {
        const std::string arg = argv[i];
        if ((arg == "--beam" || arg == "--nbest") && i + 1 < argc)
            (arg == "--beam" ? options.beam_size : options.nbest) = std::atoll(argv[++i]);
        else inputs.push_back(arg);
    }
    if (inputs.empty())
        for (std::string line; std::getline(std::cin, line);) inputs.push_back(line);
    try {
        const sg::inference::Translator translator(argv[1]);
        const auto results = translator.translate(inputs, options);
        for (size_t i = 0; i < inputs.size(); ++i)
            for (const sg::inference::Translation& t : results[i])
                std::printf("%s\t%s\t%.4f\n", inputs[i].c_str(), t.text.c_str(), t.score);
    } catch (const sg::Error& e) {
        std::fprintf(stderr, "translate: %s\n", e.what());
        return 1;
    }
    return 0;
}
