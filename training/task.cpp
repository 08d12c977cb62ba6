// The tasks (task.h): one entry each, with the readers of their data.
#include "seqgrad/training/task.h"

#include <cstdio>
#include <memory>

#include "seqgrad/core/error.h"
#include "seqgrad/core/random.h"
#include "seqgrad/training/batching.h"
#include "seqgrad/training/data.h"
#include "seqgrad/training/g2p.h"
#include "seqgrad/training/pairs.h"
#include "seqgrad/training/synthetic.h"
#include "seqgrad/training/text_data.h"

namespace seqgrad::training {
namespace {

// ---- what the tasks of pairs share: decoded, scored by WER and PER ----

std::string describe_error_rates(const EvalResult& r) {
    char text[128];
    std::snprintf(text, sizeof text, "WER %.2f%%  PER %.2f%%  (%lld words)", r.wer, r.per,
                  static_cast<long long>(r.words));
    return text;
}

// A task of pairs judged by its dev WER (the lower the better), the outputs decoded by the search
// the options ask for.
Task pairs_task(std::string name, std::string description) {
    Task t;
    t.name = std::move(name);
    t.description = std::move(description);
    t.metric = "WER";
    t.score = [](const EvalResult& r) { return r.wer; };
    t.describe = describe_error_rates;
    t.batches = [](TrainingData& data, const TrainingOptions& options, int64_t) -> std::unique_ptr<BatchSource> {
        return std::make_unique<BatchStream>(std::move(data.train), options.batches, options.seed);
    };
    t.evaluate = [](models::Model& model, const TrainingData& data, Split split, int64_t limit, int64_t,
                    const models::DecodingOptions& options, std::vector<std::vector<std::string>>* predictions) {
        const std::vector<Example>& all = split == Split::test ? data.test : data.dev;
        if (limit <= 0 || limit >= static_cast<int64_t>(all.size()))
            return evaluate(model, all, data.source_vocab, data.target_vocab, options, predictions);
        const std::vector<Example> some(all.begin(), all.begin() + limit);
        return evaluate(model, some, data.source_vocab, data.target_vocab, options, predictions);
    };
    return t;
}

// ---- text: a language model's ----

std::string describe_text_loss(const EvalResult& r) {
    char text[192];
    std::snprintf(text, sizeof text, "loss %.4f nats  perplexity %.3f  %.4f bits per %s  (%lld tokens)", r.loss,
                  r.perplexity(), r.bits_per_unit(), r.unit.empty() ? "unit" : r.unit.c_str(),
                  static_cast<long long>(r.tokens));
    return text;
}

Task text_task() {
    Task t;
    t.name = "text";
    t.description = "a language model's: a text file (\"text\") and the validation text (\"val\", else its last 10%)";
    t.reads_source = false;
    t.prepare = prepare_text;
    t.batches = [](TrainingData& data, const TrainingOptions& options,
                   int64_t longest) -> std::unique_ptr<BatchSource> {
        check(options.batches.max_sentences > 0, "text",
              "a text's batches are windows: give batch_sentences (the "
              "windows of a step, --batch-size)");
        return std::make_unique<WindowStream>(std::move(data.train_text), longest + 1, options.batches.max_sentences,
                                              options.seed);
    };
    t.metric = "loss";
    t.score = [](const EvalResult& r) { return r.loss; };
    t.describe = describe_text_loss;
    t.evaluate = [](models::Model& model, const TrainingData& data, Split, int64_t, int64_t longest,
                    const models::DecodingOptions&, std::vector<std::vector<std::string>>*) {
        return text_loss(model, data.dev_text, longest + 1, 32, data.dev_units, data.unit);
    };
    return t;
}

// ---- g2p: CMUdict ----

std::string read_g2p(const TrainingOptions& options, PairSink& sink, Problems& problems,
                     std::vector<std::string>& report) {
    const Lexicon lexicon = read_dictionary(options.dictionary);
    std::string problem, pronunciation;
    for (const Example& word : lexicon.words)
        for (const auto& phones : word.references) {
            pronunciation.clear();
            for (const std::string& phone : phones) pronunciation += (pronunciation.empty() ? "" : " ") + phone;
            if (!sink.add(word.name, pronunciation, split_by_hash(word.name), problem))
                problems.add(options.dictionary + " (" + word.name + ")", problem);
        }
    if (lexicon.skipped_lines > 0)
        report.push_back(detail::concat(options.dictionary, ": skipped ", lexicon.skipped_lines,
                                        " malformed lines; the first: ", lexicon.warnings.front()));
    return options.dictionary;
}

// ---- corpus: pairs of one's own ----

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

text::Tokenizer corpus_tokenizer(const TrainingOptions& o, bool source) {
    const std::string& kind = source ? o.src_tokens : o.tgt_tokens;
    if (kind == "char") return text::Tokenizer::characters();
    if (kind == "space") return text::Tokenizer::spaces();
    check(kind == "sentencepiece", "corpus", "unknown tokenizer \"", kind, "\" (char, space or sentencepiece)");
    const std::string& model = source ? o.src_spm_model : o.tgt_spm_model;
    if (!model.empty()) return text::Tokenizer::load_sentencepiece(model);
    text::SentencePieceOptions spm;
    spm.model_type = o.spm_type;
    spm.vocab_size = o.spm_vocab_size;
    spm.seed = o.seed;
    SideTexts texts(o, source);
    try {
        return text::Tokenizer::train_sentencepiece(std::ref(texts), spm);
    } catch (const Error& e) {
        throw Error(detail::concat("the ", source ? "source" : "target", " side of ", corpus_name(o.train_files), ": ",
                                   e.what()));
    }
}

std::string read_corpus_task(const TrainingOptions& options, PairSink& sink, Problems& problems,
                             std::vector<std::string>& report) {
    const std::string what = corpus_name(options.train_files);
    const bool carve = options.dev_files.empty();
    const auto only = [](Split split) { return [split](std::string_view) { return std::optional<Split>(split); }; };
    if (carve) {
        // Test files, if given, replace the carved test split, whose lines are then unused.
        read_corpus(options.train_files, sink, problems, [&](std::string_view source) {
            const Split split = split_by_hash(source);
            return split == Split::test && !options.test_files.empty() ? std::nullopt : std::optional(split);
        });
    } else {
        read_corpus(options.train_files, sink, problems, only(Split::train));
        read_corpus(options.dev_files, sink, problems, only(Split::dev));
    }
    if (!options.test_files.empty()) read_corpus(options.test_files, sink, problems, only(Split::test));
    report.push_back(detail::concat(carve ? "dev and test carved from " + what + " by a hash of the source side"
                                          : "train " + what + ", dev " + corpus_name(options.dev_files),
                                    !options.test_files.empty() ? ", test " + corpus_name(options.test_files)
                                                                : std::string()));
    return what;
}

// ---- the synthetic tasks ----

std::string read_synthetic(const TrainingOptions& options, PairSink& sink, Problems& problems,
                           std::vector<std::string>&) {
    SyntheticOptions synthetic = options.synthetic;
    synthetic.task = options.task;
    Generator gen(options.seed);
    const Dataset dataset = synthetic_dataset(synthetic, gen);
    const std::string what = "the " + options.task + " task";
    std::string problem;
    for (const Split split : {Split::train, Split::dev, Split::test})
        for (const Example& e : dataset.split(split_name(split))) {
            std::string target;
            for (const std::string& s : e.references.front()) target += s;
            if (!sink.add(e.name, target, split, problem)) problems.add(what, problem);
        }
    return what;
}

Task synthetic_task(const std::string& name, const std::string& description) {
    Task t = pairs_task(name, description);
    t.tokenizers = [](const TrainingOptions&) {
        return std::pair{text::Tokenizer::characters(), text::Tokenizer::characters()};
    };
    t.read = read_synthetic;
    return t;
}

std::vector<Task> make_tasks() {
    Task g2p = pairs_task("g2p", "English grapheme-to-phoneme conversion on CMUdict (the dictionary option)");
    g2p.tokenizers = [](const TrainingOptions&) {
        return std::pair{text::Tokenizer::characters(/*lowercase=*/true), text::Tokenizer::spaces()};
    };
    g2p.read = read_g2p;

    Task corpus = pairs_task("corpus", "your own pairs: one TSV file or a source and a target file (train, dev, test)");
    corpus.tokenizers = [](const TrainingOptions& o) {
        return std::pair{corpus_tokenizer(o, true), corpus_tokenizer(o, false)};
    };
    corpus.read = read_corpus_task;

    return {g2p,
            corpus,
            text_task(),
            synthetic_task("copy", "synthetic: write the source again"),
            synthetic_task("reverse", "synthetic: write the source backwards"),
            synthetic_task("sort", "synthetic: write the source's symbols sorted")};
}

}  // namespace

const std::vector<Task>& tasks() {
    static const std::vector<Task> all = make_tasks();
    return all;
}

std::vector<std::string> task_name_list() {
    std::vector<std::string> names;
    for (const Task& t : tasks()) names.push_back(t.name);
    return names;
}

std::string task_names() {
    const std::vector<std::string> names = task_name_list();
    std::string text;
    for (size_t i = 0; i < names.size(); ++i) text += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
    return text;
}

const Task& task(const std::string& name) {
    for (const Task& t : tasks())
        if (t.name == name) return t;
    throw Error("task: unknown task \"" + name + "\" (" + task_names() + ")");
}

}  // namespace seqgrad::training
