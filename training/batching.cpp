// Examples encoded as ids, and length-bucketed batches (batching.h).
#include "seqgrad/training/batching.h"

#include <algorithm>

#include "seqgrad/core/error.h"
#include "seqgrad/models/model.h"

namespace seqgrad::training {

using models::kEos;
using models::kPad;
using models::kSos;

std::vector<EncodedExample> encode_for_training(const std::vector<Example>& examples,
                                                const Vocabulary& source_vocab,
                                                const Vocabulary& target_vocab) {
    std::vector<EncodedExample> encoded;
    encoded.reserve(examples.size());
    for (size_t i = 0; i < examples.size(); ++i) {
        const std::vector<int64_t> source = source_vocab.encode(examples[i].source);
        for (const auto& reference : examples[i].references)
            encoded.push_back({source, target_vocab.encode(reference), static_cast<int64_t>(i)});
    }
    return encoded;
}

std::vector<EncodedExample> encode_for_evaluation(const std::vector<Example>& examples,
                                                  const Vocabulary& source_vocab,
                                                  const Vocabulary& target_vocab) {
    std::vector<EncodedExample> encoded;
    encoded.reserve(examples.size());
    for (size_t i = 0; i < examples.size(); ++i) {
        const Example& e = examples[i];
        encoded.push_back({source_vocab.encode(e.source),
                           e.references.empty() ? std::vector<int64_t>{} : target_vocab.encode(e.references[0]),
                           static_cast<int64_t>(i)});
    }
    return encoded;
}

Batch make_batch(const std::vector<EncodedExample>& examples, const std::vector<int64_t>& rows) {
    check(!rows.empty(), "make_batch", "a batch needs at least one example");
    size_t source_length = 0, target_length = 0;
    for (int64_t row : rows) {
        check(row >= 0 && row < static_cast<int64_t>(examples.size()), "make_batch", "row ", row,
              " is out of range for ", examples.size(), " examples");
        const EncodedExample& e = examples[static_cast<size_t>(row)];
        check(!e.source.empty(), "make_batch", "example ", e.index, " has an empty source");
        source_length = std::max(source_length, e.source.size());
        target_length = std::max(target_length, e.target.size());
    }
    const auto batch_size = static_cast<int64_t>(rows.size());
    const auto S = static_cast<int64_t>(source_length);
    const auto T1 = static_cast<int64_t>(target_length) + 2;  // <s> y </s>

    Batch batch;
    batch.src = IntTensor::full({batch_size, S}, kPad);
    batch.tgt = IntTensor::full({batch_size, T1}, kPad);
    for (int64_t b = 0; b < batch_size; ++b) {
        const EncodedExample& e = examples[static_cast<size_t>(rows[static_cast<size_t>(b)])];
        std::copy(e.source.begin(), e.source.end(), batch.src.data() + b * S);
        int64_t* tgt = batch.tgt.data() + b * T1;
        tgt[0] = kSos;
        std::copy(e.target.begin(), e.target.end(), tgt + 1);
        tgt[e.target.size() + 1] = kEos;
        batch.example_index.push_back(e.index);
        batch.source_tokens += static_cast<int64_t>(e.source.size());
        batch.target_tokens += static_cast<int64_t>(e.target.size()) + 1;
    }
    return batch;
}

namespace {

void check_options(const BatchOptions& options) {
    check(options.max_sentences >= 0 && options.max_tokens >= 0 && options.chunk_size >= 0, "BatchOptions",
          "limits must not be negative (0 means no limit)");
}

// Sorts `order` by source then target length (stable: equal lengths keep their order, which is
// random in training and the examples' order in evaluation).
void sort_by_length(const std::vector<EncodedExample>& examples, std::vector<int64_t>::iterator first,
                    std::vector<int64_t>::iterator last) {
    std::stable_sort(first, last, [&](int64_t a, int64_t b) {
        const EncodedExample& x = examples[static_cast<size_t>(a)];
        const EncodedExample& y = examples[static_cast<size_t>(b)];
        if (x.source.size() != y.source.size()) return x.source.size() < y.source.size();
        return x.target.size() < y.target.size();
    });
}

// Cuts `order` into consecutive batches, each as large as the limits allow.
void cut_batches(const std::vector<EncodedExample>& examples, std::vector<int64_t>::const_iterator first,
                 std::vector<int64_t>::const_iterator last, const BatchOptions& options,
                 std::vector<std::vector<int64_t>>& batches) {
    std::vector<int64_t> rows;
    size_t source_length = 0, target_cells = 0;  // of the batch being filled
    for (auto it = first; it != last; ++it) {
        const EncodedExample& e = examples[static_cast<size_t>(*it)];
        const size_t new_source = std::max(source_length, e.source.size());
        const size_t new_target = std::max(target_cells, e.target.size() + 2);
        const auto new_rows = static_cast<int64_t>(rows.size()) + 1;
        const bool too_many = options.max_sentences > 0 && new_rows > options.max_sentences;
        const bool too_large =
            options.max_tokens > 0 && new_rows * static_cast<int64_t>(new_source + new_target) > options.max_tokens;
        if (!rows.empty() && (too_many || too_large)) {
            batches.push_back(std::move(rows));
            rows.clear();
            source_length = e.source.size();
            target_cells = e.target.size() + 2;
        } else {
            source_length = new_source;
            target_cells = new_target;
        }
        rows.push_back(*it);
    }
    if (!rows.empty()) batches.push_back(std::move(rows));
}

template <typename T>
void shuffle(std::vector<T>& items, Generator& gen) {  // Fisher-Yates, with seqgrad's generator
    for (size_t i = items.size(); i > 1; --i) std::swap(items[i - 1], items[gen.below(i)]);
}

}  // namespace

std::vector<std::vector<int64_t>> plan_batches(const std::vector<EncodedExample>& examples,
                                               const BatchOptions& options, Generator& gen) {
    check_options(options);
    std::vector<int64_t> order(examples.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
    shuffle(order, gen);

    const size_t chunk = options.chunk_size > 0 ? static_cast<size_t>(options.chunk_size) : order.size();
    std::vector<std::vector<int64_t>> batches;
    for (size_t start = 0; start < order.size(); start += chunk) {
        const auto first = order.begin() + static_cast<std::ptrdiff_t>(start);
        const auto last = order.begin() + static_cast<std::ptrdiff_t>(std::min(start + chunk, order.size()));
        sort_by_length(examples, first, last);
        cut_batches(examples, first, last, options, batches);
    }
    shuffle(batches, gen);
    return batches;
}

std::vector<Batch> make_batches(const std::vector<EncodedExample>& examples, const BatchOptions& options,
                                Generator& gen) {
    std::vector<Batch> batches;
    for (const auto& rows : plan_batches(examples, options, gen)) batches.push_back(make_batch(examples, rows));
    return batches;
}

std::vector<Batch> make_eval_batches(const std::vector<EncodedExample>& examples, const BatchOptions& options) {
    check_options(options);
    std::vector<int64_t> order(examples.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
    sort_by_length(examples, order.begin(), order.end());
    std::vector<std::vector<int64_t>> plan;
    cut_batches(examples, order.begin(), order.end(), options, plan);
    std::vector<Batch> batches;
    for (const auto& rows : plan) batches.push_back(make_batch(examples, rows));
    return batches;
}

namespace {

// splitmix64's finaliser: a well-mixed 64-bit hash of a 64-bit value.
uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

// Epoch e's batches, from (seed, e) alone.
std::vector<std::vector<int64_t>> plan_epoch(const std::vector<EncodedExample>& examples,
                                             const BatchOptions& options, uint64_t seed, int64_t epoch) {
    Generator gen(mix64(seed ^ mix64(0x9E3779B97F4A7C15ULL + static_cast<uint64_t>(epoch))));
    return plan_batches(examples, options, gen);
}

}  // namespace

BatchStream::BatchStream(std::vector<EncodedExample> examples, BatchOptions options, uint64_t seed)
    : examples_(std::move(examples)), options_(options), seed_(seed) {
    check(!examples_.empty(), "BatchStream", "no examples to batch");
    plan_ = plan_epoch(examples_, options_, seed_, 0);
}

Batch BatchStream::next() {
    Batch batch = make_batch(examples_, plan_[static_cast<size_t>(state_.next_batch)]);
    // Moving on as soon as an epoch's last batch is out makes state().epoch the epochs finished.
    if (++state_.next_batch == batches_in_epoch()) {
        ++state_.epoch;
        state_.next_batch = 0;
        plan_ = plan_epoch(examples_, options_, seed_, state_.epoch);
    }
    return batch;
}

void BatchStream::restore(const BatchStreamState& state) {
    check(state.epoch >= 0 && state.next_batch >= 0, "BatchStream::restore", "a negative position");
    std::vector<std::vector<int64_t>> plan = plan_epoch(examples_, options_, seed_, state.epoch);
    check(state.next_batch < static_cast<int64_t>(plan.size()), "BatchStream::restore", "batch ", state.next_batch,
          " is past the end of epoch ", state.epoch, " (", plan.size(), " batches)");
    state_ = state;
    plan_ = std::move(plan);
}

}  // namespace seqgrad::training
