// The interface every search is written against (search.h), as CTranslate2 writes its searches
// against a decoder and a state, and Marian its beam search against scorers: start a state, feed
// tokens, get the logits of the next one. Both families of models implement it (model.h): a
// sequence-to-sequence model starts from a batch of sources, a language model from nothing; either
// then reads a prefix (<s>, or a prompt) and steps. An ensemble is a decoder made of decoders.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "seqgrad/core/error.h"
#include "seqgrad/core/tensor.h"

namespace seqgrad::models {

// What a decoder carries from one step to the next for a batch of N rows (hypotheses): an
// encoder's output, recurrent states, cached keys and values. Searches reorder its rows.
class DecodingState {
public:
    virtual ~DecodingState() = default;
    // Keeps row rows[i] as the new row i (rows may repeat: a beam that splits; or be left out: a
    // source whose search is done).
    virtual void select_rows(const std::vector<int64_t>& rows) = 0;
    // select_rows for beam search's reordering, where the rows come in groups of `group` (a
    // source's beams) and every rows[i] lies in row i's own group: what is the same for a whole
    // group (the source's encoding) need not move. By default, select_rows.
    virtual void reorder_beams(const std::vector<int64_t>& rows, int64_t group) {
        (void)group;
        select_rows(rows);
    }
};

// The state a decoder's start_decoding made, as that decoder's own type; an Error naming `op` for a
// state another decoder made.
template <class State>
State& own_state(DecodingState& state, const char* op) {
    auto* own = dynamic_cast<State*>(&state);
    check(own != nullptr, op, "the state was not made by this decoder's start_decoding");
    return *own;
}
template <class State>
const State& own_state(const DecodingState& state, const char* op) {
    const auto* own = dynamic_cast<const State*>(&state);
    check(own != nullptr, op, "the state was not made by this decoder's start_decoding");
    return *own;
}

// A decoder that is fed one token at a time (the models' own decoders, models::Decoder among them, are
// layers; this is the interface a search sees of a whole model).
class StepDecoder {
public:
    virtual ~StepDecoder() = default;

    // The state of N rows before any token, from source [N, S]: a sequence-to-sequence model
    // encodes row i's source (S >= 1); a language model has nothing to encode and takes [N, 0].
    virtual std::unique_ptr<DecodingState> start_decoding(const IntTensor& source) = 0;
    // Feeds one token per row, tokens [N], and returns the logits of the next one, [N, V].
    virtual Tensor decode_step(DecodingState& state, const IntTensor& tokens) = 0;
    // Feeds a prefix of P >= 1 tokens per row, prefix [N, P], and returns the logits after its
    // last one, [N, V]: decode_step P times, unless the decoder knows a faster way with the same
    // result (one pass over the whole prefix).
    virtual Tensor prefill(DecodingState& state, const IntTensor& prefix);
    // The most tokens a state can be fed, prefix included (a Transformer's positional table).
    virtual int64_t max_decode_length() const { return INT64_MAX; }
};

}  // namespace seqgrad::models
