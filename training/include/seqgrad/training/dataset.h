// The examples a task is made of, and a task's three splits.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "seqgrad/core/hash.h"

namespace seqgrad::training {

// One input with every acceptable output: a word and its pronunciations, a sentence and its
// translations, or a synthetic sequence and its one answer. Training reads each (source,
// reference) pair; evaluation scores a prediction against all the references (any-reference WER
// and PER, error_rates.h; BLEU and chrF on the texts, bleu_chrf.h).
struct Example {
    std::string name;                                  // the source text (a headword, a sentence)
    std::vector<std::string> source;                   // its symbols, e.g. the word's characters
    std::vector<std::vector<std::string>> references;  // e.g. its pronunciations, in file order
    std::vector<std::string> reference_texts;          // the references as text (empty if not kept)
};

enum class Split { train, dev, test };
const char* split_name(Split split);

// The split a source text falls in when dev and test are carved from one file: h = FNV-1a (32
// bits) of its bytes; h % 100 < 90 train, < 95 dev, else test. Every line of a source lands in
// the same split, and the split of a line never depends on the others.
Split split_by_hash(std::string_view source);

struct Dataset {
    std::string task;  // "g2p", "copy", "reverse" or "sort"
    std::vector<Example> train, dev, test;
    // Problems met while reading the data ("path:line: message"), for the caller to show; the
    // lines they name were skipped.
    std::vector<std::string> warnings;
    int64_t skipped_lines = 0;

    const std::vector<Example>& split(std::string_view name) const;  // "train", "dev" or "test"
};

}  // namespace seqgrad::training
