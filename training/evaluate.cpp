// Decoding examples in length-sorted batches and scoring them (evaluate.h).
#include "seqgrad/training/evaluate.h"

#include <cmath>
#include <functional>
#include <numbers>

#include "seqgrad/text/ensemble.h"
#include "seqgrad/training/batching.h"
#include "seqgrad/training/error_rates.h"

namespace seqgrad::training {

double EvalResult::perplexity() const { return std::exp(loss); }

double EvalResult::bits_per_unit() const {
    return units > 0 ? loss * static_cast<double>(tokens) / std::numbers::ln2 / static_cast<double>(units)
                     : std::numeric_limits<double>::quiet_NaN();
}

namespace {

// Decodes `examples` in length-sorted batches (the first model's source ids), `decode` giving each
// batch's hypotheses, and scores the best ones.
EvalResult decode_and_score(const std::vector<Example>& examples, const text::Vocabulary& source_vocab,
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
    EvalResult result;
    result.wer = rates.wer();
    result.per = rates.per();
    result.words = rates.words();
    return result;
}

}  // namespace

EvalResult evaluate(models::Model& model, const std::vector<Example>& examples, const text::Vocabulary& source_vocab,
                    const text::Vocabulary& target_vocab, const models::DecodingOptions& options,
                    std::vector<std::vector<std::string>>* predictions) {
    return decode_and_score(
        examples, source_vocab, target_vocab, options,
        [&](const Batch& batch) { return models::search(model, batch.src, options); }, predictions);
}

EvalResult evaluate(text::Ensemble& ensemble, const std::vector<Example>& examples,
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

}  // namespace seqgrad::training
