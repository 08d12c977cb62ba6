// Several decoders searched as one (ensemble.h).
#include "seqgrad/models/ensemble.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "seqgrad/core/error.h"

namespace seqgrad::models {

namespace {

// One state per member; the search's reordering moves every member's rows alike.
class EnsembleState : public DecodingState {
public:
    std::vector<std::unique_ptr<DecodingState>> members;

    void select_rows(const std::vector<int64_t>& rows) override {
        for (auto& state : members) state->select_rows(rows);
    }
    void reorder_beams(const std::vector<int64_t>& rows, int64_t group) override {
        for (auto& state : members) state->reorder_beams(rows, group);
    }
};

EnsembleState& ensemble_state(DecodingState& state) { return own_state<EnsembleState>(state, "ensemble"); }

}  // namespace

std::vector<double> normalised_weights(const std::vector<double>& weights, size_t members) {
    check(members >= 1, "ensemble", "an ensemble needs at least one model");
    if (weights.empty()) return std::vector<double>(members, 1.0 / static_cast<double>(members));
    check(weights.size() == members, "ensemble", "got ", weights.size(), " weights for ", members,
          " models: give one weight per model");
    double sum = 0;
    for (size_t i = 0; i < weights.size(); ++i) {
        check(std::isfinite(weights[i]) && weights[i] > 0, "ensemble", "weight ", i + 1, " is ", weights[i],
              ": weights must be positive");
        sum += weights[i];
    }
    std::vector<double> out;
    for (const double w : weights) out.push_back(w / sum);
    return out;
}

EnsembleDecoder::EnsembleDecoder(std::vector<StepDecoder*> members, std::vector<double> weights)
    : members_(std::move(members)), weights_(normalised_weights(weights, members_.size())) {
    for (const StepDecoder* member : members_) check(member != nullptr, "ensemble", "a member is null");
}

std::unique_ptr<DecodingState> EnsembleDecoder::start_decoding(const IntTensor& source) {
    return start_decoding(std::vector<IntTensor>(members_.size(), source));
}

std::unique_ptr<DecodingState> EnsembleDecoder::start_decoding(const std::vector<IntTensor>& sources) {
    check(sources.size() == members_.size(), "ensemble", "got ", sources.size(), " sources for ", members_.size(),
          " models");
    auto state = std::make_unique<EnsembleState>();
    for (size_t i = 0; i < members_.size(); ++i) {
        check(sources[i].dim() == 2 && sources[i].size(0) == sources[0].size(0), "ensemble", "source ", i + 1,
              " has shape ", sources[i].shape(), ", not [", sources[0].size(0), ", length]");
        state->members.push_back(members_[i]->start_decoding(sources[i]));
    }
    return state;
}

Tensor EnsembleDecoder::decode_step(DecodingState& state, const IntTensor& tokens) {
    EnsembleState& s = ensemble_state(state);
    std::vector<Tensor> logits;
    for (size_t i = 0; i < members_.size(); ++i) logits.push_back(members_[i]->decode_step(*s.members[i], tokens));
    return combine(logits);
}

Tensor EnsembleDecoder::prefill(DecodingState& state, const IntTensor& prefix) {
    EnsembleState& s = ensemble_state(state);
    std::vector<Tensor> logits;
    for (size_t i = 0; i < members_.size(); ++i) logits.push_back(members_[i]->prefill(*s.members[i], prefix));
    return combine(logits);
}

int64_t EnsembleDecoder::max_decode_length() const {
    int64_t shortest = std::numeric_limits<int64_t>::max();
    for (const StepDecoder* member : members_) shortest = std::min(shortest, member->max_decode_length());
    return shortest;
}

// sum_i w_i log_softmax(logits_i), row by row; each log_softmax's normaliser in double.
Tensor EnsembleDecoder::combine(const std::vector<Tensor>& logits) const {
    const int64_t rows = logits[0].size(0), vocab = logits[0].size(1);
    Tensor out = Tensor::zeros({rows, vocab});
    float* o = out.data();
    for (size_t i = 0; i < logits.size(); ++i) {
        check(logits[i].dim() == 2 && logits[i].size(0) == rows && logits[i].size(1) == vocab, "ensemble", "model ",
              i + 1, " gives logits of shape ", logits[i].shape(), ", model 1 [", rows, ", ", vocab,
              "]: the models must share their target vocabulary");
        const Tensor& x = logits[i];
        const auto w = static_cast<float>(weights_[i]);
        for (int64_t r = 0; r < rows; ++r) {
            const float* row = x.data() + r * vocab;
            float top = row[0];
            for (int64_t v = 1; v < vocab; ++v) top = std::max(top, row[v]);
            double sum = 0;
            for (int64_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(row[v] - top));
            const auto log_z = static_cast<float>(static_cast<double>(top) + std::log(sum));
            float* dst = o + r * vocab;
            for (int64_t v = 0; v < vocab; ++v) dst[v] += w * (row[v] - log_z);
        }
    }
    return out;
}

}  // namespace seqgrad::models
