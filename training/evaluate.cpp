// Decoding examples in length-sorted batches and scoring them (evaluate.h).
#include "seqgrad/training/evaluate.h"

#include <cmath>
#include <numbers>

#include "seqgrad/training/batching.h"
#include "seqgrad/training/error_rates.h"

namespace seqgrad::training {

double EvalResult::perplexity() const { return std::exp(loss); }

double EvalResult::bits_per_unit() const {
    return units > 0 ? loss * static_cast<double>(tokens) / std::numbers::ln2 / static_cast<double>(units)
                     : std::numeric_limits<double>::quiet_NaN();
}

EvalResult evaluate(models::Model& model, const std::vector<Example>& examples, const Vocabulary& source_vocab,
                    const Vocabulary& target_vocab, const models::DecodingOptions& options,
                    std::vector<std::vector<std::string>>* predictions) {
    const EncodedPairs encoded = encode_for_evaluation(examples, source_vocab, target_vocab);
    BatchOptions batch_options;
    batch_options.max_sentences = models::inputs_per_batch(options);
    ErrorRates rates;
    if (predictions) predictions->assign(examples.size(), {});
    for (const Batch& batch : make_eval_batches(encoded, batch_options)) {
        const auto hypotheses = models::search(model, batch.src, options);
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

}  // namespace seqgrad::training
