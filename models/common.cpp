// The batch checks, row selection and teacher forcing that the models share (common.h).
#include "seqgrad/models/common.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <mutex>

#include "seqgrad/core/autograd.h"
#include "seqgrad/core/ops.h"
#include "seqgrad/core/profile.h"
#include "seqgrad/core/threads.h"
#include "seqgrad/nn/trace.h"

namespace seqgrad::models {

void check_token_ids(const IntTensor& ids, int64_t vocab, const char* op, const char* what) {
    check(ids.dim() == 2 && ids.size(0) >= 1 && ids.size(1) >= 1, op, what, " must be [batch >= 1, len >= 1], got ",
          ids.shape());
    const int64_t len = ids.size(1);
    for (int64_t i = 0; i < ids.numel(); ++i) {
        const int64_t id = ids.data()[i];
        check(id >= 0 && id < vocab, op, what, " id ", id, " at [", i / len, ", ", i % len,
              "] is outside the vocabulary [0, ", vocab, ")");
    }
}

void check_source_and_target(const IntTensor& src, const IntTensor& tgt_in, const ModelConfig& config, const char* op) {
    check_token_ids(src, config.src_vocab, op, "src");
    check_token_ids(tgt_in, config.tgt_vocab, op, "tgt_in");
    check(tgt_in.size(0) == src.size(0), op, "tgt_in must be [", src.size(0), ", len] for src ", src.shape(), ", got ",
          tgt_in.shape(), " (different batch sizes)");
}

std::vector<int64_t> source_lengths(const IntTensor& src, const char* op) {
    check(src.dim() == 2, op, "src must be [batch, src_len], got ", src.shape());
    const int64_t batch = src.size(0), len = src.size(1);
    std::vector<int64_t> lengths(static_cast<size_t>(batch), 0);
    for (int64_t b = 0; b < batch; ++b) {
        const int64_t* row = src.data() + b * len;
        int64_t length = 0;
        while (length < len && row[length] != kPad) ++length;
        for (int64_t t = length; t < len; ++t)
            check(row[t] == kPad, op, "src row ", b, " has <pad> at position ", length, " before the token ", row[t],
                  " at position ", t, ": batches must be right-padded");
        check(length > 0, op, "src row ", b,
              " has no real token (length 0); every source row needs at least one, as PyTorch's "
              "pack_padded_sequence requires");
        lengths[static_cast<size_t>(b)] = length;
    }
    return lengths;
}

IntTensor source_mask(const IntTensor& src) {
    IntTensor mask = IntTensor::zeros(src.shape());
    for (int64_t i = 0; i < src.numel(); ++i) mask.data()[i] = src.data()[i] != kPad ? 1 : 0;
    return mask;
}

Tensor select_rows(const Tensor& x, int64_t axis, const std::vector<int64_t>& rows) {
    return index_select(x, axis, IntTensor::from_vector(rows, {static_cast<int64_t>(rows.size())}));
}

IntTensor select_rows(const IntTensor& x, const std::vector<int64_t>& rows) {
    check(x.dim() >= 1, "select_rows", "needs an IntTensor of rank >= 1");
    const int64_t count = x.size(0), width = x.numel() / std::max<int64_t>(count, 1);
    std::vector<int64_t> values;
    values.reserve(rows.size() * static_cast<size_t>(width));
    for (int64_t row : rows) {
        check(row >= 0 && row < count, "select_rows", "row ", row, " is outside [0, ", count, ")");
        values.insert(values.end(), x.data() + row * width, x.data() + (row + 1) * width);
    }
    Shape shape = x.shape();
    shape[0] = static_cast<int64_t>(rows.size());
    return IntTensor::from_vector(std::move(values), shape);
}

PreparedDecoder prepare_decoder(const nn::LSTM& rnn, const nn::Linear& fc, int64_t batch, int64_t calls) {
    return {rnn.prepare(batch, calls), RepeatedWeight(fc.weight, batch, calls)};
}

Tensor output_layer(const nn::Linear& fc, const Tensor& x, const PreparedDecoder* prepared) {
    return prepared != nullptr && prepared->fc.tensor().defined() ? fc.forward(x, prepared->fc) : fc.forward(x);
}

Tensor decode_with_teacher_forcing(const IntTensor& tgt_in, float ratio, Generator& gen,
                                   const std::function<Tensor(const IntTensor&)>& step) {
    const int64_t batch = tgt_in.size(0), steps = tgt_in.size(1);
    std::vector<Tensor> logits;
    IntTensor tokens = tgt_in.slice_last(0, 1).reshape({batch});  // <s>
    for (int64_t t = 0; t < steps; ++t) {
        logits.push_back(step(tokens));  // [B, V]
        if (t + 1 == steps) break;
        if (gen.uniform() < ratio) tokens = tgt_in.slice_last(t + 1, t + 2).reshape({batch});
        else tokens = argmax(logits.back().detach(), -1);
    }
    return stack(logits, 1);  // [B, T, V]
}

bool split_batch_pays(const Model& model, int64_t batch, int64_t tokens) {
    const int64_t threads = get_num_threads();
    return batch >= threads && tokens >= threads * kSplitTokens && !grad_enabled() && !model.is_training() &&
           !nn::tracing() && detail::active_op_profile == nullptr;
}

int64_t piece_sequences(int64_t length) { return std::max<int64_t>(1, kPieceTokens / std::max<int64_t>(1, length)); }

Tensor split_batch(int64_t batch, const std::function<Tensor(int64_t begin, int64_t end)>& forward, int64_t piece) {
    check(batch >= 1, "split_batch", "a batch of ", batch, " sequences");
    check(piece >= 1, "split_batch", "pieces of ", piece, " sequences");
    std::mutex mutex;
    std::exception_ptr failure;
    std::vector<std::pair<int64_t, Tensor>> slices;
    // Slices of at least a piece each where the batch has a piece a thread, so that a thread done
    // with its own takes a slower one's, and no thread's share is cut below a piece for it.
    parallel_for(batch, balanced_grain(batch, piece), [&](int64_t begin, int64_t end) {
        try {
            const NoGradGuard no_grad;  // the mode is the thread's own: the caller's does not reach here
            for (int64_t first = begin, last; first < end; first = last) {
                last = first + std::min(piece, end - first);
                Tensor y = forward(first, last);
                check(y.defined() && y.dim() >= 1 && y.size(0) == last - first, "split_batch", "a slice of ",
                      last - first, " rows gave ", y.defined() ? y.shape() : Shape{});
                const std::lock_guard<std::mutex> lock(mutex);
                slices.emplace_back(first, std::move(y));
            }
        } catch (...) {
            const std::lock_guard<std::mutex> lock(mutex);
            if (!failure) failure = std::current_exception();
        }
    });
    if (failure) std::rethrow_exception(failure);
    Shape shape = slices.front().second.shape();
    shape[0] = batch;
    for (const auto& [begin, y] : slices)
        check(y.shape().rank() == shape.rank() &&
                  std::equal(y.shape().begin() + 1, y.shape().end(), shape.begin() + 1, shape.end()),
              "split_batch", "slices gave ", slices.front().second.shape(), " and ", y.shape());
    Tensor joined = Tensor::empty(shape);
    const int64_t row = joined.numel() / batch;
    for (const auto& [begin, y] : slices)
        std::memcpy(joined.data() + begin * row, y.data(), static_cast<size_t>(y.numel()) * sizeof(float));
    return joined;
}

}  // namespace seqgrad::models
