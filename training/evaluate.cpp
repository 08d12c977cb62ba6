// Decoding examples in length-sorted batches and scoring them (evaluate.h).
#include "seqgrad/training/evaluate.h"

#include <cmath>
#include <cstdio>
#include <functional>
#include <numbers>

#include "seqgrad/core/error.h"
#include "seqgrad/training/batching.h"
#include "seqgrad/training/bleu_chrf.h"
#include "seqgrad/text/ensemble.h"
#include "seqgrad/training/error_rates.h"

namespace seqgrad::training {

double TextScores::perplexity() const { return std::exp(loss); }

double TextScores::bits_per_unit() const {
    return units > 0 ? loss * static_cast<double>(tokens) / std::numbers::ln2 / static_cast<double>(units)
                     : std::numeric_limits<double>::quiet_NaN();
}

namespace {

constexpr double kNone = std::numeric_limits<double>::quiet_NaN();

// Pairs: judged by WER (the lower the better), BLEU or chrF (the higher); written with all three
// when measured.
class PairEvaluator : public Evaluator {
public:
    explicit PairEvaluator(std::string metric) : metric_(std::move(metric)) {
        check(metric_ == "wer" || metric_ == "bleu" || metric_ == "chrf", "evaluation", "unknown dev metric \"",
              metric_, "\" (wer, bleu or chrf)");
    }
    std::string metric() const override { return metric_ == "wer" ? "WER" : metric_ == "bleu" ? "BLEU" : "chrF"; }
    bool higher_is_better() const override { return metric_ != "wer"; }
    double value(const EvalResult& result) const override {
        const auto* r = std::get_if<PairScores>(&result);
        if (!r) return kNone;
        return metric_ == "wer" ? r->wer : metric_ == "bleu" ? r->bleu : r->chrf;
    }
    std::string describe(const EvalResult& result) const override {
        const auto* r = std::get_if<PairScores>(&result);
        if (!r) return "(not an evaluation of pairs)";
        char text[160];
        std::snprintf(text, sizeof text, "WER %.2f%%  PER %.2f%%  (%lld words)", r->wer, r->per,
                      static_cast<long long>(r->words));
        std::string line = text;
        if (std::isfinite(r->bleu)) {
            std::snprintf(text, sizeof text, "  BLEU %.2f", r->bleu);
            line += text;
        }
        if (std::isfinite(r->chrf)) {
            std::snprintf(text, sizeof text, "  chrF %.2f", r->chrf);
            line += text;
        }
        return line;
    }

private:
    std::string metric_;
};

// A text: judged by its loss per token.
class TextEvaluator : public Evaluator {
public:
    std::string metric() const override { return "loss"; }
    double value(const EvalResult& result) const override {
        const auto* r = std::get_if<TextScores>(&result);
        return r ? r->loss : kNone;
    }
    std::string describe(const EvalResult& result) const override {
        const auto* r = std::get_if<TextScores>(&result);
        if (!r) return "(not an evaluation of a text)";
        char text[192];
        std::snprintf(text, sizeof text, "loss %.4f nats  perplexity %.3f  %.4f bits per %s  (%lld tokens)", r->loss,
                      r->perplexity(), r->bits_per_unit(), r->unit.empty() ? "unit" : r->unit.c_str(),
                      static_cast<long long>(r->tokens));
        return text;
    }
};

// A masked language model: judged by the loss of its masked positions.
class MaskedEvaluator : public Evaluator {
public:
    std::string metric() const override { return "masked loss"; }
    double value(const EvalResult& result) const override {
        const auto* r = std::get_if<MaskedScores>(&result);
        return r ? r->loss : kNone;
    }
    std::string describe(const EvalResult& result) const override {
        const auto* r = std::get_if<MaskedScores>(&result);
        if (!r) return "(not an evaluation of masked tokens)";
        char text[160];
        std::snprintf(text, sizeof text, "masked loss %.4f nats  accuracy %.2f%%  (%lld masked tokens)", r->loss,
                      r->accuracy, static_cast<long long>(r->masked));
        return text;
    }
};

// A classifier: judged by its accuracy (the higher the better).
class ClassEvaluator : public Evaluator {
public:
    std::string metric() const override { return "accuracy"; }
    bool higher_is_better() const override { return true; }
    double value(const EvalResult& result) const override {
        const auto* r = std::get_if<ClassifierScores>(&result);
        return r ? r->accuracy : kNone;
    }
    std::string describe(const EvalResult& result) const override {
        const auto* r = std::get_if<ClassifierScores>(&result);
        if (!r) return "(not an evaluation of a classifier)";
        char text[160];
        std::snprintf(text, sizeof text, "accuracy %.2f%%  macro-F1 %.2f%%  (%lld texts)", r->accuracy, r->macro_f1,
                      static_cast<long long>(r->texts));
        return text;
    }
};

// Decodes `examples` in length-sorted batches (the first model's source ids), `decode` giving each
// batch's hypotheses, and scores the best ones.
PairScores decode_and_score(const std::vector<Example>& examples, const text::Vocabulary& source_vocab,
                            const text::Vocabulary& target_vocab, const models::DecodingOptions& options,
                            const std::function<std::vector<std::vector<models::Hypothesis>>(const Batch&)>& decode,
                            std::vector<std::vector<std::string>>* predictions) {
    const EncodedPairs encoded = encode_for_evaluation(examples, source_vocab, target_vocab);
    BatchOptions batch_options;
    batch_options.max_sentences = models::inputs_per_batch(options);
    ErrorRates rates;
    if (predictions) predictions->assign(examples.size(), {});
    for (const Batch& batch : make_eval_batches(encoded, batch_options)) {
        const auto hypotheses = decode(batch);
        for (size_t row = 0; row < hypotheses.size(); ++row) {
            const int64_t index = batch.example_index[row];
            const std::vector<int64_t> none;
            const std::vector<std::string> predicted =
                target_vocab.decode(hypotheses[row].empty() ? none : hypotheses[row].front().tokens);
            rates.add(predicted, examples[static_cast<size_t>(index)].references);
            if (predictions) (*predictions)[static_cast<size_t>(index)] = predicted;
        }
    }
    PairScores result;
    result.wer = rates.wer();
    result.per = rates.per();
    result.words = rates.words();
    return result;
}

}  // namespace

std::unique_ptr<Evaluator> pair_evaluator(const std::string& metric) { return std::make_unique<PairEvaluator>(metric); }

std::unique_ptr<Evaluator> masked_evaluator() { return std::make_unique<MaskedEvaluator>(); }
std::unique_ptr<Evaluator> class_evaluator() { return std::make_unique<ClassEvaluator>(); }

std::unique_ptr<Evaluator> text_evaluator() { return std::make_unique<TextEvaluator>(); }

PairScores evaluate(models::Model& model, const std::vector<Example>& examples, const text::Vocabulary& source_vocab,
                    const text::Vocabulary& target_vocab, const models::DecodingOptions& options,
                    std::vector<std::vector<std::string>>* predictions) {
    return decode_and_score(
        examples, source_vocab, target_vocab, options,
        [&](const Batch& batch) { return models::search(model, batch.src, options); }, predictions);
}

PairScores evaluate(text::Ensemble& ensemble, const std::vector<Example>& examples,
                    const models::DecodingOptions& options, std::vector<std::vector<std::string>>* predictions) {
    const text::LoadedModel& first = ensemble.first();
    const auto decode = [&](const Batch& batch) {
        // The first model reads the examples' own symbols; another with its own source side reads
        // each example's text its own way.
        std::vector<IntTensor> sources{batch.src};
        for (size_t m = 1; m < ensemble.size(); ++m) {
            if (ensemble.shares_source(m)) {
                sources.push_back(batch.src);
                continue;
            }
            std::vector<std::vector<int64_t>> ids;
            for (const int64_t index : batch.example_index)
                ids.push_back(ensemble.member(m).encode_source(examples[static_cast<size_t>(index)].name));
            std::vector<const std::vector<int64_t>*> rows;
            for (const auto& row : ids) rows.push_back(&row);
            sources.push_back(text::padded_rows(rows));
        }
        return ensemble.search(sources, options);
    };
    return decode_and_score(examples, first.source_vocab, first.target_vocab, options, decode, predictions);
}

void score_texts(PairScores& scores, const std::vector<std::string>& metrics,
                 const std::vector<std::vector<std::string>>& predictions, const std::vector<Example>& examples,
                 const text::Tokenizer& target_tokenizer) {
    if (metrics.empty()) return;
    check(predictions.size() == examples.size(), "evaluation", predictions.size(), " predictions for ", examples.size(),
          " examples");
    std::vector<std::string> hypotheses;
    std::vector<std::vector<std::string>> references;
    for (size_t i = 0; i < examples.size(); ++i) {
        hypotheses.push_back(target_tokenizer.detokenize(predictions[i]));
        references.push_back(examples[i].reference_texts);
    }
    for (const std::string& metric : metrics) {
        if (metric == "bleu") scores.bleu = corpus_bleu(hypotheses, references).score;
        else if (metric == "chrf") scores.chrf = corpus_chrf(hypotheses, references);
        else check(metric == "wer", "evaluation", "unknown metric \"", metric, "\" (bleu or chrf)");
    }
}

}  // namespace seqgrad::training
