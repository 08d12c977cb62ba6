// Examples encoded as ids, and length-bucketed batches (batching.h).
#include "seqgrad/training/batching.h"

#include <algorithm>
#include <climits>

#include "seqgrad/core/error.h"
#include "seqgrad/core/hash.h"
#include "seqgrad/models/model.h"

namespace seqgrad::training {

using models::kEos;
using models::kPad;
using models::kSos;

EncodedPairs::EncodedPairs(const std::vector<EncodedExample>& examples) {
    for (const EncodedExample& e : examples) add(e);
}

void EncodedPairs::add(std::span<const int32_t> source, std::span<const int32_t> target, int64_t index) {
    ids_.insert(ids_.end(), source.begin(), source.end());
    begins_.push_back(static_cast<int64_t>(ids_.size()));
    ids_.insert(ids_.end(), target.begin(), target.end());
    begins_.push_back(static_cast<int64_t>(ids_.size()));
    index_.push_back(index);
}

void EncodedPairs::add(const EncodedExample& example) {
    std::vector<int32_t> source(example.source.size()), target(example.target.size());
    const auto narrow = [](int64_t id) {
        check(id >= 0 && id <= INT32_MAX, "EncodedPairs", "id ", id, " does not fit 32 bits");
        return static_cast<int32_t>(id);
    };
    std::transform(example.source.begin(), example.source.end(), source.begin(), narrow);
    std::transform(example.target.begin(), example.target.end(), target.begin(), narrow);
    add(source, target, example.index);
}

void EncodedPairs::reserve(int64_t pairs, int64_t tokens) {
    ids_.reserve(static_cast<size_t>(tokens));
    begins_.reserve(static_cast<size_t>(2 * pairs + 1));
    index_.reserve(static_cast<size_t>(pairs));
}

void EncodedPairs::relabel(const std::vector<int32_t>& source_ids, const std::vector<int32_t>& target_ids,
                           int32_t negative) {
    for (int64_t i = 0; i < size(); ++i)
        for (int64_t side = 2 * i; side < 2 * i + 2; ++side) {
            const std::vector<int32_t>& ids = side % 2 == 0 ? source_ids : target_ids;
            for (int64_t at = begins_[static_cast<size_t>(side)]; at < begins_[static_cast<size_t>(side) + 1]; ++at) {
                int32_t& id = ids_[static_cast<size_t>(at)];
                id = id < 0 ? negative : ids.at(static_cast<size_t>(id));
            }
        }
}

EncodedExample EncodedPairs::operator[](int64_t i) const {
    check(i >= 0 && i < size(), "EncodedPairs", "pair ", i, " is out of range for ", size(), " pairs");
    const auto s = source(i), t = target(i);
    return {{s.begin(), s.end()}, {t.begin(), t.end()}, index(i)};
}

namespace {

std::vector<int32_t> encode(const text::Vocabulary& vocab, const std::vector<std::string>& symbols) {
    std::vector<int32_t> ids;
    ids.reserve(symbols.size());
    for (const std::string& s : symbols) ids.push_back(static_cast<int32_t>(vocab.id(s)));
    return ids;
}

}  // namespace

EncodedPairs encode_for_evaluation(const std::vector<Example>& examples, const text::Vocabulary& source_vocab,
                                   const text::Vocabulary& target_vocab) {
    EncodedPairs encoded;
    for (size_t i = 0; i < examples.size(); ++i) {
        const Example& e = examples[i];
        encoded.add(encode(source_vocab, e.source),
                    e.references.empty() ? std::vector<int32_t>{} : encode(target_vocab, e.references[0]),
                    static_cast<int64_t>(i));
    }
    return encoded;
}

Batch make_batch(const EncodedPairs& examples, const std::vector<int64_t>& rows) {
    check(!rows.empty(), "make_batch", "a batch needs at least one example");
    size_t source_length = 0, target_length = 0;
    for (int64_t row : rows) {
        check(row >= 0 && row < examples.size(), "make_batch", "row ", row, " is out of range for ", examples.size(),
              " examples");
        check(!examples.source(row).empty(), "make_batch", "example ", examples.index(row), " has an empty source");
        source_length = std::max(source_length, examples.source(row).size());
        target_length = std::max(target_length, examples.target(row).size());
    }
    const auto batch_size = static_cast<int64_t>(rows.size());
    const auto S = static_cast<int64_t>(source_length);
    const auto T1 = static_cast<int64_t>(target_length) + 2;  // <s> y </s>

    Batch batch;
    batch.src = IntTensor::full({batch_size, S}, kPad);
    batch.tgt = IntTensor::full({batch_size, T1}, kPad);
    for (int64_t b = 0; b < batch_size; ++b) {
        const int64_t row = rows[static_cast<size_t>(b)];
        const std::span<const int32_t> source = examples.source(row), target = examples.target(row);
        std::copy(source.begin(), source.end(), batch.src.data() + b * S);
        int64_t* tgt = batch.tgt.data() + b * T1;
        tgt[0] = kSos;
        std::copy(target.begin(), target.end(), tgt + 1);
        tgt[target.size() + 1] = kEos;
        batch.example_index.push_back(examples.index(row));
        batch.source_tokens += static_cast<int64_t>(source.size());
        batch.target_tokens += static_cast<int64_t>(target.size()) + 1;
    }
    return batch;
}

Batch share_of_batch(const Batch& batch, int rank, int ranks) {
    check(ranks >= 1 && rank >= 0 && rank < ranks, "share_of_batch", "rank ", rank, " is not one of ", ranks);
    const int64_t rows = batch.src.size(0), S = batch.src.size(1), T1 = batch.tgt.size(1);
    const int64_t begin = rows * rank / ranks, end = rows * (rank + 1) / ranks;
    Batch share;
    share.src = IntTensor::zeros({end - begin, S});
    share.tgt = IntTensor::zeros({end - begin, T1});
    std::copy(batch.src.data() + begin * S, batch.src.data() + end * S, share.src.data());
    std::copy(batch.tgt.data() + begin * T1, batch.tgt.data() + end * T1, share.tgt.data());
    share.example_index.assign(batch.example_index.begin() + begin, batch.example_index.begin() + end);
    for (int64_t i = 0; i < share.src.numel(); ++i) share.source_tokens += share.src.data()[i] != kPad ? 1 : 0;
    if (batch.labels.dim() == 1) {  // a class per row
        share.labels =
            IntTensor::from_vector(std::vector<int64_t>(batch.labels.data() + begin, batch.labels.data() + end),
                                   {end - begin});
        share.target_tokens = end - begin;
    } else if (batch.labels.dim() == 2) {  // masked positions
        share.labels = IntTensor::zeros({end - begin, S});
        std::copy(batch.labels.data() + begin * S, batch.labels.data() + end * S, share.labels.data());
        for (int64_t i = 0; i < share.labels.numel(); ++i)
            share.target_tokens += share.labels.data()[i] != kPad ? 1 : 0;
    } else {
        // Predicted positions: every non-pad target symbol but the <s> each row starts with.
        for (int64_t i = 0; i < share.tgt.numel(); ++i) share.target_tokens += share.tgt.data()[i] != kPad ? 1 : 0;
        share.target_tokens -= end - begin;
    }
    return share;
}

namespace {

void check_options(const BatchOptions& options) {
    check(options.max_sentences >= 0 && options.max_tokens >= 0 && options.chunk_size >= 0, "BatchOptions",
          "limits must not be negative (0 means no limit)");
}

// Sorts `order` by source then target length (stable: equal lengths keep their order, which is
// random in training and the examples' order in evaluation).
void sort_by_length(const EncodedPairs& examples, std::vector<int64_t>::iterator first,
                    std::vector<int64_t>::iterator last) {
    std::stable_sort(first, last, [&](int64_t a, int64_t b) {
        const size_t source_a = examples.source(a).size(), source_b = examples.source(b).size();
        if (source_a != source_b) return source_a < source_b;
        return examples.target(a).size() < examples.target(b).size();
    });
}

// Cuts `order` into consecutive batches, each as large as the limits allow.
void cut_batches(const EncodedPairs& examples, std::vector<int64_t>::const_iterator first,
                 std::vector<int64_t>::const_iterator last, const BatchOptions& options,
                 std::vector<std::vector<int64_t>>& batches) {
    std::vector<int64_t> rows;
    size_t source_length = 0, target_cells = 0;  // of the batch being filled
    for (auto it = first; it != last; ++it) {
        const size_t source_size = examples.source(*it).size(), target_size = examples.target(*it).size();
        const size_t new_source = std::max(source_length, source_size);
        const size_t new_target = std::max(target_cells, target_size + 2);
        const auto new_rows = static_cast<int64_t>(rows.size()) + 1;
        const bool too_many = options.max_sentences > 0 && new_rows > options.max_sentences;
        const bool too_large = options.max_tokens > 0 &&
                               new_rows * static_cast<int64_t>(new_source + new_target) > options.max_tokens;
        if (!rows.empty() && (too_many || too_large)) {
            batches.push_back(std::move(rows));
            rows.clear();
            source_length = source_size;
            target_cells = target_size + 2;
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

std::vector<std::vector<int64_t>> plan_batches(const EncodedPairs& examples, const BatchOptions& options,
                                               Generator& gen) {
    check_options(options);
    std::vector<int64_t> order(static_cast<size_t>(examples.size()));
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

std::vector<Batch> make_eval_batches(const EncodedPairs& examples, const BatchOptions& options) {
    check_options(options);
    std::vector<int64_t> order(static_cast<size_t>(examples.size()));
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
    sort_by_length(examples, order.begin(), order.end());
    std::vector<std::vector<int64_t>> plan;
    cut_batches(examples, order.begin(), order.end(), options, plan);
    std::vector<Batch> batches;
    for (const auto& rows : plan) batches.push_back(make_batch(examples, rows));
    return batches;
}

namespace {

// Epoch e's batches, from (seed, e) alone.
std::vector<std::vector<int64_t>> plan_epoch(const EncodedPairs& examples, const BatchOptions& options, uint64_t seed,
                                             int64_t epoch) {
    Generator gen(splitmix64_mix(seed ^ splitmix64_mix(kSplitMixGamma + static_cast<uint64_t>(epoch))));
    return plan_batches(examples, options, gen);
}

}  // namespace

BatchStream::BatchStream(EncodedPairs examples, BatchOptions options, uint64_t seed)
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
