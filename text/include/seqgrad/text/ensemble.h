// Checkpoints that decode together (models::EnsembleDecoder), and model files averaged into one.
// Both need only the model files (model_file.h), so that a deployed program (inference's
// Translator) decodes an ensemble without the training layer.
//
//   seqgrad::text::Ensemble ensemble({"runs/attn", "runs/transformer"}, {0.6, 0.4});
//   auto hypotheses = ensemble.search(ensemble.encode_sources({"phoenix"}), options);
//
// The models may be of any kinds (a Transformer with an attention LSTM) but must share the target
// side: its tokenizer and its vocabulary, which the constructor compares and names the first
// difference of. Each model reads the inputs with its own source tokenizer and vocabulary. One
// checkpoint searches exactly as models::search with that model alone.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "seqgrad/core/packed.h"
#include "seqgrad/models/ensemble.h"
#include "seqgrad/models/search.h"
#include "seqgrad/text/model_file.h"

namespace seqgrad::text {

class Ensemble {
public:
    // Loads each checkpoint (load_model). Weights: one positive weight per checkpoint, normalised
    // to sum to 1 (models::normalised_weights), or none for equal weights. Errors: a language
    // model among them, target tokenizers or vocabularies that differ (named), bad weights.
    explicit Ensemble(const std::vector<std::string>& checkpoints, const std::vector<double>& weights = {});
    // The same from models already loaded.
    explicit Ensemble(std::vector<LoadedModel> models, const std::vector<double>& weights = {});

    size_t size() const { return members_.size(); }
    const LoadedModel& member(size_t i) const { return members_.at(i); }
    // The first checkpoint: its target side is every member's; its task names the run.
    const LoadedModel& first() const { return members_.front(); }
    const std::vector<double>& weights() const { return decoder_->weights(); }
    // Whether member i reads sources exactly as the first one does (same tokenizer and vocabulary).
    bool shares_source(size_t i) const;

    void pack_weights(Precision precision);

    // Each member's ids of each text: [member][text] (models that share the first one's source
    // side share its ids). Errors: invalid UTF-8.
    std::vector<std::vector<std::vector<int64_t>>> encode_sources(const std::vector<std::string>& texts) const;

    // Hypotheses for N inputs decoded together from <s>: sources[i] is member i's [N, S_i], right-
    // padded with kPad. With one member, models::search on its model.
    std::vector<std::vector<models::Hypothesis>> search(const std::vector<IntTensor>& sources,
                                                        const models::DecodingOptions& options);

private:
    std::vector<LoadedModel> members_;
    std::unique_ptr<models::EnsembleDecoder> decoder_;
};

// Rows of ids as a [rows, longest] tensor right-padded with kPad (rows.size() >= 1).
IntTensor padded_rows(const std::vector<const std::vector<int64_t>*>& rows);

// ---- averaging ----

// The element-wise mean of the weights in `files` (model files, or checkpoint directories for
// their best weights): the first file's model with the mean as its weights, and the newest file's
// step. Every file must hold the same model (config), task, tokenizers and vocabularies; an Error
// names the first that differs. The sum runs in double, so that the mean of N copies of one file is
// that file's weights exactly.
LoadedModel average_models(const std::vector<std::string>& files);

}  // namespace seqgrad::text
