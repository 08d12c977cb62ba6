// The key/value cache of attention that steps: a decoder's self-attention layers, decoding one
// position at a time, keep every earlier position's keys and values instead of recomputing them
// (the seeds' incremental decoding). One cache serves all the layers of a decoder, with or without
// cross-attention (the Transformer's decoder, a language model).
//
// Keys and values never move once written. Each layer stores them in [M, C, width] tensors (M
// cache rows of C positions); a decoding row (a hypothesis) finds its positions through one table
// of rows shared by the layers: row i's position j is in cache row table[i, j]. A step writes
// position t of row i in cache row i. Beam search's reordering (row i takes row r's history) copies
// row r's table, a few integers, instead of every layer's keys; core's gathered_attention reads
// through the table.
#pragma once

#include <cstdint>
#include <vector>

#include "seqgrad/core/tensor.h"
#include "seqgrad/nn/attention.h"

namespace seqgrad::nn {

class KeyValueCache {
public:
    KeyValueCache() = default;
    // An empty cache for `rows` rows and `layers` layers of keys `width` wide; it grows up to
    // `max_positions` positions (a model's longest sequence).
    KeyValueCache(int64_t rows, int64_t layers, int64_t width, int64_t max_positions);

    int64_t rows() const { return table_.size(0); }  // N
    int64_t length() const { return length_; }       // positions so far
    int64_t layers() const { return static_cast<int64_t>(stored_.size()); }
    int64_t capacity() const { return table_.size(1); }  // C: positions the storage holds per row

    // Adds `positions` positions t = length() .. for every row, to be written by each layer (write)
    // before they are read; makes room first, growing the storage geometrically (what it holds
    // stays). Returns the first, t. Error past max_positions.
    int64_t advance(int64_t positions = 1);
    // Writes `layer`'s keys and values of the newest P positions, [N, P, width] each: row i's into
    // cache row i.
    void write(int64_t layer, const KeysValues& now);

    // `layer`'s storage, [M, C, width] each (M >= N), and the table of rows, [N, C]: what
    // gathered_attention reads for the first length() positions.
    const KeysValues& stored(int64_t layer) const { return stored_.at(static_cast<size_t>(layer)); }
    const IntTensor& table() const { return table_; }

    // Row i takes row rows[i]'s history (rows may repeat or drop rows, as beam search does): only
    // the table changes; the storage gains cache rows when there are more rows than it holds.
    void select_rows(const std::vector<int64_t>& rows);
    // select_rows within groups of `group` rows (a source's beams), one row for each: only the
    // table changes. Error if a row leaves its group.
    void reorder_beams(const std::vector<int64_t>& rows, int64_t group);

private:
    void reserve(int64_t positions);

    IntTensor table_;                 // [N, C]
    std::vector<KeysValues> stored_;  // one per layer, [M, C, width] each
    int64_t width_ = 0;
    int64_t max_positions_ = 0;
    int64_t length_ = 0;
};

}  // namespace seqgrad::nn
