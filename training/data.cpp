// The data pipeline every task's pairs go through (data.h).
#include "seqgrad/training/data.h"

#include <algorithm>
#include <unordered_map>

#include "seqgrad/core/error.h"
#include "seqgrad/models/model.h"
#include "seqgrad/models/registry.h"
#include "seqgrad/training/pairs.h"

namespace seqgrad::training {

namespace {

constexpr size_t kProblemsShown = 5;

}  // namespace

void Problems::add(const std::string& where, const std::string& message) {
    if (first_.size() < kProblemsShown) first_.push_back(where + ": " + message);
    ++count_;
}

void Problems::settle(bool skip_invalid, const std::string& what, std::vector<std::string>& report) const {
    if (count_ == 0) return;
    std::string shown;
    for (const std::string& p : first_) shown += "\n  " + p;
    if (!skip_invalid)
        throw Error(detail::concat(what, ": ", count_, count_ == 1 ? " line is not a valid " : " lines are not valid ",
                                   item_, count_ == 1 ? "" : "s", "; the first:", shown,
                                   "\n(fix them, or pass --skip-invalid to train on the rest)"));
    report.push_back(detail::concat("skipped ", count_, count_ == 1 ? " invalid line" : " invalid lines", " of ", what,
                                    "; the first:", shown));
}

namespace {

using models::kUnk;

struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
template <typename T>
using StringMap = std::unordered_map<std::string, T, StringHash, std::equal_to<>>;

// Symbols with their counts and provisional ids, in order of first appearance.
class SymbolCounter {
public:
    static constexpr int32_t kUnknown = -1;  // the data's own <unk>: no count, always <unk>

    int32_t add(std::string_view symbol) {
        if (symbol == text::Vocabulary::kSpecials[kUnk]) return kUnknown;
        const auto found = ids_.find(symbol);
        if (found != ids_.end()) {
            ++counts_[static_cast<size_t>(found->second)];
            return found->second;
        }
        const auto id = static_cast<int32_t>(counts_.size());
        check(id < INT32_MAX, "corpus", "more than 2^31 distinct symbols");
        ids_.emplace(std::string(symbol), id);
        counts_.push_back(1);
        return id;
    }
    std::vector<std::pair<std::string, int64_t>> counts() const {
        std::vector<std::pair<std::string, int64_t>> all(counts_.size());
        for (const auto& [symbol, id] : ids_) all[static_cast<size_t>(id)] = {symbol, counts_[static_cast<size_t>(id)]};
        return all;
    }
    // Provisional id -> the vocabulary's id (kUnk for the symbols it left out).
    std::vector<int32_t> mapping(const text::Vocabulary& vocab) const {
        std::vector<int32_t> map(counts_.size(), static_cast<int32_t>(kUnk));
        for (const auto& [symbol, id] : ids_) map[static_cast<size_t>(id)] = static_cast<int32_t>(vocab.id(symbol));
        return map;
    }

private:
    StringMap<int32_t> ids_;
    std::vector<int64_t> counts_;
};

// Tokenizes pairs and sorts them into the splits: training pairs as provisional ids (counted),
// dev and test pairs as examples grouped by source.
class DataBuilder : public PairSink {
public:
    DataBuilder(const text::Tokenizer& source_tokenizer, const text::Tokenizer& target_tokenizer,
                const DataRequest& request)
        : source_tokenizer_(source_tokenizer), target_tokenizer_(target_tokenizer), request_(request) {}

