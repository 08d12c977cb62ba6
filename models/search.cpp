// The searches (search.h): one hypothesis per row with a sampler, and batched beam search, over
// any decoder.
#include "seqgrad/models/search.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "seqgrad/core/autograd.h"
#include "seqgrad/internal/option_table.h"
#include "seqgrad/models/model.h"

namespace seqgrad::models {

// ---- options ----

namespace {

// The decoding options' one table: each option's key, flag, range and meaning.
const internal::OptionTable<DecodingOptions>& decoding_table() {
    using D = DecodingOptions;
    static const internal::OptionTable<D> table =
        internal::OptionTable<D>("decoding")
            .add("beam_size", "beam size (1: one hypothesis per input, chosen or sampled token by token)",
                 &D::beam_size)
            .at_least(1)
            .at_most(static_cast<double>(kMaxBeamSize))
            .flag("beam")
            .add("nbest", "hypotheses kept per input, best first (at most the beam size)", &D::nbest)
            .at_least(1)
            .add("length_penalty", "beam search's length penalty ((5 + length) / 6)^alpha; 0 turns it off",
                 &D::length_penalty)
            .flag("alpha")
            .add("max_len", "output tokens, </s> included (0: twice the input's length plus 10, at least 40)",
                 &D::max_len)
            .at_least(0)
            .add("min_len", "no </s> before this many tokens (0: from the first)", &D::min_len)
            .at_least(0)
            .add("temperature", "0: the most likely token; above 0: drawn from softmax(logits / temperature)",
                 &D::temperature)
            .at_least(0)
            .add("top_k", "draw among the k most likely tokens (0: all)", &D::top_k)
            .at_least(0)
            .add("top_p", "draw within the most likely tokens whose probability reaches p (1: all)", &D::top_p)
            .above(0)
            .at_most(1)
            .add("seed", "the sampler's seed: the same seed draws the same tokens", &D::seed)
            .add("max_hypotheses", "hypotheses decoded together (inputs x beam)", &D::max_hypotheses)
            .at_least(1)
            .rule([](const D& o) {
                const char* op = "decoding";
                check(o.nbest <= o.beam_size, op, "\"nbest\" must be at most the beam size, ", o.beam_size, ", got ",
                      o.nbest);
                check(std::isfinite(o.temperature), op, "\"temperature\" must be finite, got ", o.temperature);
                check(o.temperature == 0 || o.beam_size == 1, op,
                      "sampling (temperature above 0) takes beam size 1, got ", o.beam_size);
                for (const int64_t token : o.barred)
                    check(token >= 0, op, "a barred token must be 0 or more, got ", token);
            });
    return table;
}

}  // namespace

void DecodingOptions::validate() const { decoding_table().validate(*this); }

std::vector<OptionInfo> DecodingOptions::options() { return options(DecodingOptions{}); }

std::vector<OptionInfo> DecodingOptions::options(const DecodingOptions& defaults) {
    return decoding_table().options(&defaults);
}

void DecodingOptions::set(const std::string& key, const std::vector<std::string>& words) {
    decoding_table().set(*this, key, words);
}

int64_t default_max_length(int64_t source_length) { return std::max<int64_t>(40, 2 * source_length + 10); }

int64_t inputs_per_batch(const DecodingOptions& options) {
    return std::clamp<int64_t>(options.max_hypotheses / options.beam_size, 1, 256);
}

float length_penalty(int64_t length, float alpha) {
    return std::pow((5.0f + static_cast<float>(length)) / 6.0f, alpha);
}

// ---- samplers ----

TopK BestSampler::choose(const Tensor& logits, std::span<const int64_t> barred) {
    return log_softmax_top_k(logits, 1, barred);
}

RandomSampler::RandomSampler(float temperature, int64_t top_k, float top_p, uint64_t seed)
    : temperature_(temperature), top_k_(top_k), top_p_(top_p), gen_(seed) {
    check(temperature > 0 && std::isfinite(temperature), "RandomSampler", "temperature must be above 0, got ",
          temperature);
    check(top_k >= 0, "RandomSampler", "top_k must be 0 or more, got ", top_k);
    check(top_p > 0 && top_p <= 1, "RandomSampler", "top_p must be in (0, 1], got ", top_p);
}

TopK RandomSampler::choose(const Tensor& logits, std::span<const int64_t> barred) {
    check(logits.dim() == 2 && logits.size(1) >= 1, "RandomSampler", "takes logits [rows, vocabulary], got ",
          logits.shape());
    const int64_t rows = logits.size(0), vocab = logits.size(1);
    TopK chosen{Tensor::empty({rows, 1}), IntTensor::full({rows, 1}, -1)};
    std::vector<std::pair<double, int64_t>> candidates;  // (logit / temperature, token)
    for (int64_t r = 0; r < rows; ++r) {
        const float* row = logits.data() + r * vocab;
        candidates.clear();
        for (int64_t v = 0; v < vocab; ++v)
            if (std::find(barred.begin(), barred.end(), v) == barred.end() && !std::isnan(row[v]) &&
                row[v] > -std::numeric_limits<float>::infinity())
                candidates.emplace_back(static_cast<double>(row[v]) / temperature_, v);
        chosen.values.data()[r] = -std::numeric_limits<float>::infinity();
        if (candidates.empty()) continue;
        // Most likely first (ties: the lower token), so that top-k and top-p keep a prefix.
        const auto likelier = [](const auto& a, const auto& b) {
            return a.first > b.first || (a.first == b.first && a.second < b.second);
        };
        const size_t keep = top_k_ > 0 ? std::min(candidates.size(), static_cast<size_t>(top_k_)) : candidates.size();
        std::partial_sort(candidates.begin(), candidates.begin() + static_cast<std::ptrdiff_t>(keep), candidates.end(),
                          likelier);
        candidates.resize(keep);
        const double top = candidates.front().first;
        double total = 0;
        for (auto& [weight, token] : candidates) total += (weight = std::exp(weight - top));
        if (top_p_ < 1) {  // the smallest prefix whose probability reaches top_p
            double mass = 0;
            size_t n = 0;
            while (n < candidates.size() && mass < top_p_ * total) mass += candidates[n++].first;
            candidates.resize(n);
            total = mass;
        }
        double u = static_cast<double>(gen_.uniform()) * total;
        int64_t token = candidates.back().second;
        for (const auto& [weight, t] : candidates) {
            if (u < weight) {
                token = t;
                break;
            }
            u -= weight;
        }
        // The model's own log-probability of the token, at temperature 1 over the whole row.
        double row_max = -std::numeric_limits<double>::infinity(), sum = 0;
        for (int64_t v = 0; v < vocab; ++v)
            if (!std::isnan(row[v])) row_max = std::max(row_max, static_cast<double>(row[v]));
        for (int64_t v = 0; v < vocab; ++v)
            if (!std::isnan(row[v])) sum += std::exp(static_cast<double>(row[v]) - row_max);
        chosen.indices.data()[r] = token;
        chosen.values.data()[r] = static_cast<float>(static_cast<double>(row[token]) - row_max - std::log(sum));
    }
    return chosen;
}

std::unique_ptr<Sampler> make_sampler(const DecodingOptions& options) {
    if (options.temperature == 0) return std::make_unique<BestSampler>();
    return std::make_unique<RandomSampler>(options.temperature, options.top_k, options.top_p, options.seed);
}

// ---- the searches ----

IntTensor start_of_sequence(int64_t rows) { return IntTensor::full({rows, 1}, kSos); }

namespace {

// The tokens a search may not choose at step t (the t+1-th output token): options.barred, and </s>
// before the min_len-th.
class Barred {
public:
    explicit Barred(const DecodingOptions& options)
        : min_len_(options.min_len), always_(options.barred), early_(options.barred) {
        early_.push_back(kEos);
    }
    std::span<const int64_t> at(int64_t t) const { return t + 1 < min_len_ ? early_ : always_; }

private:
    int64_t min_len_;
    std::vector<int64_t> always_, early_;
};

// Throws where a sampler or log_softmax_top_k gave no token (index -1) at step t: all were barred.
void check_chosen(int64_t token, int64_t t) {
    check(token >= 0, "search", "no token to choose at step ", t + 1,
          ": every token of the vocabulary is barred or has no probability");
}

// The output tokens a search may choose: options.max_len (or the default for the source), so that
// the prefix and every token but the last fit the decoder.
int64_t output_limit(const StepDecoder& decoder, int64_t source_length, const IntTensor& prefix,
                     const DecodingOptions& options) {
    const int64_t wanted = options.max_len > 0 ? options.max_len : default_max_length(source_length);
    const int64_t room = decoder.max_decode_length() - prefix.size(1) + 1;
    check(room >= 1, "search", "a prefix of ", prefix.size(1), " tokens leaves no room in the decoder's ",
          decoder.max_decode_length());
    return std::min(wanted, room);
}

// One hypothesis per row: each step, the sampler's token for every row still going; a row that
// chooses </s> leaves the batch.
std::vector<Hypothesis> one_per_row(StepDecoder& decoder, std::unique_ptr<DecodingState> state, int64_t source_length,
                                    const IntTensor& prefix, const DecodingOptions& options, Sampler& sampler,
                                    const TokenCallback& on_token) {
    const int64_t rows = prefix.size(0), max_len = output_limit(decoder, source_length, prefix, options);
    std::vector<Hypothesis> out(static_cast<size_t>(rows));
    // The state's rows are the unfinished rows, in order: a finished one leaves the batch.
    std::vector<int64_t> active(static_cast<size_t>(rows));
    std::iota(active.begin(), active.end(), int64_t{0});
    Tensor logits = decoder.prefill(*state, prefix);
    IntTensor tokens;
    const Barred barred(options);
    for (int64_t t = 0; t < max_len && !active.empty(); ++t) {
        if (t > 0) logits = decoder.decode_step(*state, tokens);
        // The chosen token of each row and its log-probability.
        const TopK best = sampler.choose(logits, barred.at(t));
        std::vector<int64_t> kept, kept_tokens;  // rows of the state going on, and their tokens
        for (size_t a = 0; a < active.size(); ++a) {
            Hypothesis& h = out[static_cast<size_t>(active[a])];
            const int64_t token = best.indices.data()[a];
            check_chosen(token, t);
            h.log_prob += best.values.data()[a];
            if (token == kEos) {
                h.finished = true;
                continue;
            }
            h.tokens.push_back(token);
            if (on_token) on_token(active[a], token);
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

// Beam search's bookkeeping: each source's k beams and its finished hypotheses. It decides; the
// decoding state's rows are beam_search's to move (compact, below).
class Beams {
public:
    Beams(int64_t sources, int64_t k, float alpha)
        : k_(k),
          alpha_(alpha),
          beams_(static_cast<size_t>(sources * k)),
          finished_(static_cast<size_t>(sources)),
          done_(static_cast<size_t>(sources), false) {
        for (int64_t b = 0; b < sources; ++b) beams_[static_cast<size_t>(b * k)].alive = true;  // one start each
    }

    bool done(int64_t b) const { return done_[static_cast<size_t>(b)]; }

    // One step of source b, whose `per` rows of this step start at row `from0` of row_best (each
    // row's best `width` continuations, of a vocabulary of `vocab`): the 2k best continuations of
    // its alive beams, best first (ties: lower beam, then lower token, as greedy's argmax). A </s>
    // among the first k ends a hypothesis; the best k others continue as its next beams. Writes
    // each next beam's parent (a row of this step) and token into parents and tokens (k each;
    // rows without a beam keep their parent and </s>). With k = 1 this is exactly greedy search.
    void step(int64_t b, const TopK& row_best, int64_t width, int64_t vocab, int64_t from0, int64_t per,
              int64_t* parents, int64_t* tokens) {
        const size_t first = static_cast<size_t>(b * k_);
        std::vector<std::pair<float, int64_t>> candidates;  // (log_prob, beam * vocab + token)
        for (int64_t j = 0; j < per; ++j) {
            const Beam& beam = beams_[first + static_cast<size_t>(j)];
            if (!beam.alive) continue;
            for (int64_t c = 0; c < width; ++c) {
                const int64_t at = (from0 + j) * width + c;
                const int64_t v = row_best.indices.data()[at];
                if (v >= 0) candidates.emplace_back(beam.log_prob + row_best.values.data()[at], j * vocab + v);
            }
        }
        const size_t keep = std::min(candidates.size(), static_cast<size_t>(2 * k_));
        std::partial_sort(candidates.begin(), candidates.begin() + static_cast<std::ptrdiff_t>(keep), candidates.end(),
                          [](const auto& x, const auto& y) {
            return x.first > y.first || (x.first == y.first && x.second < y.second);
        });
        auto& ended = finished_[static_cast<size_t>(b)];
        std::vector<Beam> next(static_cast<size_t>(k_));
        int64_t filled = 0;
        for (size_t c = 0; c < keep && filled < k_; ++c) {
            const auto [log_prob, code] = candidates[c];
            const int64_t j = code / vocab, token = code % vocab;
            const Beam& parent = beams_[first + static_cast<size_t>(j)];
            if (token == kEos) {
                if (c < static_cast<size_t>(k_)) {
                    const int64_t length = static_cast<int64_t>(parent.tokens.size()) + 1;
                    ended.push_back({parent.tokens, log_prob, log_prob / length_penalty(length, alpha_), true});
                }
                continue;
            }
            Beam& child = next[static_cast<size_t>(filled)];
            child.tokens = parent.tokens;
            child.tokens.push_back(token);
            child.log_prob = log_prob;
            child.alive = true;
            parents[filled] = from0 + j;
            tokens[filled] = token;
            ++filled;
        }
        std::move(next.begin(), next.end(), beams_.begin() + static_cast<std::ptrdiff_t>(first));
        if (static_cast<int64_t>(ended.size()) >= k_ || filled == 0) done_[static_cast<size_t>(b)] = true;
    }

    // Each source's `nbest` best hypotheses, best score first (among equal scores the one found
    // first). A source that max_len cut off lets its alive beams compete, unfinished.
    std::vector<std::vector<Hypothesis>> results(int64_t nbest) {
        std::vector<std::vector<Hypothesis>> out(finished_.size());
        for (size_t b = 0; b < finished_.size(); ++b) {
            auto& ended = finished_[b];
            if (!done_[b])
                for (int64_t j = 0; j < k_; ++j) {
                    const Beam& beam = beams_[b * static_cast<size_t>(k_) + static_cast<size_t>(j)];
                    if (beam.alive)
                        ended.push_back(
                            {beam.tokens, beam.log_prob,
                             beam.log_prob / length_penalty(static_cast<int64_t>(beam.tokens.size()), alpha_), false});
                }
            std::stable_sort(ended.begin(), ended.end(),
                             [](const Hypothesis& x, const Hypothesis& y) { return x.score > y.score; });
            if (static_cast<int64_t>(ended.size()) > nbest) ended.resize(static_cast<size_t>(nbest));
            out[b] = std::move(ended);
        }
        return out;
    }

private:
    struct Beam {
        std::vector<int64_t> tokens;
        float log_prob = 0;
        bool alive = false;
    };
    int64_t k_;
    float alpha_;
    std::vector<Beam> beams_;                        // k per source
    std::vector<std::vector<Hypothesis>> finished_;  // per source
    std::vector<bool> done_;
};

// Moves the decoding state's rows to the next step's: `active` sources had `per` rows each this
// step, and each gets k rows (parents and tokens, k per source) unless it is done. While the same
// sources go on with k rows, beams only reorder within their source; otherwise (a source done, or
// the first step's one row per source widening to k) the rows of the sources going on are selected.
// Returns the tokens to feed, and updates `active` to the sources going on.
IntTensor compact(DecodingState& state, const Beams& beams, std::vector<int64_t>& active, int64_t per, int64_t k,
                  const std::vector<int64_t>& parents, std::vector<int64_t>& tokens) {
    std::vector<int64_t> still;
    for (const int64_t b : active)
        if (!beams.done(b)) still.push_back(b);
    if (still.size() == active.size() && per == k) {  // the same rows: beams follow their parents
        state.reorder_beams(parents, k);
        const auto rows = static_cast<int64_t>(tokens.size());
        return IntTensor::from_vector(std::move(tokens), {rows});
    }
    std::vector<int64_t> selected, selected_tokens;
    for (size_t a = 0; a < active.size(); ++a) {
        if (beams.done(active[a])) continue;
        for (int64_t j = 0; j < k; ++j) {
            const auto row = static_cast<size_t>(static_cast<int64_t>(a) * k + j);
            selected.push_back(parents[row]);
            selected_tokens.push_back(tokens[row]);
        }
    }
    active = std::move(still);
    if (active.empty()) return {};
    state.select_rows(selected);
    return IntTensor::from_vector(std::move(selected_tokens), {static_cast<int64_t>(selected.size())});
}

// Batched beam search: the beams of every source expanded together as one batch of rows, k to a
// source (one to a source on the first step, which has one beam each); a source that is done
// leaves the batch.
std::vector<std::vector<Hypothesis>> beam_search_rows(StepDecoder& decoder, std::unique_ptr<DecodingState> state,
                                                      int64_t source_length, const IntTensor& prefix,
                                                      const DecodingOptions& options) {
    const int64_t sources = prefix.size(0), k = options.beam_size;
    const int64_t max_len = output_limit(decoder, source_length, prefix, options);
    Beams beams(sources, k, options.length_penalty);
    // The state's rows are the beams of each source not yet done, `per` rows to a source, in
    // order (row a * per + j is beam j of source active[a]).
    std::vector<int64_t> active(static_cast<size_t>(sources));
    std::iota(active.begin(), active.end(), int64_t{0});
    int64_t per = 1;
    Tensor logits = decoder.prefill(*state, prefix);  // [sources, V]
    const Barred barred(options);
    for (int64_t t = 0; t < max_len; ++t) {
        // Each beam's own best 2k continuations hold its source's best 2k.
        const int64_t vocab = logits.size(-1), width = std::min(2 * k, vocab);
        const TopK row_best = log_softmax_top_k(logits, width, barred.at(t));
        for (int64_t r = 0; r < row_best.indices.size(0); ++r) check_chosen(row_best.indices.data()[r * width], t);
        const auto rows = static_cast<int64_t>(active.size()) * k;
        std::vector<int64_t> parents(static_cast<size_t>(rows)), tokens(static_cast<size_t>(rows), kEos);
        for (size_t a = 0; a < active.size(); ++a) {
            const int64_t row0 = static_cast<int64_t>(a) * k, from0 = static_cast<int64_t>(a) * per;
            for (int64_t j = 0; j < k; ++j) parents[static_cast<size_t>(row0 + j)] = from0 + std::min(j, per - 1);
            beams.step(active[a], row_best, width, vocab, from0, per, parents.data() + row0, tokens.data() + row0);
        }
        const IntTensor next = compact(*state, beams, active, per, k, parents, tokens);
        if (active.empty()) break;
        per = k;
        if (t + 1 < max_len) logits = decoder.decode_step(*state, next);
    }
    return beams.results(options.nbest);
}

}  // namespace

namespace {

void check_input(const IntTensor& source, const IntTensor& prefix) {
    check(source.dim() == 2 && source.size(0) >= 1, "search",
          "the source must be [rows >= 1, length] ([rows, 0] for a language model), got ", source.shape());
    check(prefix.dim() == 2 && prefix.size(0) == source.size(0) && prefix.size(1) >= 1, "search",
          "the prefix must be [", source.size(0), ", length >= 1] for a source of ", source.size(0), " rows, got ",
          prefix.shape());
}

// search() after its checks, from a state already started.
std::vector<std::vector<Hypothesis>> search_from(StepDecoder& decoder, std::unique_ptr<DecodingState> state,
                                                 int64_t source_length, const IntTensor& prefix,
                                                 const DecodingOptions& options, const TokenCallback& on_token) {
    if (options.beam_size > 1) return beam_search_rows(decoder, std::move(state), source_length, prefix, options);
    const std::unique_ptr<Sampler> sampler = make_sampler(options);
    std::vector<std::vector<Hypothesis>> out;
    for (Hypothesis& h : one_per_row(decoder, std::move(state), source_length, prefix, options, *sampler, on_token))
        out.push_back({std::move(h)});
    return out;
}

}  // namespace

std::vector<std::vector<Hypothesis>> search(StepDecoder& decoder, const IntTensor& source, const IntTensor& prefix,
                                            const DecodingOptions& options, const TokenCallback& on_token) {
    options.validate();
    check_input(source, prefix);
    NoGradGuard no_grad;
    return search_from(decoder, decoder.start_decoding(source), source.size(1), prefix, options, on_token);
}

std::vector<std::vector<Hypothesis>> search(StepDecoder& decoder, std::unique_ptr<DecodingState> state,
                                            int64_t source_length, const IntTensor& prefix,
                                            const DecodingOptions& options, const TokenCallback& on_token) {
    options.validate();
    check(state != nullptr, "search", "no decoding state");
    check(prefix.dim() == 2 && prefix.size(0) >= 1 && prefix.size(1) >= 1, "search",
          "the prefix must be [rows >= 1, length >= 1], got ", prefix.shape());
    check(source_length >= 0, "search", "a source length must be 0 or more, got ", source_length);
    NoGradGuard no_grad;
    return search_from(decoder, std::move(state), source_length, prefix, options, on_token);
}

std::vector<std::vector<Hypothesis>> search(StepDecoder& decoder, const IntTensor& source,
                                            const DecodingOptions& options) {
    check(source.dim() == 2, "search", "the source must be [rows, length], got ", source.shape());
    return search(decoder, source, start_of_sequence(source.size(0)), options);
}

std::vector<std::vector<Hypothesis>> beam_search(StepDecoder& decoder, const IntTensor& source, const IntTensor& prefix,
                                                 const DecodingOptions& options) {
    options.validate();
    check(options.temperature == 0, "beam_search", "beam search does not sample: temperature must be 0");
    check_input(source, prefix);
    NoGradGuard no_grad;
    return beam_search_rows(decoder, decoder.start_decoding(source), source.size(1), prefix, options);
}

std::vector<Hypothesis> greedy_decode(StepDecoder& decoder, const IntTensor& src, int64_t max_len, int64_t min_len) {
    check(max_len > 0, "greedy_decode", "max_len must be positive, got ", max_len);
    DecodingOptions options;
    options.max_len = max_len;
    options.min_len = min_len;
    std::vector<Hypothesis> best;
    for (std::vector<Hypothesis>& list : search(decoder, src, options)) best.push_back(std::move(list.front()));
    return best;
}

std::vector<Hypothesis> beam_search(StepDecoder& decoder, const IntTensor& src, const DecodingOptions& options) {
    check(src.dim() == 2, "beam_search", "the source must be [rows, length], got ", src.shape());
    DecodingOptions one = options;
    one.nbest = 1;
    std::vector<Hypothesis> best;
    for (std::vector<Hypothesis>& list : beam_search(decoder, src, start_of_sequence(src.size(0)), one))
        best.push_back(list.empty() ? Hypothesis{} : std::move(list.front()));
    return best;
}

}  // namespace seqgrad::models
