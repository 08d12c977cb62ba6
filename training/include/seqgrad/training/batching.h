// Examples as token ids, and length-bucketed batches: for training (shuffled, replayable from a
// seed and a position) and for evaluation (sorted, no randomness).
#pragma once

#include <cstdint>
#include <span>
#include <vector>
#include <string>
#include <vector>

#include "seqgrad/core/random.h"
#include "seqgrad/core/tensor.h"
#include "seqgrad/text/vocabulary.h"
#include "seqgrad/training/dataset.h"

namespace seqgrad::training {

// An example as ids: the source, one reference, and which Example it came from.
struct EncodedExample {
    std::vector<int64_t> source;
    std::vector<int64_t> target;  // without <s> and </s>
    int64_t index = 0;            // position of its Example in the split
};

// Many EncodedExamples, stored compactly: every pair's ids in one array of 32-bit ids (vocabularies
// are far below 2^31), so a million pairs of 40 symbols a side take about 330 MB rather than the
// gigabytes of as many vectors.
class EncodedPairs {
public:
    EncodedPairs() = default;
    EncodedPairs(const std::vector<EncodedExample>& examples);  // NOLINT: a list converts implicitly

    void add(std::span<const int32_t> source, std::span<const int32_t> target, int64_t index);
    void add(const EncodedExample& example);
    void reserve(int64_t pairs, int64_t tokens);
    // Replaces every source id s by source_ids[s] and every target id t by target_ids[t], in place.
    // An id of -1 becomes `negative`.
    void relabel(const std::vector<int32_t>& source_ids, const std::vector<int32_t>& target_ids, int32_t negative);

    int64_t size() const { return static_cast<int64_t>(index_.size()); }
    bool empty() const { return index_.empty(); }
    std::span<const int32_t> source(int64_t i) const { return span(2 * i); }
    std::span<const int32_t> target(int64_t i) const { return span(2 * i + 1); }
    int64_t index(int64_t i) const { return index_[static_cast<size_t>(i)]; }
    EncodedExample operator[](int64_t i) const;  // a copy, for tests and messages
    int64_t tokens() const { return static_cast<int64_t>(ids_.size()); }

private:
    std::span<const int32_t> span(int64_t side) const {
        const auto begin = static_cast<size_t>(begins_[static_cast<size_t>(side)]);
        const auto end = static_cast<size_t>(begins_[static_cast<size_t>(side) + 1]);
        return {ids_.data() + begin, end - begin};
    }

    std::vector<int32_t> ids_;
    std::vector<int64_t> begins_ = {0};  // pair i: source [begins_[2i], begins_[2i+1]), target up to [2i+2]
    std::vector<int64_t> index_;
};

// For evaluation: one per example (target = its first reference, or empty if it has none),
// so each word is decoded once and scored against all its references.
EncodedPairs encode_for_evaluation(const std::vector<Example>& examples, const text::Vocabulary& source_vocab,
                                   const text::Vocabulary& target_vocab);

// A batch: a sequence-to-sequence model's source and target, a language model's window (as its
// target, with a source of [B, 0]), or an encoder's rows (as the source) with their labels.
struct Batch {
    IntTensor src;  // [B, S], right-padded with kPad
    IntTensor tgt;  // [B, T+1]: <s> y1 .. yn </s> then kPad ([B, 0] for an encoder)
    // An encoder's: [B, S], the true token at each masked position and kPad elsewhere (a masked
    // language model), or [B], each row's class (a classifier). Empty otherwise.
    IntTensor labels;
    std::vector<int64_t> example_index;  // [B]: EncodedExample::index of each row
    int64_t source_tokens = 0;           // real (non-pad) source tokens
    // Predicted positions: the y's and each </s>; an encoder's masked positions, or its rows.
    int64_t target_tokens = 0;
};

struct BatchOptions {
    int64_t max_sentences = 256;  // rows per batch; 0 for no limit
    // Cells in src plus tgt, padding included (B * (S + T + 1)); 0 for no limit. An example
    // larger than this on its own still gets a batch.
    int64_t max_tokens = 0;
    // Examples shuffled together, then sorted by length and cut into batches: large enough that
    // batches hold similar lengths (little padding), small enough that their mix stays random.
    int64_t chunk_size = 16384;  // 0: all examples in one chunk
};

// Builds the batch of the given rows of `examples`. An empty source is an Error.
Batch make_batch(const EncodedPairs& examples, const std::vector<int64_t>& rows);

// Rank `rank`'s share of `batch` when `ranks` processes train on it together: the contiguous rows
// [B * rank / ranks, B * (rank + 1) / ranks), padded to the batch's own widths (so that each row is
// computed exactly as in the whole batch), with their token counts. It may have no rows (a batch
// smaller than the number of ranks); the shares of all ranks are the batch.
Batch share_of_batch(const Batch& batch, int rank, int ranks);

// One training epoch's batches: shuffled, sorted by length within chunks, cut by the limits, then
// the batch order shuffled. Every example is in exactly one batch; the same generator state gives
// the same batches.
std::vector<std::vector<int64_t>> plan_batches(const EncodedPairs& examples, const BatchOptions& options,
                                               Generator& gen);
// Evaluation batches: sorted by length (least padding), no randomness.
std::vector<Batch> make_eval_batches(const EncodedPairs& examples, const BatchOptions& options);

// Where a BatchStream is, for a checkpoint: resuming from it replays the same batches.
struct BatchStreamState {
    int64_t epoch = 0;       // epochs finished
    int64_t next_batch = 0;  // batches of the current epoch already handed out
};

// Training batches, one after another, from a position a checkpoint can store: a task's (pairs
// bucketed by length, BatchStream below; windows of a text, text_data.h's WindowStream).
class BatchSource {
public:
    virtual ~BatchSource() = default;
    virtual Batch next() = 0;  // moves on to the next epoch after the last batch of this one
    virtual BatchStreamState state() const = 0;
    virtual void restore(const BatchStreamState& state) = 0;  // Error if next_batch is past the epoch's end
    virtual int64_t batches_in_epoch() const = 0;
};

// Training batches of pairs, epoch after epoch. Epoch e is planned with a generator seeded from
// (seed, e) alone, so the stream can be restored at any batch without replaying earlier ones.
class BatchStream : public BatchSource {
public:
    BatchStream(EncodedPairs examples, BatchOptions options, uint64_t seed);

    Batch next() override;
    BatchStreamState state() const override { return state_; }
    void restore(const BatchStreamState& state) override;
    int64_t batches_in_epoch() const override { return static_cast<int64_t>(plan_.size()); }
    int64_t examples() const { return examples_.size(); }

private:
    EncodedPairs examples_;
    BatchOptions options_;
    uint64_t seed_;
    BatchStreamState state_;
    std::vector<std::vector<int64_t>> plan_;  // the current epoch's batches, as rows
};

}  // namespace seqgrad::training