    bool add(std::string_view source, std::string_view target, Split split, std::string& problem) override {
        if (split == Split::train && !request_.train) return true;
        if (split == Split::test && !request_.test) return true;
        if (!tokenize(source, target, problem)) return false;
        ++pairs_[static_cast<size_t>(split)];
        if (split == Split::train) {
            ids_.clear();
            for (const std::string& s : source_symbols_) ids_.push_back(source_counter_.add(s));
            const size_t source_length = ids_.size();
            for (const std::string& s : target_symbols_) ids_.push_back(target_counter_.add(s));
            train_.add(std::span<const int32_t>(ids_.data(), source_length),
                       std::span<const int32_t>(ids_.data() + source_length, ids_.size() - source_length),
                       train_.size());
            return true;
        }
        std::vector<Example>& examples = split == Split::dev ? dev_ : test_;
        StringMap<size_t>& index = split == Split::dev ? dev_index_ : test_index_;
        const auto [it, is_new] = index.try_emplace(std::string(source), examples.size());
        if (is_new) examples.push_back(Example{std::string(source), source_symbols_, {}, {}});
        Example& e = examples[it->second];
        if (std::find(e.references.begin(), e.references.end(), target_symbols_) == e.references.end()) {
            e.references.push_back(target_symbols_);
            e.reference_texts.emplace_back(target);
        }
        return true;
    }

    int64_t pairs(Split split) const { return pairs_[static_cast<size_t>(split)]; }

    // The vocabularies (given, or counted from training) and the training pairs as their ids.
    PairData finish(const TrainingOptions& options, std::unique_ptr<Evaluator> evaluator) {
        PairData data(std::move(evaluator));
        data.source_tokenizer = source_tokenizer_;
        data.target_tokenizer = target_tokenizer_;
        if (request_.source_vocab && request_.target_vocab) {
            data.source_vocab = *request_.source_vocab;
            data.target_vocab = *request_.target_vocab;
            // Training on with vocabularies of other data would give its symbols other ids.
            check(!request_.train ||
                      (data.source_vocab == text::Vocabulary::from_counts(source_counter_.counts(), options.min_count,
                                                                          options.max_vocab) &&
                       data.target_vocab == text::Vocabulary::from_counts(target_counter_.counts(), options.min_count,
                                                                          options.max_vocab)),
                  "data", "the training data has changed: its vocabularies differ from the checkpoint's");
        } else if (request_.train) {
            data.source_vocab =
                text::Vocabulary::from_counts(source_counter_.counts(), options.min_count, options.max_vocab);
            data.target_vocab =
                text::Vocabulary::from_counts(target_counter_.counts(), options.min_count, options.max_vocab);
        }
        if (request_.train) data.train = remap(data.source_vocab, data.target_vocab);
        data.dev = std::move(dev_);
        data.test = std::move(test_);
        return data;
    }

