// Pairs from files, read strictly, and the data pipeline every task goes through: tokenize each
// side, split, count the training symbols into vocabularies, encode (corpus.h).
#include "seqgrad/training/corpus.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <unordered_map>

#include "seqgrad/core/error.h"
#include "seqgrad/models/model.h"
#include "seqgrad/training/synthetic.h"
#include "seqgrad/training/text.h"

namespace seqgrad::training {

// ---- LineReader ----

LineReader::LineReader(const std::string& path) : path_(path) {
    errno = 0;
    gzFile file = gzopen(path.c_str(), "rb");  // reads plain files as they are
    if (file == nullptr) throw Error(path + ": cannot open: " + (errno != 0 ? std::strerror(errno) : "out of memory"));
    gzbuffer(file, 1 << 17);
    file_ = file;
}

LineReader::~LineReader() {
    if (file_) gzclose(static_cast<gzFile>(file_));
}

bool LineReader::fill() {
    if (eof_) return false;
    buffer_.erase(0, at_);
    at_ = 0;
    const size_t old_size = buffer_.size();
    buffer_.resize(old_size + (1 << 16));
    const int got = gzread(static_cast<gzFile>(file_), buffer_.data() + old_size, 1 << 16);
    int code = Z_OK;
    const char* message = gzerror(static_cast<gzFile>(file_), &code);
    // A gzip stream cut short reads to its end and then reports Z_BUF_ERROR.
    if (got < 0 || (code != Z_OK && code != Z_STREAM_END)) {
        throw Error(detail::concat(path_, ": cannot read",
                                   code == Z_ERRNO ? std::string(": ") + std::strerror(errno)
                                                   : std::string(" (") + message + ")",
                                   " after line ", line_number_));
    }
    buffer_.resize(old_size + static_cast<size_t>(got));
    if (got == 0) eof_ = true;
    return got > 0;
}

bool LineReader::next(std::string& line) {
    while (true) {
        const size_t end = buffer_.find('\n', at_);
        check(end == std::string::npos || end - at_ <= kMaxLineBytes, "corpus", path_, ":", line_number_ + 1,
              ": a line longer than ", kMaxLineBytes, " bytes (1 MiB)");
        if (end != std::string::npos) {
            line.assign(buffer_, at_, end - at_);
            at_ = end + 1;
            break;
        }
        check(buffer_.size() - at_ <= kMaxLineBytes, "corpus", path_, ":", line_number_ + 1, ": a line longer than ",
              kMaxLineBytes, " bytes (1 MiB)");
        if (!fill()) {
            if (at_ >= buffer_.size()) return false;  // no last line without its '\n'
            line.assign(buffer_, at_, std::string::npos);
            at_ = buffer_.size();
            break;
        }
    }
    if (!line.empty() && line.back() == '\r') line.pop_back();
    ++line_number_;
    return true;
}

// ---- PairReader ----

std::string corpus_name(const std::vector<std::string>& paths) {
    std::string name;
    for (size_t i = 0; i < paths.size(); ++i) name += (i ? " + " : "") + paths[i];
    return name;
}

PairReader::PairReader(const std::vector<std::string>& paths) {
    check(paths.size() == 1 || paths.size() == 2, "corpus", "expected one TSV file or a source and a target file, got ",
          paths.size(), " files");
    first_ = std::make_unique<LineReader>(paths[0]);
    if (paths.size() == 2) second_ = std::make_unique<LineReader>(paths[1]);
}

namespace {

// Why a side of a pair cannot be used, or "" if it can.
std::string side_problem(std::string_view text, const char* side) {
    if (text.find_first_not_of(" \t") == std::string_view::npos) return std::string("the ") + side + " is empty";
    if (!is_utf8(text)) return std::string("the ") + side + " \"" + printable(text) + "\" is not valid UTF-8";
    return "";
}

}  // namespace

bool PairReader::next(std::string& source, std::string& target, std::string& problem) {
    problem.clear();
    const bool got_first = first_->next(line_);
    if (second_) {
        const bool got_second = second_->next(other_);
        if (got_first != got_second) {
            // Count the rest of the longer file, so that the message names both lengths.
            LineReader& longer = got_first ? *first_ : *second_;
            std::string rest;
            while (longer.next(rest)) {}
            throw Error(detail::concat("corpus: the aligned files have different numbers of lines: ", first_->path(),
                                       " has ", first_->line_number(), ", ", second_->path(), " has ",
                                       second_->line_number()));
        }
        if (!got_first) return false;
        source.swap(line_);
        target.swap(other_);
    } else {
        if (!got_first) return false;
        const size_t tab = line_.find('\t');
        if (tab == std::string::npos) {
            problem = line_.empty() ? "an empty line" : "no tab between the source and the target";
            return true;
        }
        if (line_.find('\t', tab + 1) != std::string::npos) {
            problem = "more than one tab (expected: source, a tab, target)";
            return true;
        }
        source.assign(line_, 0, tab);
        target.assign(line_, tab + 1, std::string::npos);
    }
    problem = side_problem(source, "source");
    if (problem.empty()) problem = side_problem(target, "target");
    return true;
}

std::string PairReader::where() const {
    if (!second_) return detail::concat(first_->path(), ":", first_->line_number());
    return detail::concat(first_->path(), ", ", second_->path(), ": line ", first_->line_number());
}

int64_t PairReader::line() const { return first_->line_number(); }

// ---- the pipeline ----

namespace {

using models::kUnk;

struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
template <typename T>
using StringMap = std::unordered_map<std::string, T, StringHash, std::equal_to<>>;

constexpr size_t kProblemsShown = 5;

// Bad lines: counted, the first few kept for the message.
struct Problems {
    std::vector<std::string> first;
    int64_t count = 0;
    void add(const std::string& where, const std::string& message) {
        if (first.size() < kProblemsShown) first.push_back(where + ": " + message);
        ++count;
    }
    // Refuses the data (skip_invalid false) or reports what was skipped.
    void settle(bool skip_invalid, const std::string& what, std::vector<std::string>& report) const {
        if (count == 0) return;
        std::string shown;
        for (const std::string& p : first) shown += "\n  " + p;
        if (!skip_invalid)
            throw Error(detail::concat(what, ": ", count,
                                       count == 1 ? " line is not a valid pair" : " lines are not valid pairs",
                                       "; the first:", shown,
                                       "\n(fix them, or pass --skip-invalid to train on the rest)"));
        report.push_back(detail::concat("skipped ", count, count == 1 ? " invalid line" : " invalid lines", " of ",
                                        what, "; the first:", shown));
    }
};

// Symbols with their counts and provisional ids, in order of first appearance.
class SymbolCounter {
public:
    static constexpr int32_t kUnknown = -1;  // the data's own <unk>: no count, always <unk>

