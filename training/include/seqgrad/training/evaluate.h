// What an evaluation measures, as each kind of task measures it, and the evaluator that turns a
// result into a task's dev metric: decoding a list of examples and scoring the predictions against
// all their references (a task of pairs), or a language model's loss over a text (text_data.h).
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "seqgrad/models/model.h"
#include "seqgrad/models/search.h"
#include "seqgrad/training/dataset.h"
#include "seqgrad/text/tokenizer.h"
#include "seqgrad/text/vocabulary.h"

namespace seqgrad::text {
class Ensemble;
}

namespace seqgrad::training {

// A task of pairs: the outputs decoded and scored against their references, in percent. BLEU and
// chrF (bleu_chrf.h) are measured when asked for, and NaN otherwise.
struct PairScores {
    double wer = 0;
    double per = 0;
    int64_t words = 0;  // examples scored
    double bleu = std::numeric_limits<double>::quiet_NaN();
    double chrf = std::numeric_limits<double>::quiet_NaN();
};

// A task of text: the mean loss of the model's next-token predictions, in nats per token, and the
// text's length in the unit bits are counted per.
struct TextScores {
    double loss = std::numeric_limits<double>::quiet_NaN();
    int64_t tokens = 0;  // tokens predicted
    int64_t units = 0;   // characters or bytes
    std::string unit;    // "character" or "byte"

    double perplexity() const;     // exp(loss)
    double bits_per_unit() const;  // the whole text's loss in bits, over its units
};

// A masked language model: the mean loss over the masked positions of a text, in nats per token,
// and the share (%) of them whose most likely token is the true one.
struct MaskedScores {
    double loss = std::numeric_limits<double>::quiet_NaN();
    double accuracy = 0;
    int64_t masked = 0;  // positions predicted
};

// A classifier: accuracy and macro-F1 (classification_metrics.h) over a split's texts, in percent.
struct ClassifierScores {
    double accuracy = 0;
    double macro_f1 = 0;
    int64_t texts = 0;
};

// An evaluation, as its task measures it.
using EvalResult = std::variant<PairScores, TextScores, MaskedScores, ClassifierScores>;

// A task's dev metric (task.h): its name, which way is better, its value in a result, and a
// result as one line. A result of another kind of task has no value (NaN).
class Evaluator {
public:
    virtual ~Evaluator() = default;
    virtual std::string metric() const = 0;  // "WER", "BLEU", "chrF", "loss"
    virtual bool higher_is_better() const { return false; }
    virtual double value(const EvalResult& result) const = 0;
    virtual std::string describe(const EvalResult& result) const = 0;
    // Whether value `a` is better than value `b`.
    bool better(double a, double b) const { return higher_is_better() ? a > b : a < b; }
};

// The evaluators of the kinds of task: pairs judged by "wer" (the lowest), "bleu" or "chrf"
// (the highest), each result written with every measure it holds; a text judged by its loss.
std::unique_ptr<Evaluator> pair_evaluator(const std::string& metric);
std::unique_ptr<Evaluator> text_evaluator();
// A masked language model judged by its masked loss; a classifier by its accuracy.
std::unique_ptr<Evaluator> masked_evaluator();
std::unique_ptr<Evaluator> class_evaluator();

// The search `options` asks for over `examples` (in length-sorted batches of
// models::inputs_per_batch sources), and the predictions' WER and PER against all their
// references. Returns the predictions too (as target symbols), in the examples' order, when asked.
PairScores evaluate(models::Model& model, const std::vector<Example>& examples, const text::Vocabulary& source_vocab,
                    const text::Vocabulary& target_vocab, const models::DecodingOptions& options,
                    std::vector<std::vector<std::string>>* predictions = nullptr);

// The same for checkpoints decoding together (text/ensemble.h): the examples' symbols are the first
// model's (its vocabularies encode and decode them); a model whose source side differs reads each
// example's text (Example::name) with its own.
PairScores evaluate(text::Ensemble& ensemble, const std::vector<Example>& examples,
                    const models::DecodingOptions& options,
                    std::vector<std::vector<std::string>>* predictions = nullptr);

// Adds the `metrics` asked for ("bleu", "chrf") to `scores`: the predictions (target symbols, in
// the examples' order) written out by the target tokenizer, against the examples' reference texts.
void score_texts(PairScores& scores, const std::vector<std::string>& metrics,
                 const std::vector<std::vector<std::string>>& predictions, const std::vector<Example>& examples,
                 const text::Tokenizer& target_tokenizer);

}  // namespace seqgrad::training
