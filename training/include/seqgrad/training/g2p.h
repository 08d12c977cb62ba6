// The G2P task on CMUdict: the strict dictionary reader and the split by headword, as the
// README's "Tasks and data" describes them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "seqgrad/training/dataset.h"

namespace seqgrad::training {

inline constexpr const char* kCmudictPath = "/usr/share/pocketsphinx/model/en-us/cmudict-en-us.dict";

// The 39 ARPAbet phones of CMUdict, without stress, sorted.
const std::vector<std::string>& arpabet_phones();

// Every pronunciation of every headword, grouped by word in order of first appearance.
struct Lexicon {
    std::vector<Example> words;
    std::vector<std::string> warnings;  // "path:line: message", one per skipped line
    int64_t lines = 0;                  // lines in the file
    int64_t skipped_lines = 0;          // lines reported and skipped (blank lines are not counted)
};

// Reads a dictionary strictly: `word PH1 PH2 ...`, one entry a line; `word(2)` is another
// pronunciation of `word`. A line with no phones, a phone outside the 39, a headword that is not
// UTF-8 or a repeated pronunciation is reported with its line number and skipped; blank lines and
// CRLF endings are accepted. An unreadable file, or one with no valid entry, is an Error naming
// the path.
Lexicon read_dictionary(const std::string& path = kCmudictPath);

// "word(2)" -> "word": the headword that all pronunciations of a word share.
std::string_view strip_variant(std::string_view headword);

// The split of a headword: split_by_hash of the headword with its "(N)" suffix removed.
Split g2p_split(std::string_view headword);

}  // namespace seqgrad::training
