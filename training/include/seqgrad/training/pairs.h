// Pairs of texts read strictly from files: a corpus is one TSV file (source, a tab, target on
// each line) or two aligned files (line i of each is a pair), plain or gzip-compressed.
//
// A line that is not a pair (no tab or more than one, an empty side, invalid UTF-8) is handed on
// as a problem with its file and line, for the data pipeline (data.h) to report or skip. Aligned
// files of different lengths are always refused.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "seqgrad/training/line_reader.h"

namespace seqgrad::training {

// The pairs of one corpus (one TSV path, or a source path and a target path), in file order.
class PairReader {
public:
    explicit PairReader(const std::vector<std::string>& paths);

    // The next line: true with the pair, or true with `problem` set for a line that is not one
    // (the caller reports it); false after the last line. Aligned files of different lengths are
    // an Error naming both counts.
    bool next(std::string& source, std::string& target, std::string& problem);
    std::string where() const;  // of the last line: "file:line", or "src, tgt: line N" for aligned files
    int64_t line() const;

private:
    std::unique_ptr<LineReader> first_, second_;
    std::string line_, other_;
};

// Which files a corpus reads, for messages: "corpus.tsv", "src.txt + tgt.txt".
std::string corpus_name(const std::vector<std::string>& paths);

}  // namespace seqgrad::training