    int32_t add(std::string_view symbol) {
        if (symbol == Vocabulary::kSpecials[kUnk]) return kUnknown;
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
    std::vector<int32_t> mapping(const Vocabulary& vocab) const {
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
class DataBuilder {
public:
    DataBuilder(const Tokenizer& source_tokenizer, const Tokenizer& target_tokenizer, const DataRequest& request)
        : source_tokenizer_(source_tokenizer), target_tokenizer_(target_tokenizer), request_(request) {}

    // Adds a pair; false (with `problem` set) for a pair that cannot be used.
    bool add(std::string_view source, std::string_view target, Split split, std::string& problem) {
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
    TrainingData finish(const TrainingOptions& options) {
        TrainingData data;
        data.source_tokenizer = source_tokenizer_;
        data.target_tokenizer = target_tokenizer_;
        if (request_.source_vocab && request_.target_vocab) {
            data.source_vocab = *request_.source_vocab;
            data.target_vocab = *request_.target_vocab;
            // Training on with vocabularies of other data would give its symbols other ids.
            check(!request_.train ||
                      (data.source_vocab ==
                           Vocabulary::from_counts(source_counter_.counts(), options.min_count, options.max_vocab) &&
                       data.target_vocab ==
                           Vocabulary::from_counts(target_counter_.counts(), options.min_count, options.max_vocab)),
                  "data", "the training data has changed: its vocabularies differ from the checkpoint's");
        } else if (request_.train) {
            data.source_vocab = Vocabulary::from_counts(source_counter_.counts(), options.min_count, options.max_vocab);
            data.target_vocab = Vocabulary::from_counts(target_counter_.counts(), options.min_count, options.max_vocab);
        }
        if (request_.train) data.train = remap(data.source_vocab, data.target_vocab);
        data.dev = std::move(dev_);
        data.test = std::move(test_);
        return data;
    }

    // Tokens of the training pairs and of dev that the vocabularies map to <unk>.
    std::string unknown_report(const TrainingData& data) const {
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
                if (Vocabulary::is_special(s) && s != Vocabulary::kSpecials[kUnk]) {
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
    EncodedPairs remap(const Vocabulary& source_vocab, const Vocabulary& target_vocab) {
        train_.relabel(source_counter_.mapping(source_vocab), target_counter_.mapping(target_vocab),
                       static_cast<int32_t>(kUnk));
        return std::move(train_);
    }

    const Tokenizer& source_tokenizer_;
    const Tokenizer& target_tokenizer_;
    const DataRequest& request_;
    std::vector<std::string> source_symbols_, target_symbols_;
    std::vector<int32_t> ids_;
    SymbolCounter source_counter_, target_counter_;
    EncodedPairs train_;  // provisional ids
    std::vector<Example> dev_, test_;
    StringMap<size_t> dev_index_, test_index_;
    int64_t pairs_[3] = {0, 0, 0};
};

// Reads a corpus's pairs into `builder`, each in the split `split_of` names (none: the pair is
// not used); bad lines go to `problems`.
void read_corpus(const std::vector<std::string>& paths, DataBuilder& builder, Problems& problems,
                 const std::function<std::optional<Split>(std::string_view)>& split_of) {
    PairReader reader(paths);
    std::string source, target, problem;
    while (reader.next(source, target, problem)) {
        if (problem.empty()) {
            const std::optional<Split> split = split_of(source);
            if (split) builder.add(source, target, *split, problem);
        }
        if (!problem.empty()) problems.add(reader.where(), problem);
    }
}

// The source or target side of a corpus's training pairs, one text at a time (for SentencePiece).
class SideTexts {
public:
    SideTexts(const TrainingOptions& options, bool source) : options_(options), source_(source) {
        open(options.train_files);
    }
    bool operator()(std::string& text) {
        std::string source, target, problem;
        while (reader_->next(source, target, problem)) {
            if (!problem.empty()) continue;  // reported by the pipeline's own pass
            if (carve_ && split_by_hash(source) != Split::train) continue;
            text = source_ ? std::move(source) : std::move(target);
            return true;
        }
        return false;
    }

private:
    void open(const std::vector<std::string>& paths) {
        reader_ = std::make_unique<PairReader>(paths);
        carve_ = options_.dev_files.empty();
    }
    const TrainingOptions& options_;
    bool source_;
    bool carve_ = false;
    std::unique_ptr<PairReader> reader_;
};

Tokenizer corpus_tokenizer(const TrainingOptions& o, bool source) {
    const std::string& kind = source ? o.src_tokens : o.tgt_tokens;
    if (kind == "char") return Tokenizer::characters();
    if (kind == "space") return Tokenizer::spaces();
    check(kind == "sentencepiece", "corpus", "unknown tokenizer \"", kind, "\" (char, space or sentencepiece)");
    const std::string& model = source ? o.src_spm_model : o.tgt_spm_model;
    if (!model.empty()) return Tokenizer::load_sentencepiece(model);
    SentencePieceOptions spm;
    spm.model_type = o.spm_type;
    spm.vocab_size = o.spm_vocab_size;
    spm.seed = o.seed;
    SideTexts texts(o, source);
    try {
        return Tokenizer::train_sentencepiece(std::ref(texts), spm);
    } catch (const Error& e) {
        throw Error(detail::concat("the ", source ? "source" : "target", " side of ", corpus_name(o.train_files), ": ",
                                   e.what()));
    }
}

std::string count_text(int64_t n, const char* one, const char* many) {
    return detail::concat(n, " ", n == 1 ? one : many);
}

}  // namespace

std::pair<Tokenizer, Tokenizer> make_tokenizers(const TrainingOptions& options) {
    if (options.task == "g2p") return {Tokenizer::characters(/*lowercase=*/true), Tokenizer::spaces()};
    if (options.task == "corpus") return {corpus_tokenizer(options, true), corpus_tokenizer(options, false)};
    return {Tokenizer::characters(), Tokenizer::characters()};  // the synthetic tasks
}

TrainingData prepare_data(const TrainingOptions& options, const DataRequest& request) {
    std::pair<Tokenizer, Tokenizer> made;
    if (!request.source_tokenizer || !request.target_tokenizer) made = make_tokenizers(options);
    const Tokenizer& source_tokenizer = request.source_tokenizer ? *request.source_tokenizer : made.first;
    const Tokenizer& target_tokenizer = request.target_tokenizer ? *request.target_tokenizer : made.second;
    DataBuilder builder(source_tokenizer, target_tokenizer, request);
    std::vector<std::string> report;
    Problems problems;
    std::string what;
    if (options.task == "g2p") {
        Lexicon lexicon = read_dictionary(options.dictionary);
        what = options.dictionary;
        std::string problem, pronunciation;
        for (const Example& word : lexicon.words)
            for (const auto& phones : word.references) {
                pronunciation.clear();
                for (const std::string& phone : phones) pronunciation += (pronunciation.empty() ? "" : " ") + phone;
                if (!builder.add(word.name, pronunciation, split_by_hash(word.name), problem))
                    problems.add(options.dictionary + " (" + word.name + ")", problem);
            }
        if (lexicon.skipped_lines > 0)
            report.push_back(detail::concat(options.dictionary, ": skipped ", lexicon.skipped_lines,
                                            " malformed lines; the first: ", lexicon.warnings.front()));
    } else if (options.task == "corpus") {
        what = corpus_name(options.train_files);
        const bool carve = options.dev_files.empty();
        const auto only = [](Split split) { return [split](std::string_view) { return std::optional<Split>(split); }; };
        if (carve) {
            // Test files, if given, replace the carved test split, whose lines are then unused.
            read_corpus(options.train_files, builder, problems, [&](std::string_view source) {
                const Split split = split_by_hash(source);
                return split == Split::test && !options.test_files.empty() ? std::nullopt : std::optional(split);
            });
        } else {
            read_corpus(options.train_files, builder, problems, only(Split::train));
            read_corpus(options.dev_files, builder, problems, only(Split::dev));
        }
        if (!options.test_files.empty()) read_corpus(options.test_files, builder, problems, only(Split::test));
        report.push_back(detail::concat(carve ? "dev and test carved from " + what + " by a hash of the source side"
                                              : "train " + what + ", dev " + corpus_name(options.dev_files),
                                        !options.test_files.empty() ? ", test " + corpus_name(options.test_files)
                                                                    : std::string()));
    } else {
        SyntheticOptions synthetic = options.synthetic;
        synthetic.task = options.task;
        Generator gen(options.seed);
        const Dataset dataset = synthetic_dataset(synthetic, gen);
        what = "the " + options.task + " task";
        std::string problem;
        for (const Split split : {Split::train, Split::dev, Split::test})
            for (const Example& e : dataset.split(split_name(split))) {
                std::string target;
                for (const std::string& s : e.references.front()) target += s;
                if (!builder.add(e.name, target, split, problem)) problems.add(what, problem);
            }
    }
    problems.settle(options.skip_invalid, what, report);
    TrainingData data = builder.finish(options);
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

std::vector<Example> read_examples(const std::vector<std::string>& paths, const Tokenizer& source_tokenizer,
                                   const Tokenizer& target_tokenizer, bool skip_invalid,
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
    const Vocabulary none;
    request.source_vocab = request.target_vocab = &none;
    TrainingOptions options;
    return builder.finish(options).test;
}

}  // namespace seqgrad::training
