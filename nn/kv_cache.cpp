// The key/value cache of attention that steps (kv_cache.h).
#include "seqgrad/nn/kv_cache.h"

#include <algorithm>

#include "seqgrad/core/error.h"

namespace seqgrad::nn {
namespace {

const char* kOp = "KeyValueCache";

}  // namespace

KeyValueCache::KeyValueCache(int64_t rows, int64_t layers, int64_t width, int64_t max_positions)
    : table_(IntTensor::zeros({rows, 0})),
      stored_(static_cast<size_t>(layers)),
      width_(width),
      max_positions_(max_positions) {
    check(rows >= 0 && layers >= 0 && width > 0 && max_positions > 0, kOp, "needs rows and layers >= 0 and a positive ",
          "width and length, got ", rows, ", ", layers, ", ", width, ", ", max_positions);
}

void KeyValueCache::reserve(int64_t positions) {
    const int64_t capacity = this->capacity(), n = rows(), t = length_;
    if (positions <= capacity) return;
    const int64_t grown = std::max(positions, std::min(max_positions_, std::max<int64_t>(32, 2 * capacity)));
    IntTensor table = IntTensor::zeros({n, grown});
    for (int64_t i = 0; i < n; ++i) std::copy_n(table_.data() + i * capacity, t, table.data() + i * grown);
    table_ = table;
    for (KeysValues& kv : stored_) {
        const int64_t cache_rows = kv.keys.defined() ? std::max(n, kv.keys.size(0)) : n;
        // Left unset: a position is read only after its step has written it (the table says which
        // cache row holds it), so zeroing hundreds of megabytes per batch would buy nothing.
        KeysValues bigger{Tensor::empty({cache_rows, grown, width_}), Tensor::empty({cache_rows, grown, width_})};
        if (kv.keys.defined())
            for (int64_t r = 0; r < kv.keys.size(0); ++r) {
                std::copy_n(kv.keys.data() + r * capacity * width_, t * width_,
                            bigger.keys.data() + r * grown * width_);
                std::copy_n(kv.values.data() + r * capacity * width_, t * width_,
                            bigger.values.data() + r * grown * width_);
            }
        kv = bigger;
    }
}

int64_t KeyValueCache::advance(int64_t positions) {
    const int64_t t = length_;
    check(positions >= 1, kOp, "advances by one position or more, got ", positions);
    check(t + positions <= max_positions_, kOp, "position ", t + positions - 1, " is beyond the longest sequence, ",
          max_positions_);
    reserve(t + positions);
    const int64_t capacity = this->capacity();
    for (int64_t i = 0; i < rows(); ++i)
        for (int64_t p = t; p < t + positions; ++p) table_.data()[i * capacity + p] = i;
    length_ += positions;
    return t;
}

void KeyValueCache::write(int64_t layer, const KeysValues& now) {
    check(layer >= 0 && layer < layers(), kOp, "layer ", layer, " is outside [0, ", layers(), ")");
    const int64_t n = rows(), capacity = this->capacity();
    check(now.keys.dim() == 3 && now.keys.shape() == now.values.shape() && now.keys.size(0) == n &&
              now.keys.size(2) == width_ && now.keys.size(1) >= 1 && now.keys.size(1) <= length_,
          kOp, "writes [", n, ", P, ", width_, "] keys and values of the newest P <= ", length_, " positions, got ",
          now.keys.shape(), " and ", now.values.shape());
    const int64_t positions = now.keys.size(1), first = length_ - positions;
    KeysValues& cached = stored_[static_cast<size_t>(layer)];
    for (int64_t i = 0; i < n; ++i) {
        const int64_t from = i * positions * width_, to = (i * capacity + first) * width_;
        std::copy_n(now.keys.data() + from, positions * width_, cached.keys.data() + to);
        std::copy_n(now.values.data() + from, positions * width_, cached.values.data() + to);
    }
}

void KeyValueCache::select_rows(const std::vector<int64_t>& rows) {
    const int64_t t = length_, capacity = this->capacity();
    for (size_t i = 0; i < rows.size(); ++i)
        check(rows[i] >= 0 && rows[i] < this->rows(), "select_rows", "index ", rows[i], " at position ", i,
              " is outside [0, ", this->rows(), ")");
    const auto n = static_cast<int64_t>(rows.size());
    IntTensor table = IntTensor::zeros({n, capacity});
    for (int64_t i = 0; i < n; ++i)
        std::copy_n(table_.data() + rows[static_cast<size_t>(i)] * capacity, t, table.data() + i * capacity);
    table_ = table;
    // Step t writes row i's position t in cache row i: more rows than the storage holds need more
    // cache rows (the old ones keep their contents).
    for (KeysValues& kv : stored_) {
        if (!kv.keys.defined() || kv.keys.size(0) >= n) continue;
        KeysValues bigger{Tensor::empty({n, capacity, width_}), Tensor::empty({n, capacity, width_})};
        std::copy_n(kv.keys.data(), kv.keys.numel(), bigger.keys.data());
        std::copy_n(kv.values.data(), kv.values.numel(), bigger.values.data());
        kv = bigger;
    }
}

void KeyValueCache::reorder_beams(const std::vector<int64_t>& rows, int64_t group) {
    check(group >= 1, "reorder_beams", "group must be at least 1, got ", group);
    check(static_cast<int64_t>(rows.size()) == this->rows(), "reorder_beams", "takes one row for each of the ",
          this->rows(), " rows, got ", rows.size());
    for (size_t i = 0; i < rows.size(); ++i)
        check(rows[i] / group == static_cast<int64_t>(i) / group, "reorder_beams", "row ", rows[i],
              " is not in the group of row ", i);
    const int64_t t = length_, capacity = this->capacity();
    IntTensor table = table_;  // a copy (IntTensor holds its values)
    for (size_t i = 0; i < rows.size(); ++i)
        std::copy_n(table_.data() + rows[i] * capacity, t, table.data() + static_cast<int64_t>(i) * capacity);
    table_ = table;
}

}  // namespace seqgrad::nn
