// Your own data: sequence pairs read strictly from files, tokenized per side, split, counted into
// vocabularies and encoded for training.
//
// A corpus is one TSV file (source, a tab, target on each line) or two aligned files (line i of
// each is a pair), plain or gzip-compressed (read through zlib; ".gz" or not, a gzip stream is
// recognised by its bytes). A source on several lines has several references: training learns
// each pair, evaluation scores a prediction against the nearest.
//
// Bad lines (no tab or more than one, an empty side, invalid UTF-8, a special token such as <s>
// used as a symbol, a side longer than the model takes) are reported with their file and line.
// By default the first problems are shown and the data is refused; with skip_invalid the rest is
// used and the skipped lines are counted. Aligned files of different lengths are always refused.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "seqgrad/training/batching.h"
#include "seqgrad/training/dataset.h"
#include "seqgrad/training/g2p.h"
#include "seqgrad/training/options.h"
#include "seqgrad/training/tokenizer.h"
#include "seqgrad/training/vocabulary.h"

namespace seqgrad::training {

// What a file may ask of the readers: a line of at most 1 MiB, a side of at most 4096 symbols.
// Longer ones are refused before anything is built from them.
inline constexpr size_t kMaxLineBytes = size_t{1} << 20;
inline constexpr int64_t kMaxSymbolsPerSide = 4096;

// Lines of a text file, plain or gzip-compressed, one at a time (a file of any size reads in
// constant memory). CRLF endings are accepted; a line longer than kMaxLineBytes is an Error.
class LineReader {
public:
    explicit LineReader(const std::string& path);  // Error naming the path and the system's reason
    ~LineReader();
    LineReader(const LineReader&) = delete;
    LineReader& operator=(const LineReader&) = delete;

    bool next(std::string& line);  // false after the last line; a read error is an Error
    int64_t line_number() const { return line_number_; }
    const std::string& path() const { return path_; }

private:
    bool fill();
    std::string path_;
    void* file_ = nullptr;  // a zlib gzFile
    std::string buffer_;
    size_t at_ = 0;
    bool eof_ = false;
    int64_t line_number_ = 0;
};

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

// Which files a task reads, for messages: "corpus.tsv", "src.txt + tgt.txt".
std::string corpus_name(const std::vector<std::string>& paths);

// The data a run trains and evaluates on, with the tokenizers and vocabularies it was read with.
struct TrainingData : TextSides {
    EncodedPairs train;         // one pair per (source, reference), in file order
    std::vector<Example> dev;   // grouped by source, for evaluation
    std::vector<Example> test;  // the same (only when asked for)
    // What a run's start line reports: where each split came from and its size, unknown tokens,
    // skipped lines. One line each.
    std::vector<std::string> report;
};

struct DataRequest {
    bool train = true;  // encode the training split (evaluation alone needs only dev or test)
    bool test = false;  // read the test split too
    // The longest source and target, in symbols, the model takes (0: no limit); longer lines are
    // bad lines. The target's count includes the </s> the model must also predict.
    int64_t max_source_length = 0;
    int64_t max_target_length = 0;
    // Tokenizers and vocabularies to use instead of making them (resume, eval): a checkpoint's.
    const Tokenizer* source_tokenizer = nullptr;
    const Tokenizer* target_tokenizer = nullptr;
    const Vocabulary* source_vocab = nullptr;
    const Vocabulary* target_vocab = nullptr;
};

// The data of the run's task ("g2p", "corpus", or a synthetic one) as options describe it. For a
// corpus without dev files, dev and test are carved from the training files by a stable hash of
// the source side (the G2P rule: FNV-1a of the source text; 90% train, 5% dev, 5% test), so that
// every line of a source lands in the same split; test files, if given, replace the carved test.
TrainingData prepare_data(const TrainingOptions& options, const DataRequest& request = {});

// The tokenizers a task uses when options do not bring a checkpoint's: g2p reads lower-cased
// characters and writes space-separated phones; synthetic tasks are characters on both sides; a
// corpus uses src_tokens and tgt_tokens, training SentencePiece models on its training side (or
// loading src_spm_model, tgt_spm_model).
std::pair<Tokenizer, Tokenizer> make_tokenizers(const TrainingOptions& options);

// A file of pairs read as evaluation examples (grouped by source) with the given tokenizers,
// e.g. `seqgrad eval --test F`. Bad lines are refused unless skip_invalid.
std::vector<Example> read_examples(const std::vector<std::string>& paths, const Tokenizer& source_tokenizer,
                                   const Tokenizer& target_tokenizer, bool skip_invalid = false,
                                   std::vector<std::string>* report = nullptr);

}  // namespace seqgrad::training