    // Tokens of the training pairs and of dev that the vocabularies map to <unk>.
    std::string unknown_report(const PairData& data) const {
        int64_t train_unknown = 0, train_tokens = 0, dev_unknown = 0, dev_tokens = 0;
        for (int64_t i = 0; i < data.train.size(); ++i)
            for (const auto side : {data.train.source(i), data.train.target(i)}) {
                train_tokens += static_cast<int64_t>(side.size());
                train_unknown += std::count(side.begin(), side.end(), static_cast<int32_t>(kUnk));
            }
        for (const Example& e : data.dev) {
            for (const std::string& s : e.source) dev_unknown += data.source_vocab.contains(s) ? 0 : 1;
            dev_tokens += static_cast<int64_t>(e.source.size());
            for (const auto& reference : e.references) {
                for (const std::string& s : reference) dev_unknown += data.target_vocab.contains(s) ? 0 : 1;
                dev_tokens += static_cast<int64_t>(reference.size());
            }
        }
        const auto percent = [](int64_t part, int64_t whole) {
            return whole > 0 ? 100.0 * static_cast<double>(part) / static_cast<double>(whole) : 0.0;
        };
        char text[256];
        std::snprintf(text, sizeof text,
                      "vocabularies: %lld source and %lld target symbols; unknown tokens: %lld of %lld in train "
                      "(%.2f%%), %lld of %lld in dev (%.2f%%)",
                      static_cast<long long>(data.source_vocab.size()),
                      static_cast<long long>(data.target_vocab.size()), static_cast<long long>(train_unknown),
                      static_cast<long long>(train_tokens), percent(train_unknown, train_tokens),
                      static_cast<long long>(dev_unknown), static_cast<long long>(dev_tokens),
                      percent(dev_unknown, dev_tokens));
        return text;
    }

private:
    bool tokenize(std::string_view source, std::string_view target, std::string& problem) {
        source_symbols_ = source_tokenizer_.tokenize(source);
        target_symbols_ = target_tokenizer_.tokenize(target);
        for (const auto* symbols : {&source_symbols_, &target_symbols_}) {
            const char* side = symbols == &source_symbols_ ? "source" : "target";
            if (symbols->empty()) {
                problem = std::string("the ") + side + " has no symbols";
                return false;
            }
            for (const std::string& s : *symbols)
                if (text::Vocabulary::is_special(s) && s != text::Vocabulary::kSpecials[kUnk]) {
                    problem = std::string("the ") + side + " uses the special token " + s + " as a symbol";
                    return false;
                }
        }
        // The model's limit, and in any case kMaxSymbolsPerSide.
        const auto too_long =
            [&](const std::vector<std::string>& symbols, int64_t extra, int64_t model_limit, const char* side) {
            const bool model = model_limit > 0 && model_limit < kMaxSymbolsPerSide;
            const int64_t limit = model ? model_limit : kMaxSymbolsPerSide;
            if (static_cast<int64_t>(symbols.size()) + extra <= limit) return false;
            problem = detail::concat("the ", side, " has ", symbols.size(), " symbols", extra ? " (and </s>)" : "",
                                     model ? "; the model takes at most " : "; a side may have at most ",
                                     limit - extra);
            return true;
        };
        return !too_long(source_symbols_, 0, request_.max_source_length, "source") &&
               !too_long(target_symbols_, 1, request_.max_target_length, "target");
    }

    // The training pairs with the vocabularies' ids for the provisional ones, relabelled in place
    // (a second copy would double the largest allocation of a big corpus).
    EncodedPairs remap(const text::Vocabulary& source_vocab, const text::Vocabulary& target_vocab) {
        train_.relabel(source_counter_.mapping(source_vocab), target_counter_.mapping(target_vocab),
                       static_cast<int32_t>(kUnk));
        return std::move(train_);
    }

