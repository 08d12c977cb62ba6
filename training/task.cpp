// The tasks (task.h): one entry each, with the readers of their data.
#include "seqgrad/training/task.h"

#include <filesystem>
#include <memory>

#include "seqgrad/core/error.h"
#include "seqgrad/core/random.h"
#include "seqgrad/training/batching.h"
#include "seqgrad/training/data.h"
#include "seqgrad/training/encoder_data.h"
#include "seqgrad/training/g2p.h"
#include "seqgrad/training/pairs.h"
#include "seqgrad/training/synthetic.h"
#include "seqgrad/training/text_data.h"

namespace seqgrad::training {
namespace {

// ---- text: a language model's ----

class TextTask : public Task {
public:
    TextTask()
        : Task("text",
               "a language model's: a text file (\"text\") and the validation text (\"val\", else its last 10%)") {}
    models::Family family() const override { return models::Family::language_model; }
    void check(const TrainingOptions& o) const override {
        seqgrad::check(!o.text.empty(), "training options", "a text task needs \"text\" (a file)");
        seqgrad::check(o.dev_metric == "auto", "training options", "a text is judged by its loss: \"dev_metric\" ",
                       o.dev_metric, " is for pairs");
    }
    std::string data_name(const TrainingOptions& o) const override { return o.text; }
    std::string short_name(const TrainingOptions& o) const override { return std::filesystem::path(o.text).stem(); }
    std::unique_ptr<Evaluator> evaluator(const TrainingOptions&) const override { return text_evaluator(); }
    std::unique_ptr<TaskData> prepare(const TrainingOptions& o, const DataRequest& request) const override {
        return std::make_unique<TextData>(prepare_text(o, request));
    }
};

// ---- an encoder's: mlm and classify ----

class MlmTask : public Task {
public:
    MlmTask()
        : Task("mlm",
               "an encoder's masked language model: a text file (\"text\") and the validation text (\"val\", else "
               "its last 10%)") {}
    models::Family family() const override { return models::Family::encoder; }
    void check(const TrainingOptions& o) const override {
        seqgrad::check(!o.text.empty(), "training options", "the mlm task needs \"text\" (a file)");
        seqgrad::check(o.dev_metric == "auto", "training options",
                       "a masked language model is judged by its masked loss: \"dev_metric\" ", o.dev_metric,
                       " is for pairs");
        seqgrad::check(o.init_from.empty(), "training options",
                       "\"init_from\" starts a classifier from a masked language model; the mlm task starts anew");
    }
    std::string data_name(const TrainingOptions& o) const override { return o.text; }
    std::string short_name(const TrainingOptions& o) const override {
        return std::filesystem::path(o.text).stem().string() + "-mlm";
    }
    std::unique_ptr<Evaluator> evaluator(const TrainingOptions&) const override { return masked_evaluator(); }
    std::unique_ptr<TaskData> prepare(const TrainingOptions& o, const DataRequest& request) const override {
        return std::make_unique<MaskedTextData>(prepare_masked_text(o, request));
    }
};

class ClassifyTask : public Task {
public:
    ClassifyTask()
        : Task("classify",
               "an encoder's: labelled texts or pairs of texts, `text TAB label` or `a TAB b TAB label` (train, dev, "
               "test)") {}
    models::Family family() const override { return models::Family::encoder; }
    void check(const TrainingOptions& o) const override {
        seqgrad::check(o.train_files.size() == 1, "training options",
                       "the classify task needs \"train\": one file of labelled texts, got ", o.train_files.size(),
                       " files");
        seqgrad::check(o.dev_metric == "auto", "training options",
                       "a classifier is judged by its accuracy: \"dev_metric\" ", o.dev_metric, " is for pairs");
    }
    std::string data_name(const TrainingOptions& o) const override { return o.train_files.front(); }
    std::string short_name(const TrainingOptions& o) const override {
        return std::filesystem::path(o.train_files.front()).stem();
    }
    std::unique_ptr<Evaluator> evaluator(const TrainingOptions&) const override { return class_evaluator(); }
    std::unique_ptr<TaskData> prepare(const TrainingOptions& o, const DataRequest& request) const override {
        return std::make_unique<ClassifyData>(prepare_classify(o, request));
    }
};

// ---- g2p: CMUdict ----

class G2pTask : public PairsTask {
public:
    G2pTask() : PairsTask("g2p", "English grapheme-to-phoneme conversion on CMUdict (the dictionary option)") {}
    std::pair<text::Tokenizer, text::Tokenizer> tokenizers(const TrainingOptions&) const override {
        return {text::Tokenizer::characters(/*lowercase=*/true), text::Tokenizer::spaces()};
    }
    std::string read(const TrainingOptions& options, PairSink& sink, Problems& problems,
                     std::vector<std::string>& report) const override;
};

std::string G2pTask::read(const TrainingOptions& options, PairSink& sink, Problems& problems,
                          std::vector<std::string>& report) const {
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

class CorpusTask : public PairsTask {
public:
    CorpusTask()
        : PairsTask("corpus", "your own pairs: one TSV file or a source and a target file (train, dev, test)") {}
    void check(const TrainingOptions& o) const override {
        seqgrad::check(!o.train_files.empty() && o.train_files.size() <= 2, "training options",
                       "a corpus needs \"train\": one TSV file or a source and a target file, got ",
                       o.train_files.size(), " files");
    }
    std::string data_name(const TrainingOptions& o) const override { return corpus_name(o.train_files); }
    std::string short_name(const TrainingOptions& o) const override {
        return std::filesystem::path(o.train_files.front()).stem();
    }
    std::pair<text::Tokenizer, text::Tokenizer> tokenizers(const TrainingOptions& o) const override {
        return {corpus_tokenizer(o, true), corpus_tokenizer(o, false)};
    }
    std::string read(const TrainingOptions& options, PairSink& sink, Problems& problems,
                     std::vector<std::string>& report) const override;
};

std::string CorpusTask::read(const TrainingOptions& options, PairSink& sink, Problems& problems,
                             std::vector<std::string>& report) const {
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

class SyntheticTask : public PairsTask {
public:
    using PairsTask::PairsTask;
    std::pair<text::Tokenizer, text::Tokenizer> tokenizers(const TrainingOptions&) const override {
        return {text::Tokenizer::characters(), text::Tokenizer::characters()};
    }
    std::string read(const TrainingOptions& options, PairSink& sink, Problems& problems,
                     std::vector<std::string>&) const override {
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
};

}  // namespace

Tensor TaskData::loss(models::Model& model, const Batch& batch, float label_smoothing) const {
    return model.loss(batch.src, batch.tgt, label_smoothing);
}

namespace {

std::vector<std::unique_ptr<Task>> make_tasks() {
    std::vector<std::unique_ptr<Task>> all;
    all.push_back(std::make_unique<G2pTask>());
    all.push_back(std::make_unique<CorpusTask>());
    all.push_back(std::make_unique<TextTask>());
    all.push_back(std::make_unique<MlmTask>());
    all.push_back(std::make_unique<ClassifyTask>());
    all.push_back(std::make_unique<SyntheticTask>("copy", "synthetic: write the source again"));
    all.push_back(std::make_unique<SyntheticTask>("reverse", "synthetic: write the source backwards"));
    all.push_back(std::make_unique<SyntheticTask>("sort", "synthetic: write the source's symbols sorted"));
    return all;
}

}  // namespace

const std::vector<std::unique_ptr<Task>>& tasks() {
    static const std::vector<std::unique_ptr<Task>> all = make_tasks();
    return all;
}

std::vector<std::string> task_name_list() {
    std::vector<std::string> names;
    for (const auto& t : tasks()) names.push_back(t->name());
    return names;
}

std::string task_names() {
    const std::vector<std::string> names = task_name_list();
    std::string text;
    for (size_t i = 0; i < names.size(); ++i) text += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
    return text;
}

const Task& task(const std::string& name) {
    for (const auto& t : tasks())
        if (t->name() == name) return *t;
    throw Error("task: unknown task \"" + name + "\" (" + task_names() + ")");
}

}  // namespace seqgrad::training
