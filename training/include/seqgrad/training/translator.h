// Text in, text out, from a checkpoint: the class a C++ program uses to run a trained model.
//
//   seqgrad::training::Translator translator("runs/my-model");   // a checkpoint directory or file
//   seqgrad::training::TranslatorOptions options;
//   options.beam_size = 5;
//   options.nbest = 3;
//   for (const auto& hypotheses : translator.translate({"phoenix", "seqgrad"}, options))
//       for (const auto& h : hypotheses) std::cout << h.text << "\t" << h.score << "\n";
//
// The checkpoint holds the tokenizers and vocabularies, so raw text goes in and raw text comes
// out. Inputs are decoded in batches of similar length; results come back in input order.
//
// Thread safety: translate() may be called from several threads at once on one Translator; the
// calls take turns (each batch already uses all of seqgrad's threads, set_num_threads, which is
// the fastest way to decode on a CPU). Construct one Translator per model, not per call.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "seqgrad/training/checkpoint.h"

namespace seqgrad::training {

struct TranslatorOptions {
    int64_t beam_size = 5;        // 1: greedy
    int64_t nbest = 1;            // hypotheses per input, at most beam_size
    float length_penalty = 0.6f;  // GNMT's alpha; 0 turns it off
    // Longest output in tokens, </s> included; 0: twice the batch's longest source plus 10, and at
    // least 40. The model's own limit (max_seq_len) caps it either way.
    int64_t max_len = 0;
    int64_t max_hypotheses = 2048;  // rows decoded together (inputs x beam), to bound memory
};

struct Translation {
    std::string text;
    float score = 0;     // log-probability / length penalty (greedy: the log-probability)
    int64_t tokens = 0;  // output tokens, </s> excluded
};

class Translator {
public:
    using Options = TranslatorOptions;
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

    // For each input, its hypotheses, best first (nbest of them, or fewer if the search found
    // fewer). An empty input gives one empty hypothesis of score 0. Errors: invalid UTF-8, bad
    // options.
    std::vector<std::vector<Translation>> translate(const std::vector<std::string>& inputs,
                                                    const TranslatorOptions& options = {}) const;

    const LoadedModel& checkpoint() const { return loaded_; }
    Totals totals() const;

private:
    LoadedModel loaded_;
    mutable std::mutex mutex_;
    mutable Totals totals_;
};

}  // namespace seqgrad::training