    const text::Tokenizer& source_tokenizer_;
    const text::Tokenizer& target_tokenizer_;
    const DataRequest& request_;
    std::vector<std::string> source_symbols_, target_symbols_;
    std::vector<int32_t> ids_;
    SymbolCounter source_counter_, target_counter_;
    EncodedPairs train_;  // provisional ids
    std::vector<Example> dev_, test_;
    StringMap<size_t> dev_index_, test_index_;
    int64_t pairs_[3] = {0, 0, 0};
};

std::string count_text(int64_t n, const char* one, const char* many) {
    return detail::concat(n, " ", n == 1 ? one : many);
}

}  // namespace

void read_corpus(const std::vector<std::string>& paths, PairSink& sink, Problems& problems,
                 const std::function<std::optional<Split>(std::string_view)>& split_of) {
    PairReader reader(paths);
    std::string source, target, problem;
    while (reader.next(source, target, problem)) {
        if (problem.empty()) {
            const std::optional<Split> split = split_of(source);
            if (split) sink.add(source, target, *split, problem);
        }
        if (!problem.empty()) problems.add(reader.where(), problem);
    }
}

std::string PairData::training_size() const { return detail::concat(train.size(), "/", train.tokens()); }

std::unique_ptr<BatchSource> PairData::batches(const TrainingOptions& options, int64_t) {
    return std::make_unique<BatchStream>(std::move(train), options.batches, options.seed);
}

EvalResult PairData::evaluate(models::Model& model, Split split, int64_t limit, int64_t,
                              const models::DecodingOptions& decoding,
                              std::vector<std::vector<std::string>>* predictions) const {
    const std::vector<Example>& all = split == Split::test ? test : dev;
    const bool some = limit > 0 && limit < static_cast<int64_t>(all.size());
    const std::vector<Example> first = some ? std::vector<Example>(all.begin(), all.begin() + limit)
                                            : std::vector<Example>();
    const std::vector<Example>& examples = some ? first : all;
    std::vector<std::vector<std::string>> predicted;
    if (!predictions && !text_metrics_.empty()) predictions = &predicted;
    PairScores scores = training::evaluate(model, examples, source_vocab, target_vocab, decoding, predictions);
    if (!text_metrics_.empty()) score_texts(scores, text_metrics_, *predictions, examples, target_tokenizer);
    return scores;
}

std::unique_ptr<Evaluator> PairsTask::evaluator(const TrainingOptions& options) const {
    return pair_evaluator(options.dev_metric == "auto" ? "wer" : options.dev_metric);
}

std::unique_ptr<TaskData> PairsTask::prepare(const TrainingOptions& options, const DataRequest& request) const {
    return std::make_unique<PairData>(prepare_pairs(options, request));
}

PairData PairsTask::prepare_pairs(const TrainingOptions& options, const DataRequest& request) const {
    std::pair<text::Tokenizer, text::Tokenizer> made;
    if (!request.source_tokenizer || !request.target_tokenizer) made = tokenizers(options);
    const text::Tokenizer& source_tokenizer = request.source_tokenizer ? *request.source_tokenizer : made.first;
    const text::Tokenizer& target_tokenizer = request.target_tokenizer ? *request.target_tokenizer : made.second;
    DataBuilder builder(source_tokenizer, target_tokenizer, request);
    std::vector<std::string> report;
    Problems problems;
    const std::string what = read(options, builder, problems, report);
    problems.settle(options.skip_invalid, what, report);
    PairData data = builder.finish(options, evaluator(options));
    if (options.dev_metric == "bleu" || options.dev_metric == "chrf") data.text_metrics_ = {options.dev_metric};
    report.insert(report.begin(),
                  detail::concat(what, ": ", count_text(builder.pairs(Split::train), "training pair", "training pairs"),
                                 ", ", count_text(static_cast<int64_t>(data.dev.size()), "dev source", "dev sources"),
                                 request.test ? ", " + count_text(static_cast<int64_t>(data.test.size()), "test source",
                                                                  "test sources")
                                              : std::string(),
                                 "; tokens: source ", source_tokenizer.describe(), ", target ",
                                 target_tokenizer.describe()));
    if (request.train) report.push_back(builder.unknown_report(data));
    data.report = std::move(report);
    return data;
}

PairData prepare_pairs(const TrainingOptions& options, const DataRequest& request) {
    const Task& task = training::task(options.task);
    std::unique_ptr<TaskData> data = task.prepare(options, request);
    auto* pairs = dynamic_cast<PairData*>(data.get());
    check(pairs != nullptr, "data", "the task \"", task.name(), "\" does not read pairs");
    return std::move(*pairs);
}

std::vector<Example> read_examples(const std::vector<std::string>& paths, const text::Tokenizer& source_tokenizer,
                                   const text::Tokenizer& target_tokenizer, bool skip_invalid,
                                   std::vector<std::string>* report) {
    DataRequest request;
    request.train = false;
    request.test = true;
    DataBuilder builder(source_tokenizer, target_tokenizer, request);
    Problems problems;
    read_corpus(paths, builder, problems, [](std::string_view) { return std::optional(Split::test); });
    std::vector<std::string> skipped;
    problems.settle(skip_invalid, corpus_name(paths), skipped);
    if (report) report->insert(report->end(), skipped.begin(), skipped.end());
    const text::Vocabulary none;
    request.source_vocab = request.target_vocab = &none;
    TrainingOptions options;
    return builder.finish(options, pair_evaluator("wer")).test;
}

DataRequest request_for(const models::ModelConfig& config) {
    DataRequest request;
    request.max_source_length = request.max_target_length = models::model_kind(config.model).max_length(config);
    return request;
}

}  // namespace seqgrad::training
