// A classifier's checkpoint used from C++: labels texts through seqgrad::inference::TextClassifier,
// printing each text's most likely labels with their probabilities.
//
//   classify CHECKPOINT TEXT... [--top-k K]
//
// For example, after `seqgrad train --model bert --train data/langid/train.tsv --out runs/langid`:
//   ./classify runs/langid "Guten Morgen" "Buenos días" --top-k 2
#include <seqgrad/seqgrad.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace sg = seqgrad;

int main(int argc, char** argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: %s CHECKPOINT TEXT... [--top-k K]\n", argv[0]);
        return 2;
    }
    std::vector<std::string> texts;
    int64_t top_k = 1;
    for (int i = 2; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg == "--top-k" && i + 1 < argc) top_k = std::atoll(argv[++i]);
        else texts.push_back(arg);
    }
    try {
        const sg::inference::TextClassifier classifier(argv[1]);
        const auto results = classifier.classify(texts, top_k);
        for (size_t i = 0; i < texts.size(); ++i) {
            std::printf("%s", texts[i].c_str());
            for (const sg::inference::LabelScore& s : results[i])
                std::printf("\t%s\t%.3f", s.label.c_str(), s.probability);
            std::printf("\n");
        }
    } catch (const sg::Error& e) {
        std::fprintf(stderr, "%s\n", e.what());
        return 1;
    }
    return 0;
}
