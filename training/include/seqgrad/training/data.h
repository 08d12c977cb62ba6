// The data pipeline every task's pairs go through: read strictly, tokenize each side, check it
// against the model's limits, split, count the training symbols into vocabularies, encode. A task
// of pairs (a PairsTask, below) names its tokenizers and where its pairs come from; the pipeline does
// the rest.
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
#include <utility>
#include <vector>

#include "seqgrad/models/model.h"
#include "seqgrad/text/tokenizer.h"
#include "seqgrad/text/vocabulary.h"
#include "seqgrad/training/batching.h"
#include "seqgrad/training/dataset.h"
#include "seqgrad/training/options.h"
#include "seqgrad/training/task.h"
#include "seqgrad/text/tokenizer.h"
#include "seqgrad/text/vocabulary.h"

namespace seqgrad::training {

// The longest side a file may ask for: 4096 symbols. A longer one is a bad line.
inline constexpr int64_t kMaxSymbolsPerSide = 4096;

// The data of a task of pairs: the training pairs encoded, dev and test as examples grouped by
// source (test only when asked for), judged by the evaluator the options name.
class PairData : public TaskData {
public:
    using TaskData::TaskData;
    EncodedPairs train;         // one pair per (source, reference), in file order
    std::vector<Example> dev;   // grouped by source, for evaluation
    std::vector<Example> test;  // the same (only when asked for)

    bool has_train_and_dev() const override { return !train.empty() && !dev.empty(); }
    std::string training_size() const override;
    // Batches of the training pairs (BatchStream), in the order the options' seed draws.
    std::unique_ptr<BatchSource> batches(const TrainingOptions& options, int64_t longest) override;
    // Decodes the split's first `limit` examples and scores them: WER and PER, and the evaluator's
    // metric if it is BLEU or chrF.
    EvalResult evaluate(models::Model& model, Split split, int64_t limit, int64_t longest,
                        const models::DecodingOptions& decoding,
                        std::vector<std::vector<std::string>>* predictions = nullptr) const override;

private:
    friend class PairsTask;
    std::vector<std::string> text_metrics_;  // "bleu" or "chrf", when the evaluator needs one
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

    // Reads the data with these sides' tokenizers and vocabularies (a checkpoint's), which must
    // outlive the request.
    void read_as(const text::TextSides& sides) {
        source_tokenizer = &sides.source_tokenizer;
        target_tokenizer = &sides.target_tokenizer;
        source_vocab = &sides.source_vocab;
        target_vocab = &sides.target_vocab;
    }
};

// A request for the longest source and target the config's model takes (ModelKind::max_length).
DataRequest request_for(const models::ModelConfig& config);

// Bad lines: counted, the first few kept for the message. `item` names what a good line is
// ("pair", "labelled text"), for the message.
class Problems {
public:
    explicit Problems(std::string item = "pair") : item_(std::move(item)) {}
    void add(const std::string& where, const std::string& message);
    int64_t count() const { return count_; }
    // Refuses the data of `what` (skip_invalid false) with the first problems, or adds a line to
    // `report` saying what was skipped. Nothing when there was no problem.
    void settle(bool skip_invalid, const std::string& what, std::vector<std::string>& report) const;

private:
    std::string item_;
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

// A task whose data is pairs read through the pipeline: it names the tokenizers of a new run and
// reads its pairs into the pipeline; the pipeline tokenizes, checks, splits and encodes them.
class PairsTask : public Task {
public:
    using Task::Task;
    models::Family family() const final { return models::Family::sequence_to_sequence; }
    std::string data_name(const TrainingOptions&) const override { return name(); }
    // WER, or the options' dev_metric.
    std::unique_ptr<Evaluator> evaluator(const TrainingOptions& options) const override;
    std::unique_ptr<TaskData> prepare(const TrainingOptions& options, const DataRequest& request) const final;
    // The same, typed (tests, `seqgrad eval`, the program's examples).
    PairData prepare_pairs(const TrainingOptions& options, const DataRequest& request) const;

    // The tokenizers of a new run, (source, target); a checkpoint brings its own.
    virtual std::pair<text::Tokenizer, text::Tokenizer> tokenizers(const TrainingOptions& options) const = 0;
    // Reads the task's pairs into `sink`, bad ones into `problems`, and adds lines about where they
    // came from to `report`; returns what messages call the data ("the copy task", a path).
    virtual std::string read(const TrainingOptions& options, PairSink& sink, Problems& problems,
                             std::vector<std::string>& report) const = 0;
};

// Reads a corpus's pairs (pairs.h) into `sink`, each in the split `split_of` names (none: the pair
// is not used); bad lines go to `problems`.
void read_corpus(const std::vector<std::string>& paths, PairSink& sink, Problems& problems,
                 const std::function<std::optional<Split>(std::string_view)>& split_of);

// The data of the options' task, which must read pairs (an Error names it otherwise).
PairData prepare_pairs(const TrainingOptions& options, const DataRequest& request = {});

// A file of pairs read as evaluation examples (grouped by source) with the given tokenizers,
// e.g. `seqgrad eval --test F`. Bad lines are refused unless skip_invalid.
std::vector<Example> read_examples(const std::vector<std::string>& paths, const text::Tokenizer& source_tokenizer,
                                   const text::Tokenizer& target_tokenizer, bool skip_invalid = false,
                                   std::vector<std::string>* report = nullptr);

}  // namespace seqgrad::training
