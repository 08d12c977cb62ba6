// Decoding a list of examples and scoring the predictions against all their references.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "seqgrad/models/search.h"
#include "seqgrad/models/model.h"
#include "seqgrad/text/vocabulary.h"
#include "seqgrad/training/dataset.h"

namespace seqgrad::text {
class Ensemble;
}

namespace seqgrad::training {

// An evaluation, as its task (task.h) measures it.
struct EvalResult {
    // A task of pairs: the outputs decoded and scored against their references, in percent.
    double wer = 0;
    double per = 0;
    int64_t words = 0;  // examples scored
    // A task of text: the mean loss of the model's next-token predictions, in nats per token, and
    // the text's length in the unit bits are counted per.
    double loss = std::numeric_limits<double>::quiet_NaN();
    int64_t tokens = 0;  // tokens predicted
    int64_t units = 0;   // characters or bytes
    std::string unit;    // "character" or "byte"

    double perplexity() const;     // exp(loss)
    double bits_per_unit() const;  // the whole text's loss in bits, over its units
};

// The search `options` asks for over `examples` (in length-sorted batches of
// models::inputs_per_batch sources), and the predictions' WER and PER against all their
// references. Returns the predictions too (as target symbols), in the examples' order, when asked.
EvalResult evaluate(models::Model& model, const std::vector<Example>& examples, const text::Vocabulary& source_vocab,
                    const text::Vocabulary& target_vocab, const models::DecodingOptions& options,
                    std::vector<std::vector<std::string>>* predictions = nullptr);

// The same for checkpoints decoding together (text/ensemble.h): the examples' symbols are the first
// model's (its vocabularies encode and decode them); a model whose source side differs reads each
// example's text (Example::name) with its own.
EvalResult evaluate(text::Ensemble& ensemble, const std::vector<Example>& examples,
                    const models::DecodingOptions& options,
                    std::vector<std::vector<std::string>>* predictions = nullptr);

}  // namespace seqgrad::training
