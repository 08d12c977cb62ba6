// Greedy decoding and beam search, written once for every model against Seq2SeqModel's
// start_decoding / decode_step interface (model.h).
#pragma once

#include <vector>

#include "seqgrad/models/model.h"

namespace seqgrad::models {

struct Hypothesis {
    std::vector<int64_t> tokens;  // the output, without <s> and </s>
    float log_prob = 0;           // sum of the log-probabilities of its tokens, </s> included
    float score = 0;              // log_prob / length_penalty (equal to log_prob for greedy)
    bool finished = false;        // ended with </s> (rather than by reaching max_len)
};

struct DecodeOptions {
    int64_t max_len = 50;  // output tokens, </s> included
    int64_t beam_size = 1;
    float length_penalty = 0.6f;  // alpha of GNMT's ((5 + len) / 6)^alpha; 0 turns it off
    // </s> may not end a hypothesis before its min_len-th token (0: from the first). With
    // min_len = max_len every hypothesis runs max_len steps, as a benchmark of decoding wants.
    int64_t min_len = 0;
};

// GNMT's length penalty for a hypothesis of `length` tokens.
float length_penalty(int64_t length, float alpha);

// The most likely next token at each step, for every row of src [B, S]; one hypothesis per row
// (</s> barred before the min_len-th token).
std::vector<Hypothesis> greedy_decode(Seq2SeqModel& model, const IntTensor& src, int64_t max_len, int64_t min_len = 0);

// Batched beam search: beam_size hypotheses per row of src, expanded together as one batch of
// B * beam_size rows; finished hypotheses compete by log_prob / length_penalty. With beam size 1
// it chooses exactly what greedy_decode does.
std::vector<Hypothesis> beam_search(Seq2SeqModel& model, const IntTensor& src, const DecodeOptions& options);

// The same search, keeping each row's `nbest` best hypotheses (1 <= nbest <= beam_size), best
// score first (the hypotheses that max_len cut off compete alike). A row has fewer when fewer
// were found.
std::vector<std::vector<Hypothesis>> beam_search_nbest(Seq2SeqModel& model, const IntTensor& src,
                                                       const DecodeOptions& options, int64_t nbest);

// beam_search, or greedy_decode when options.beam_size is 1.
std::vector<Hypothesis> decode(Seq2SeqModel& model, const IntTensor& src, const DecodeOptions& options);

}  // namespace seqgrad::models
