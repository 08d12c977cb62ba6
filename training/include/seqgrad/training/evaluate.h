// Decoding a list of examples and scoring the predictions against all their references.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "seqgrad/models/search.h"
#include "seqgrad/models/model.h"
#include "seqgrad/training/dataset.h"
#include "seqgrad/training/vocabulary.h"

namespace seqgrad::training {

struct EvalResult {
    double wer = 0;
    double per = 0;
    int64_t words = 0;
};

// The search `options` asks for over `examples` (in length-sorted batches of
// models::inputs_per_batch sources), and the predictions' WER and PER against all their
// references. Returns the predictions too (as target symbols), in the examples' order, when asked.
EvalResult evaluate(models::Model& model, const std::vector<Example>& examples, const Vocabulary& source_vocab,
                    const Vocabulary& target_vocab, const models::DecodingOptions& options,
                    std::vector<std::vector<std::string>>* predictions = nullptr);

}  // namespace seqgrad::training
