// The base of every model (model.h): the loss of a batch, and the defaults of decoding.
#include "seqgrad/models/model.h"

#include <algorithm>

#include "seqgrad/core/ops.h"

namespace seqgrad::models {

Tensor StepDecoder::prefill(DecodingState& state, const IntTensor& prefix) {
    check(prefix.dim() == 2 && prefix.size(1) >= 1, "prefill", "takes a prefix [rows, length >= 1], got ",
          prefix.shape());
    const int64_t rows = prefix.size(0), length = prefix.size(1);
    Tensor logits;
    for (int64_t t = 0; t < length; ++t) {
        IntTensor column = IntTensor::zeros({rows});
        for (int64_t i = 0; i < rows; ++i) column.data()[i] = prefix.data()[i * length + t];
        logits = decode_step(state, column);
    }
    return logits;
}

Tensor Model::loss(const IntTensor& source, const IntTensor& target, float label_smoothing) {
    check(target.dim() == 2 && target.size(1) >= 2, "loss", "the target must be [batch, length >= 2], got ",
          target.shape());
    const int64_t t = target.size(1);
    return sequence_loss(logits(source, target.slice_last(0, t - 1)), target.slice_last(1, t), label_smoothing);
}

std::unique_ptr<DecodingState> Model::start_decoding(const IntTensor&) {
    throw Error("decoding: step-by-step decoding is not available for model \"" + config_.model + "\"");
}

Tensor Model::decode_step(DecodingState&, const IntTensor&) {
    throw Error("decoding: step-by-step decoding is not available for model \"" + config_.model + "\"");
}

Tensor LanguageModel::logits(const IntTensor& source, const IntTensor& inputs) {
    check(source.numel() == 0, "LanguageModel", "a language model reads no source, got ", source.shape());
    return forward(inputs);
}

Tensor EncoderModel::logits(const IntTensor& source, const IntTensor& inputs) {
    check(source.numel() == 0, "EncoderModel", "an encoder reads no separate source, got ", source.shape());
    return mlm_logits(forward(inputs));
}

Tensor EncoderModel::loss(const IntTensor&, const IntTensor&, float) {
    throw Error("loss: model \"" + config().model +
                "\" is an encoder, which predicts no next token: its losses are mlm_loss and class_loss");
}

Tensor EncoderModel::mlm_loss(const Tensor& hidden, const IntTensor& labels) const {
    check(hidden.defined() && hidden.dim() == 3 && labels.shape() == Shape{hidden.size(0), hidden.size(1)}, "mlm_loss",
          "labels must be [B, T] as hidden's first two axes, got ", labels.shape());
    // The head reads only the positions with a label: the same loss as over every position with the
    // others ignored, for the share of the work BERT masks (15%).
    std::vector<int64_t> positions, targets;
    for (int64_t i = 0; i < labels.numel(); ++i)
        if (labels.data()[i] != kPad) {
            positions.push_back(i);
            targets.push_back(labels.data()[i]);
        }
    if (positions.empty()) return cross_entropy(mlm_logits(hidden), labels, kPad);  // 0, and no gradient
    const auto count = static_cast<int64_t>(positions.size());
    const int64_t width = hidden.size(2);
    const Tensor rows = index_select(reshape(hidden, {hidden.size(0) * hidden.size(1), width}), 0,
                                     IntTensor::from_vector(std::move(positions), {count}));
    return cross_entropy(mlm_logits(reshape(rows, {1, count, width})),
                         IntTensor::from_vector(std::move(targets), {1, count}), kPad);
}

Tensor EncoderModel::class_loss(const Tensor& hidden, const IntTensor& labels) const {
    const Tensor logits = class_logits(hidden);
    check(labels.dim() == 1 && labels.size(0) == logits.size(0), "class_loss", "labels must be [", logits.size(0),
          "], got ", labels.shape());
    for (int64_t i = 0; i < labels.numel(); ++i)
        check(labels.data()[i] >= 0 && labels.data()[i] < logits.size(1), "class_loss", "label ", labels.data()[i],
              " of row ", i, " is not in [0, ", logits.size(1), ")");
    return cross_entropy(logits, labels);
}

std::vector<Tensor> Seq2SeqModel::last_attention(const DecodingState&) const { return {}; }

void Seq2SeqModel::set_teacher_forcing_ratio(float ratio) {
    check(ratio >= 0 && ratio <= 1, "teacher forcing", "the ratio must be in [0, 1], got ", ratio);
    teacher_forcing_ratio_ = ratio;
}

Tensor sequence_loss(const Tensor& logits, const IntTensor& tgt_out, float label_smoothing) {
    return cross_entropy(logits, tgt_out, kPad, label_smoothing);
}

IntTensor encoder_segments(const IntTensor& tokens) {
    check(tokens.dim() == 2, "encoder_segments", "tokens must be [B, T], got ", tokens.shape());
    const int64_t rows = tokens.size(0), length = tokens.size(1);
    IntTensor segments = IntTensor::zeros({rows, length});
    for (int64_t r = 0; r < rows; ++r) {
        const int64_t* row = tokens.data() + r * length;
        const int64_t* first_sep = std::find(row, row + length, kSep);
        for (int64_t t = first_sep == row + length ? length : first_sep - row + 1; t < length; ++t)
            segments.data()[r * length + t] = row[t] == kPad ? 0 : 1;
    }
    return segments;
}

}  // namespace seqgrad::models
