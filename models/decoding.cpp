// Greedy decoding and batched beam search over any model's decoding interface.
#include "seqgrad/models/decoding.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "seqgrad/core/autograd.h"
#include "seqgrad/core/ops.h"
#include "seqgrad/core/threads.h"

namespace seqgrad::models {

float length_penalty(int64_t length, float alpha) {
    return std::pow((5.0f + static_cast<float>(length)) / 6.0f, alpha);
}

namespace {

void check_source(const IntTensor& src, const char* op) {
    check(src.dim() == 2 && src.size(0) > 0 && src.size(1) > 0, op, "src must be a non-empty [batch, length], got ",
          src.shape());
}

}  // namespace

std::vector<Hypothesis> greedy_decode(Seq2SeqModel& model, const IntTensor& src, int64_t max_len, int64_t min_len) {
    check_source(src, "greedy_decode");
    check(max_len > 0, "greedy_decode", "max_len must be positive, got ", max_len);
    check(min_len >= 0, "greedy_decode", "min_len must not be negative, got ", min_len);
    max_len = std::min(max_len, model.max_decode_length());
    NoGradGuard no_grad;
    const int64_t batch = src.size(0);
    auto state = model.start_decoding(src);
    std::vector<Hypothesis> out(static_cast<size_t>(batch));
    // The state's rows are the unfinished sources, in order: a finished one leaves the batch.
    std::vector<int64_t> active(static_cast<size_t>(batch));
    std::iota(active.begin(), active.end(), int64_t{0});
    IntTensor tokens = IntTensor::full({batch}, kSos);
    for (int64_t t = 0; t < max_len && !active.empty(); ++t) {
        // The best token of each row (</s> barred before the min_len-th) and its log-probability.
        const TopK best = log_softmax_top_k(model.decode_step(*state, tokens), 1, t + 1 < min_len ? kEos : -1);
        std::vector<int64_t> kept, kept_tokens;  // rows of the state going on, and their tokens
        for (size_t a = 0; a < active.size(); ++a) {
            Hypothesis& h = out[static_cast<size_t>(active[a])];
            const int64_t token = best.indices.data()[a];
            check(token >= 0, "greedy_decode", "no token to choose: the vocabulary holds </s> alone");
            h.log_prob += best.values.data()[a];
            if (token == kEos) {
                h.finished = true;
                continue;
            }
            h.tokens.push_back(token);
            kept.push_back(static_cast<int64_t>(a));
            kept_tokens.push_back(token);
        }
        if (kept.size() < active.size() && !kept.empty()) {
            state->select_rows(kept);
            std::vector<int64_t> still;
            for (const int64_t a : kept) still.push_back(active[static_cast<size_t>(a)]);
            active = std::move(still);
        } else if (kept.empty()) {
            active.clear();
        }
        tokens = IntTensor::from_vector(std::move(kept_tokens), {static_cast<int64_t>(active.size())});
    }
    for (Hypothesis& h : out) h.score = h.log_prob;
    return out;
}

std::vector<std::vector<Hypothesis>> beam_search_nbest(Seq2SeqModel& model, const IntTensor& src,
                                                       const DecodeOptions& options, int64_t nbest) {
    check_source(src, "beam_search");
    check(options.beam_size >= 1, "beam_search", "beam size must be at least 1, got ", options.beam_size);
    check(nbest >= 1 && nbest <= options.beam_size, "beam_search", "nbest must be in 1..", options.beam_size,
          " (the beam size), got ", nbest);
    check(options.max_len > 0, "beam_search", "max_len must be positive, got ", options.max_len);
    check(options.min_len >= 0, "beam_search", "min_len must not be negative, got ", options.min_len);
    NoGradGuard no_grad;
    const int64_t batch = src.size(0), k = options.beam_size;
    const int64_t max_len = std::min(options.max_len, model.max_decode_length());
    auto state = model.start_decoding(src);
    struct Beam {
        std::vector<int64_t> tokens;
        float log_prob = 0;
        bool alive = false;
    };
    std::vector<Beam> beams(static_cast<size_t>(batch * k));
    for (int64_t b = 0; b < batch; ++b) beams[static_cast<size_t>(b * k)].alive = true;  // one start per source
    std::vector<std::vector<Hypothesis>> finished(static_cast<size_t>(batch));
    std::vector<bool> done(static_cast<size_t>(batch), false);
    // The state's rows are the beams of each source not yet done, `per` rows to a source, in order
    // (row a * per + j is beam j of source active[a]): a source that is done leaves the batch. The
    // first step has one beam to a source, so it runs one row to a source; every later step runs k.
    std::vector<int64_t> active(static_cast<size_t>(batch));
    std::iota(active.begin(), active.end(), int64_t{0});
    int64_t per = 1;
    IntTensor tokens = IntTensor::full({batch}, kSos);

    for (int64_t t = 0; t < max_len; ++t) {
        const Tensor logits = model.decode_step(*state, tokens);  // [A * per, V]
        // Each beam's own best 2k continuations hold its source's best 2k.
        const int64_t vocab = logits.size(-1);
        const int64_t width = std::min(2 * k, vocab);
        const TopK row_best = log_softmax_top_k(logits, width, t + 1 < options.min_len ? kEos : -1);
        // The next step's rows, k to a source: their parents among this step's rows and their tokens.
        const auto rows = static_cast<int64_t>(active.size()) * k;
        std::vector<int64_t> parents(static_cast<size_t>(rows)), next_tokens(static_cast<size_t>(rows), kEos);
        for (size_t a = 0; a < active.size(); ++a) {
            const int64_t b = active[a], row0 = static_cast<int64_t>(a) * k, from0 = static_cast<int64_t>(a) * per;
            const size_t first = static_cast<size_t>(b * k);
            for (int64_t j = 0; j < k; ++j) parents[static_cast<size_t>(row0 + j)] = from0 + std::min(j, per - 1);
            // The 2k best continuations of the alive beams, best first (ties: lower beam, then
            // lower token, as greedy's argmax). A </s> among the first k ends a hypothesis; the
            // best k others continue. So with k = 1 this is exactly greedy decoding.
            std::vector<std::pair<float, int64_t>> candidates;  // (log_prob, beam * vocab + token)
            for (int64_t j = 0; j < per; ++j) {
                const Beam& beam = beams[first + static_cast<size_t>(j)];
                if (!beam.alive) continue;
                for (int64_t c = 0; c < width; ++c) {
                    const int64_t at = (from0 + j) * width + c;
                    const int64_t v = row_best.indices.data()[at];
                    if (v >= 0) candidates.emplace_back(beam.log_prob + row_best.values.data()[at], j * vocab + v);
                }
            }
            const size_t keep = std::min(candidates.size(), static_cast<size_t>(2 * k));
            std::partial_sort(candidates.begin(), candidates.begin() + static_cast<std::ptrdiff_t>(keep),
                              candidates.end(), [](const auto& x, const auto& y) {
                                  return x.first > y.first || (x.first == y.first && x.second < y.second);
                              });
            auto& ended = finished[static_cast<size_t>(b)];
            std::vector<Beam> next(static_cast<size_t>(k));
            int64_t filled = 0;
            for (size_t c = 0; c < keep && filled < k; ++c) {
                const auto [log_prob, code] = candidates[c];
                const int64_t j = code / vocab, token = code % vocab;
                const Beam& parent = beams[first + static_cast<size_t>(j)];
                if (token == kEos) {
                    if (c < static_cast<size_t>(k)) {
                        const int64_t length = static_cast<int64_t>(parent.tokens.size()) + 1;
                        ended.push_back({parent.tokens, log_prob,
                                         log_prob / length_penalty(length, options.length_penalty), true});
                    }
                    continue;
                }
                Beam& child = next[static_cast<size_t>(filled)];
                child.tokens = parent.tokens;
                child.tokens.push_back(token);
                child.log_prob = log_prob;
                child.alive = true;
                parents[static_cast<size_t>(row0 + filled)] = from0 + j;
                next_tokens[static_cast<size_t>(row0 + filled)] = token;  // rows without a beam keep </s>
                ++filled;
            }
            std::move(next.begin(), next.end(), beams.begin() + static_cast<std::ptrdiff_t>(first));
            if (static_cast<int64_t>(ended.size()) >= k || filled == 0) done[static_cast<size_t>(b)] = true;
        }
        std::vector<int64_t> still;  // the sources going on
        for (const int64_t b : active)
            if (!done[static_cast<size_t>(b)]) still.push_back(b);
        if (still.empty()) break;
        if (still.size() == active.size() && per == k) {  // the same rows: beams follow their parents
            state->reorder_beams(parents, k);
            tokens = IntTensor::from_vector(std::move(next_tokens), {rows});
            continue;
        }
        // Some sources are done, or the first step's one row to a source becomes k: the rows of the
        // sources going on, each a copy of its parent.
        std::vector<int64_t> selected, selected_tokens;
        for (size_t a = 0; a < active.size(); ++a) {
            if (done[static_cast<size_t>(active[a])]) continue;
            for (int64_t j = 0; j < k; ++j) {
                const auto row = static_cast<size_t>(static_cast<int64_t>(a) * k + j);
                selected.push_back(parents[row]);
                selected_tokens.push_back(next_tokens[row]);
            }
        }
        state->select_rows(selected);
        tokens = IntTensor::from_vector(std::move(selected_tokens), {static_cast<int64_t>(selected.size())});
        active = std::move(still);
        per = k;
    }

    std::vector<std::vector<Hypothesis>> out(static_cast<size_t>(batch));
    for (int64_t b = 0; b < batch; ++b) {
        auto& ended = finished[static_cast<size_t>(b)];
        if (!done[static_cast<size_t>(b)])  // max_len reached: alive beams compete unfinished
            for (int64_t j = 0; j < k; ++j) {
                const Beam& beam = beams[static_cast<size_t>(b * k + j)];
                if (beam.alive)
                    ended.push_back({beam.tokens, beam.log_prob,
                                     beam.log_prob / length_penalty(static_cast<int64_t>(beam.tokens.size()),
                                                                    options.length_penalty),
                                     false});
            }
        // Best score first; among equal scores the one found first.
        std::stable_sort(ended.begin(), ended.end(),
                         [](const Hypothesis& x, const Hypothesis& y) { return x.score > y.score; });
        if (static_cast<int64_t>(ended.size()) > nbest) ended.resize(static_cast<size_t>(nbest));
        out[static_cast<size_t>(b)] = std::move(ended);
    }
    return out;
}

std::vector<Hypothesis> beam_search(Seq2SeqModel& model, const IntTensor& src, const DecodeOptions& options) {
    std::vector<Hypothesis> best;
    for (std::vector<Hypothesis>& list : beam_search_nbest(model, src, options, 1))
        best.push_back(list.empty() ? Hypothesis{} : std::move(list.front()));
    return best;
}

std::vector<Hypothesis> decode(Seq2SeqModel& model, const IntTensor& src, const DecodeOptions& options) {
    if (options.beam_size == 1) return greedy_decode(model, src, options.max_len, options.min_len);
    return beam_search(model, src, options);
}

}  // namespace seqgrad::models
