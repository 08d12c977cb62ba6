// Text in, text out, from a checkpoint: the class a C++ program uses to run a trained model.
//
//   seqgrad::inference::Translator translator("runs/my-model");   // a checkpoint directory or file
//   seqgrad::models::DecodingOptions options;   // the search's (models/search.h)
//   options.beam_size = 5;
//   options.nbest = 3;
//   for (const auto& hypotheses : translator.translate({"phoenix", "seqgrad"}, options))
//       for (const auto& h : hypotheses) std::cout << h.text << "\t" << h.score << "\n";
//
// The checkpoint holds the tokenizers and vocabularies, so raw text goes in and raw text comes
// out. Inputs are decoded in batches of similar length; results come back in input order.
//
// Several checkpoints decode as one (text::Ensemble: each step sums their weighted
// log-probabilities), if they share the target side:
//
//   seqgrad::inference::Translator both({"runs/attn", "runs/transformer"}, {0.5, 0.5});
//
// Thread safety: translate() may be called from several threads at once on one Translator; the
// calls take turns (each batch already uses all of seqgrad's threads, set_num_threads, which is
// the fastest way to decode on a CPU). Construct one Translator per model, not per call.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "seqgrad/models/search.h"
#include "seqgrad/text/ensemble.h"
#include "seqgrad/text/model_file.h"

namespace seqgrad::inference {

struct Translation {
    std::string text;
    float score = 0;     // log-probability / length penalty (greedy: the log-probability)
    int64_t tokens = 0;  // output tokens, </s> excluded
};

class Translator {
public:
    using Hypothesis = Translation;
    // What the translations so far cost and met (for a throughput line).
    struct Totals {
        int64_t inputs = 0;
        int64_t output_tokens = 0;  // of the best hypotheses
        int64_t source_tokens = 0;
        int64_t unknown_source_tokens = 0;  // read as <unk>
        double seconds = 0;
    };

    // The model's weights are packed for decoding (Module::pack_weights): float32 by default, the
    // weights as trained; int8 is faster where the CPU has AMX or AVX-512 VNNI, within rounding of
    // float32, and needs a build with oneDNN.
    explicit Translator(const std::string& checkpoint, Precision precision = Precision::float32);
    // An ensemble of these checkpoints with these weights (none: equal; text::Ensemble says
    // what it refuses). One checkpoint translates exactly as the constructor above.
    Translator(const std::vector<std::string>& checkpoints, const std::vector<double>& weights,
               Precision precision = Precision::float32);
    // The same of checkpoints already read.
    Translator(std::vector<text::LoadedModel> models, const std::vector<double>& weights,
               Precision precision = Precision::float32);

    // For each input, its hypotheses, best first (options.nbest of them, or fewer if the search
    // found fewer), decoded in batches of similar length (models::inputs_per_batch inputs). The
    // longest output, unless options.max_len says, is models::default_max_length of the batch's
    // longest input. An empty input gives one empty hypothesis of score 0. Errors: invalid UTF-8,
    // bad options.
    std::vector<std::vector<Translation>> translate(const std::vector<std::string>& inputs,
                                                    const models::DecodingOptions& options = {}) const;

    // The (first) checkpoint: its target side is the translations'.
    const text::LoadedModel& checkpoint() const { return ensemble_.first(); }
    const text::Ensemble& ensemble() const { return ensemble_; }
    Totals totals() const;

private:
    mutable text::Ensemble ensemble_;
    mutable std::mutex mutex_;
    mutable Totals totals_;
};

}  // namespace seqgrad::inference
