// Seq2SeqModel's defaults, and the loss every model trains with (model.h).
#include "seqgrad/models/model.h"

#include "seqgrad/core/ops.h"

namespace seqgrad::models {

std::unique_ptr<DecodingState> Seq2SeqModel::start_decoding(const IntTensor&) {
    throw Error("decoding: step-by-step decoding is not available for model \"" + config_.model + "\"");
}

Tensor Seq2SeqModel::decode_step(DecodingState&, const IntTensor&) {
    throw Error("decoding: step-by-step decoding is not available for model \"" + config_.model + "\"");
}

std::vector<Tensor> Seq2SeqModel::last_attention(const DecodingState&) const { return {}; }

void Seq2SeqModel::set_teacher_forcing_ratio(float ratio) {
    check(ratio >= 0 && ratio <= 1, "teacher forcing", "the ratio must be in [0, 1], got ", ratio);
    teacher_forcing_ratio_ = ratio;
}

Tensor sequence_loss(const Tensor& logits, const IntTensor& tgt_out, float label_smoothing) {
    return cross_entropy(logits, tgt_out, kPad, label_smoothing);
}

}  // namespace seqgrad::models
