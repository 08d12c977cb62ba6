// The examples a task is made of, and a task's three splits.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace seqgrad::training {

// One input with every acceptable output: a word and its pronunciations, or a synthetic sequence
// and its one answer. Training reads each (source, reference) pair; evaluation scores a
// prediction against all the references (any-reference WER and PER, metrics.h).
struct Example {
    std::string name;                                  // the headword, or the source's symbols joined
    std::vector<std::string> source;                   // e.g. the word's characters
    std::vector<std::vector<std::string>> references;  // e.g. its pronunciations, in file order
};

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
