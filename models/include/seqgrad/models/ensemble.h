// Several decoders searched as one (step_decoder.h: "an ensemble is a decoder made of decoders"),
// as Marian's --models, OpenNMT-py's several -model and fairseq's --path a:b decode: each step
// feeds the same token to every member and returns the weighted sum of their log-probabilities,
// sum_i w_i log_softmax(logits_i), over the target vocabulary they share. The weights sum to 1; the
// searches take a log_softmax of what a decoder returns, so the sum is renormalised before any
// token is chosen (for two copies of one model it is that model's log_softmax, exactly).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "seqgrad/models/step_decoder.h"

namespace seqgrad::models {

class EnsembleDecoder : public StepDecoder {
public:
    // The members (not owned: they outlive the ensemble) and their weights: positive, one per
    // member, normalised here to sum to 1. Empty weights: equal ones. Error for anything else.
    EnsembleDecoder(std::vector<StepDecoder*> members, std::vector<double> weights = {});

    const std::vector<double>& weights() const { return weights_; }
    size_t size() const { return members_.size(); }

    // Every member starts from the same source [N, S].
    std::unique_ptr<DecodingState> start_decoding(const IntTensor& source) override;
    // Member i starts from sources[i], [N, S_i]: members whose tokenizers differ read the same
    // inputs as different ids. Every source has the same N rows.
    std::unique_ptr<DecodingState> start_decoding(const std::vector<IntTensor>& sources);

    // [N, V]: the members' weighted log-probabilities (every member must return the same V).
    Tensor decode_step(DecodingState& state, const IntTensor& tokens) override;
    Tensor prefill(DecodingState& state, const IntTensor& prefix) override;
    // The shortest of the members'.
    int64_t max_decode_length() const override;

private:
    Tensor combine(const std::vector<Tensor>& logits) const;

    std::vector<StepDecoder*> members_;
    std::vector<double> weights_;
};

// Weights for `members` models: equal ones if `weights` is empty; else one positive weight per
// model, divided by their sum. Throws Error naming the problem.
std::vector<double> normalised_weights(const std::vector<double>& weights, size_t members);

}  // namespace seqgrad::models
