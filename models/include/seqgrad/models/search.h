// Choosing output tokens, written once for every model against the decoder interface (step_decoder.h):
// beam search (n-best), and one hypothesis per row, each step's token chosen by a sampler: the
// most likely one (greedy search), or one drawn at random (temperature, top-k, top-p). A search
// starts from a prefix that the decoder reads first: <s> for a sequence-to-sequence model, a
// prompt for a language model. search() is the one place that picks the search from the options.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "seqgrad/core/ops.h"
#include "seqgrad/core/option_info.h"
#include "seqgrad/core/random.h"
#include "seqgrad/models/step_decoder.h"

namespace seqgrad::models {

struct Hypothesis {
    std::vector<int64_t> tokens;  // the output after the prefix, without </s>
    float log_prob = 0;           // sum of the log-probabilities of its tokens, </s> included
    float score = 0;              // log_prob / length_penalty (equal to log_prob without beam search)
    bool finished = false;        // ended with </s> (rather than by reaching max_len)
};

// Every choice of a search, for every caller (evaluation, the Translator, `seqgrad predict`,
// generation). The first three are in the order older code initialises them.
struct DecodingOptions {
    // Output tokens, </s> included; 0: default_max_length of the source (what each caller of a
    // sequence-to-sequence model wants unless told otherwise). The decoder's own limit
    // (max_decode_length, the prefix included) caps it either way.
    int64_t max_len = 0;
    int64_t beam_size = 1;        // 1: one hypothesis per row, chosen token by token
    float length_penalty = 0.6f;  // beam search: GNMT's alpha in ((5 + len) / 6)^alpha; 0 turns it off
    // </s> may not end a hypothesis before its min_len-th token (0: from the first). With
    // min_len = max_len every hypothesis runs max_len steps, as a benchmark of decoding wants.
    int64_t min_len = 0;
    int64_t nbest = 1;  // hypotheses kept per row, 1 <= nbest <= beam_size

    // Sampling (beam size 1): temperature 0 takes the most likely token; above 0 the token is
    // drawn from softmax(logits / temperature), among the top_k most likely (0: all) and within
    // the smallest set of most likely tokens whose probability reaches top_p (1: all).
    float temperature = 0;
    int64_t top_k = 0;
    float top_p = 1;
    uint64_t seed = 1;  // of the sampler's generator: the same seed draws the same tokens

    // The Translator and evaluation decode their inputs in batches of at most this many
    // hypotheses (inputs x beam), and at most 256 inputs.
    int64_t max_hypotheses = 2048;

    // Tokens no search chooses (besides </s> before min_len), whatever their probability: a text
    // generator bars <pad> and <s>, which no text a language model learns from holds.
    std::vector<int64_t> barred{};

    // Throws Error naming the first option out of range. Every range is the options' table's
    // (search.cpp), which also makes the command line's flags.
    void validate() const;
    // The options a command line offers (`seqgrad eval`, `predict` and `generate` each take some),
    // and setting one from the words given to its flag, read and checked as the table says.
    // Their help shows `defaults`' values.
    static std::vector<OptionInfo> options();
    static std::vector<OptionInfo> options(const DecodingOptions& defaults);
    void set(const std::string& key, const std::vector<std::string>& words);
};

// The widest beam a search takes. Beam search runs every beam of every input as a row of one
// batch (with a key/value cache per row), so memory grows with the beam; past a few dozen beams
// G2P gains nothing.
inline constexpr int64_t kMaxBeamSize = 256;

// The longest output a source of `source_length` tokens gets by default: twice its length plus
// 10, and at least 40 (a pronunciation, a sentence and its translation all fit).
int64_t default_max_length(int64_t source_length);

// Inputs decoded together under these options: max_hypotheses / beam_size, between 1 and 256.
int64_t inputs_per_batch(const DecodingOptions& options);

// GNMT's length penalty for a hypothesis of `length` tokens.
float length_penalty(int64_t length, float alpha);

// How one hypothesis per row chooses its next token.
class Sampler {
public:
    virtual ~Sampler() = default;
    // For each row of logits [N, V]: the chosen token and the model's log-probability of it
    // (log_softmax of the logits, whatever the sampler's temperature), [N, 1] each. The tokens in
    // `barred` are never chosen; a row with nothing to choose gets index -1.
    virtual TopK choose(const Tensor& logits, std::span<const int64_t> barred) = 0;
};

// The most likely token (greedy search): log_softmax_top_k's first.
class BestSampler : public Sampler {
public:
    TopK choose(const Tensor& logits, std::span<const int64_t> barred) override;
};

// A token drawn from softmax(logits / temperature) restricted to the top_k most likely tokens
// and then to the smallest set whose probability reaches top_p (renormalised), rows in order,
// from a generator seeded once.
class RandomSampler : public Sampler {
public:
    RandomSampler(float temperature, int64_t top_k, float top_p, uint64_t seed);
    TopK choose(const Tensor& logits, std::span<const int64_t> barred) override;

private:
    float temperature_;
    int64_t top_k_;
    float top_p_;
    Generator gen_;
};

// The sampler the options ask for: BestSampler at temperature 0, else a RandomSampler.
std::unique_ptr<Sampler> make_sampler(const DecodingOptions& options);

// Called with (row, token) as a search without beams chooses each token (not </s>), in order:
// what streaming output reads.
using TokenCallback = std::function<void(int64_t row, int64_t token)>;

// The prefix of a sequence-to-sequence search: <s> in each of `rows` rows, [rows, 1].
IntTensor start_of_sequence(int64_t rows);

// Searches for the output of each of N rows: the decoder starts from source [N, S] (S = 0 for a
// language model) and reads prefix [N, P >= 1]; then beam search when options.beam_size > 1
// (finished hypotheses compete by log_prob / length_penalty; n-best lists), else one hypothesis
// per row with make_sampler(options). Each row's hypotheses come best first (nbest of them, or
// fewer where fewer were found). With beam size 1 and temperature 0 both searches choose the same.
std::vector<std::vector<Hypothesis>> search(StepDecoder& decoder, const IntTensor& source, const IntTensor& prefix,
                                            const DecodingOptions& options, const TokenCallback& on_token = {});
// The same from <s> (a sequence-to-sequence model).
std::vector<std::vector<Hypothesis>> search(StepDecoder& decoder, const IntTensor& source,
                                            const DecodingOptions& options);
// The same from a state the caller started (an ensemble's, whose models each read their own
// source: ensemble.h), for prefix [N, P >= 1] of as many rows as the state; `source_length` (the
// sources' width) sets the default max_len as a source [N, source_length] would.
std::vector<std::vector<Hypothesis>> search(StepDecoder& decoder, std::unique_ptr<DecodingState> state,
                                            int64_t source_length, const IntTensor& prefix,
                                            const DecodingOptions& options, const TokenCallback& on_token = {});

// Beam search at the options' width, 1 included (search() runs it for wider beams only): with one
// beam it chooses what greedy search chooses, which the tests hold it to.
std::vector<std::vector<Hypothesis>> beam_search(StepDecoder& decoder, const IntTensor& source, const IntTensor& prefix,
                                                 const DecodingOptions& options);

// The best hypothesis of each row from <s> (a sequence-to-sequence model): greedy search, or beam
// search at the options' width.
std::vector<Hypothesis> greedy_decode(StepDecoder& decoder, const IntTensor& src, int64_t max_len, int64_t min_len = 0);
std::vector<Hypothesis> beam_search(StepDecoder& decoder, const IntTensor& src, const DecodingOptions& options);

}  // namespace seqgrad::models
