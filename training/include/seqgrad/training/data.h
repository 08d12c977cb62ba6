// The data pipeline every task's pairs go through: read strictly, tokenize each side, check it
// against the model's limits, split, count the training symbols into vocabularies, encode. A task
// (task.h) names where its pairs come from; prepare_data does the rest.
//
// Bad lines (no tab or more than one, an empty side, invalid UTF-8, a special token such as <s>
// used as a symbol, a side longer than the model takes) are reported with their file and line.
// By default the first problems are shown and the data is refused; with skip_invalid the rest is
// used and the skipped lines are counted.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "seqgrad/text/tokenizer.h"
#include "seqgrad/text/vocabulary.h"
#include "seqgrad/training/batching.h"
#include "seqgrad/training/dataset.h"
#include "seqgrad/training/options.h"

namespace seqgrad::training {

// The longest side a file may ask for: 4096 symbols. A longer one is a bad line.
inline constexpr int64_t kMaxSymbolsPerSide = 4096;

// The data a run trains and evaluates on, with the tokenizers and vocabularies it was read with.
struct TrainingData : text::TextSides {
    // A task of pairs:
    EncodedPairs train;         // one pair per (source, reference), in file order
    std::vector<Example> dev;   // grouped by source, for evaluation
    std::vector<Example> test;  // the same (only when asked for)
    // A task of text (text_data.h): the training and validation texts as ids (the target side's
    // vocabulary), and the validation text's length in the unit its bits are counted per.
    std::vector<int32_t> train_text, dev_text;
    int64_t dev_units = 0;
    std::string unit;
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
    const text::Tokenizer* source_tokenizer = nullptr;
    const text::Tokenizer* target_tokenizer = nullptr;
    const text::Vocabulary* source_vocab = nullptr;
    const text::Vocabulary* target_vocab = nullptr;
};

// Bad lines: counted, the first few kept for the message.
class Problems {
public:
    void add(const std::string& where, const std::string& message);
    int64_t count() const { return count_; }
    // Refuses the data of `what` (skip_invalid false) with the first problems, or adds a line to
    // `report` saying what was skipped. Nothing when there was no problem.
    void settle(bool skip_invalid, const std::string& what, std::vector<std::string>& report) const;

private:
    std::vector<std::string> first_;
    int64_t count_ = 0;
};

// Where a task's reader puts its pairs: the pipeline behind it tokenizes each side with the run's
// tokenizers, checks it, and sorts it into its split.
class PairSink {
public:
    virtual ~PairSink() = default;
    // Adds a pair of texts to `split`; false, with `problem` set, for a pair that cannot be used.
    virtual bool add(std::string_view source, std::string_view target, Split split, std::string& problem) = 0;
};

// Reads a corpus's pairs (pairs.h) into `sink`, each in the split `split_of` names (none: the pair
// is not used); bad lines go to `problems`.
void read_corpus(const std::vector<std::string>& paths, PairSink& sink, Problems& problems,
                 const std::function<std::optional<Split>(std::string_view)>& split_of);

// The data of the run's task (task.h) as the options describe it, through the pipeline.
TrainingData prepare_data(const TrainingOptions& options, const DataRequest& request = {});

// A file of pairs read as evaluation examples (grouped by source) with the given tokenizers,
// e.g. `seqgrad eval --test F`. Bad lines are refused unless skip_invalid.
std::vector<Example> read_examples(const std::vector<std::string>& paths, const text::Tokenizer& source_tokenizer,
                                   const text::Tokenizer& target_tokenizer, bool skip_invalid = false,
                                   std::vector<std::string>* report = nullptr);

}  // namespace seqgrad::training
