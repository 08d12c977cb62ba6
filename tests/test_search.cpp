// The searches (models/search.h) on a model that reads no source: a toy decoder-only language
// model, written here in a few lines from nn's parts (an embedding, one causal self-attention that
// steps through nn::KeyValueCache, an output projection), driven through the same search as the
// sequence-to-sequence models: greedy, beam and sampling, each continuing a prefix.
#include "helpers.h"

#include <cmath>
#include <map>
#include <set>

using namespace seqgrad;
using namespace seqgrad::models;

namespace {

constexpr int64_t kVocab = 9, kWidth = 8, kLongest = 16;

struct ToyState : DecodingState {
    nn::KeyValueCache cache;
    void select_rows(const std::vector<int64_t>& rows) override { cache.select_rows(rows); }
    void reorder_beams(const std::vector<int64_t>& rows, int64_t group) override { cache.reorder_beams(rows, group); }
};

// logits = output(attention(embedding(x), causal)) at every position.
class ToyLanguageModel : public Model {
public:
    explicit ToyLanguageModel(Generator& gen) : Model(ModelConfig{}) {
        embedding = register_module("embedding", std::make_shared<nn::Embedding>(kVocab, kWidth, gen));
        attention = register_module("attention", std::make_shared<nn::MultiHeadAttention>(kWidth, 2, gen));
        output = register_module("output", std::make_shared<nn::Linear>(kWidth, kVocab, gen));
    }
    Tensor logits(const IntTensor&, const IntTensor& inputs) override {
        const Tensor x = embedding->forward(inputs);
        return output->forward(attention->forward(x, x, x, nn::causal_mask(inputs.size(1))).output);
    }
    std::unique_ptr<DecodingState> start_decoding(const IntTensor& source) override {
        REQUIRE(source.size(1) == 0);  // a language model reads no source
        auto state = std::make_unique<ToyState>();
        state->cache = nn::KeyValueCache(source.size(0), 1, kWidth, kLongest);
        return state;
    }
    Tensor decode_step(DecodingState& state, const IntTensor& tokens) override {
        nn::KeyValueCache& cache = dynamic_cast<ToyState&>(state).cache;
        cache.advance();
        const Tensor x = embedding->forward(tokens.reshape({tokens.size(0), 1}));
        const Tensor y = output->forward(attention->step(x, cache, 0).output);
        return reshape(y, {tokens.size(0), kVocab});
    }
    int64_t max_decode_length() const override { return kLongest; }

    std::shared_ptr<nn::Embedding> embedding;
    std::shared_ptr<nn::MultiHeadAttention> attention;
    std::shared_ptr<nn::Linear> output;
};

// Two rows of a three-token prompt (ids 4..8; </s> is 2).
const IntTensor kPrompt = IntTensor::from_vector({4, 7, 5, 6, 6, 8}, {2, 3});
const IntTensor kNoSource = IntTensor::zeros({2, 0});

IntTensor row_with(const IntTensor& prompt, int64_t row, const std::vector<int64_t>& more) {
    std::vector<int64_t> ids(prompt.data() + row * prompt.size(1), prompt.data() + (row + 1) * prompt.size(1));
    ids.insert(ids.end(), more.begin(), more.end());
    const auto length = static_cast<int64_t>(ids.size());
    return IntTensor::from_vector(std::move(ids), {1, length});
}

// The log-probabilities of the next token after `ids` [1, T], by recomputing the whole window.
std::vector<float> next_log_probs(ToyLanguageModel& model, const IntTensor& ids) {
    const Tensor all = log_softmax(model.logits(IntTensor::zeros({1, 0}), ids), -1);
    const float* last = all.data() + (ids.size(1) - 1) * kVocab;
    return {last, last + kVocab};
}

}  // namespace

TEST_CASE("a language model's cached steps give the logits of recomputing the window", "[search]") {
    Generator gen(3);
    ToyLanguageModel model(gen);
    NoGradGuard no_grad;
    const IntTensor ids = IntTensor::from_vector({4, 7, 5, 6, 8, 8, 4, 5, 6, 6, 8, 7, 4, 4}, {2, 7});
    const Tensor full = model.logits(kNoSource, ids);  // [2, 7, V]
    auto state = model.start_decoding(kNoSource);
    for (int64_t t = 0; t < 7; ++t) {
        IntTensor column = IntTensor::zeros({2});
        for (int64_t r = 0; r < 2; ++r) column.data()[r] = ids.data()[r * 7 + t];
        const Tensor step = model.decode_step(*state, column);
        for (int64_t r = 0; r < 2; ++r)
            for (int64_t v = 0; v < kVocab; ++v)
                CHECK(step.data()[r * kVocab + v] == Approx(full.data()[(r * 7 + t) * kVocab + v]).margin(1e-5));
    }
    // The prefix read in one call (prefill) ends where stepping through it ends.
    auto by_steps = model.start_decoding(kNoSource);
    auto by_prefill = model.start_decoding(kNoSource);
    Tensor stepped;
    for (int64_t t = 0; t < 3; ++t) {
        IntTensor column = IntTensor::zeros({2});
        for (int64_t r = 0; r < 2; ++r) column.data()[r] = kPrompt.data()[r * 3 + t];
        stepped = model.decode_step(*by_steps, column);
    }
    CHECK(model.prefill(*by_prefill, kPrompt).to_vector() == stepped.to_vector());
}

TEST_CASE("greedy search continues a prompt with the most likely token, recomputed", "[search]") {
    Generator gen(4);
    ToyLanguageModel model(gen);
    NoGradGuard no_grad;
    DecodingOptions options;
    options.max_len = 6;
    std::vector<std::pair<int64_t, int64_t>> streamed;
    const auto found = search(model, kNoSource, kPrompt, options,
                              [&](int64_t row, int64_t token) { streamed.emplace_back(row, token); });
    REQUIRE(found.size() == 2);
    size_t tokens_seen = 0;
    for (int64_t row = 0; row < 2; ++row) {
        REQUIRE(found[static_cast<size_t>(row)].size() == 1);
        const Hypothesis& h = found[static_cast<size_t>(row)].front();
        // Each token is the argmax after the prompt and the tokens before it; the log-probability
        // is their sum (</s> included when it ended the hypothesis).
        std::vector<int64_t> so_far;
        double log_prob = 0;
        for (size_t t = 0; t <= h.tokens.size(); ++t) {
            if (t == h.tokens.size() && !h.finished) break;
            const std::vector<float> lp = next_log_probs(model, row_with(kPrompt, row, so_far));
            const int64_t best = std::max_element(lp.begin(), lp.end()) - lp.begin();
            const int64_t chosen = t < h.tokens.size() ? h.tokens[t] : kEos;
            CHECK(chosen == best);
            log_prob += lp[static_cast<size_t>(chosen)];
            so_far.push_back(chosen);
        }
        CHECK(h.log_prob == Approx(log_prob).margin(1e-4));
        CHECK((h.finished || h.tokens.size() == 6));
        tokens_seen += h.tokens.size();
    }
    // Streamed as chosen: every token once, each row's in order.
    CHECK(streamed.size() == tokens_seen);
    std::map<int64_t, std::vector<int64_t>> by_row;
    for (const auto& [row, token] : streamed) by_row[row].push_back(token);
    for (int64_t row = 0; row < 2; ++row) CHECK(by_row[row] == found[static_cast<size_t>(row)].front().tokens);
}

TEST_CASE("beam search continues a prompt: one beam is greedy, wider beams list distinct hypotheses", "[search]") {
    Generator gen(5);
    ToyLanguageModel model(gen);
    DecodingOptions options;
    options.max_len = 5;
    const auto greedy = search(model, kNoSource, kPrompt, options);
    options.length_penalty = 0;
    // Beam search with one beam chooses what greedy search chooses.
    const auto one_beam = beam_search(model, kNoSource, kPrompt, options);
    for (size_t row = 0; row < 2; ++row) {
        CHECK(one_beam[row].front().tokens == greedy[row].front().tokens);
        CHECK(one_beam[row].front().log_prob == greedy[row].front().log_prob);
    }
    options.beam_size = 4;
    options.nbest = 4;
    const auto wide = search(model, kNoSource, kPrompt, options);
    for (int64_t row = 0; row < 2; ++row) {
        const auto& list = wide[static_cast<size_t>(row)];
        REQUIRE(list.size() == 4);
        std::set<std::vector<int64_t>> distinct;
        for (size_t i = 0; i < list.size(); ++i) {
            distinct.insert(list[i].tokens);
            if (i > 0) CHECK(list[i - 1].score >= list[i].score);
            // Each hypothesis's score is its log-probability after the prompt, recomputed.
            std::vector<int64_t> so_far;
            double log_prob = 0;
            std::vector<int64_t> outputs = list[i].tokens;
            if (list[i].finished) outputs.push_back(kEos);
            for (const int64_t token : outputs) {
                log_prob += next_log_probs(model, row_with(kPrompt, row, so_far))[static_cast<size_t>(token)];
                so_far.push_back(token);
            }
            CHECK(list[i].log_prob == Approx(log_prob).margin(1e-4));
        }
        CHECK(distinct.size() == 4);
        // Without a length penalty, the best of a wider beam is at least as likely as greedy's.
        CHECK(list.front().log_prob >= greedy[static_cast<size_t>(row)].front().log_prob - 1e-5f);
    }
}

TEST_CASE("sampling: temperature 0 is greedy, a seed repeats its draws, and the draws follow the distribution",
          "[search]") {
    Generator gen(6);
    ToyLanguageModel model(gen);
    DecodingOptions options;
    options.max_len = 8;
    const auto greedy = search(model, kNoSource, kPrompt, options);
    options.temperature = 0;
    options.top_k = 3;
    options.seed = 99;
    CHECK(search(model, kNoSource, kPrompt, options)[0][0].tokens == greedy[0][0].tokens);
    options.top_k = 1;  // one candidate left: the most likely, at any temperature
    options.temperature = 2;
    CHECK(search(model, kNoSource, kPrompt, options)[1][0].tokens == greedy[1][0].tokens);

    options.top_k = 0;
    options.temperature = 1.5f;
    options.seed = 7;
    const auto first = search(model, kNoSource, kPrompt, options);
    const auto again = search(model, kNoSource, kPrompt, options);
    for (size_t row = 0; row < 2; ++row) CHECK(first[row][0].tokens == again[row][0].tokens);
    bool differs = false;
    for (uint64_t seed = 8; seed < 16 && !differs; ++seed) {
        options.seed = seed;
        differs = search(model, kNoSource, kPrompt, options)[0][0].tokens != first[0][0].tokens;
    }
    CHECK(differs);

    // A sampler's draws against softmax(logits / T): 20,000 draws from one row.
    const Tensor logits = Tensor::from_vector({0.5f, 2.0f, -1.0f, 1.0f, 0.0f, -3.0f}, {1, 6});
    const float temperature = 0.7f;
    RandomSampler sampler(temperature, 0, 1.0f, 123);
    std::vector<int> counts(6, 0);
    constexpr int kDraws = 20000;
    for (int i = 0; i < kDraws; ++i) ++counts[static_cast<size_t>(sampler.choose(logits, {}).indices.data()[0])];
    double total = 0;
    std::vector<double> p(6);
    for (int v = 0; v < 6; ++v) total += p[static_cast<size_t>(v)] = std::exp(logits.data()[v] / temperature);
    for (int v = 0; v < 6; ++v) {
        const double expected = p[static_cast<size_t>(v)] / total;
        INFO("token " << v);
        // Within five standard deviations of a binomial count.
        CHECK(std::abs(counts[static_cast<size_t>(v)] / double{kDraws} - expected) <=
              5 * std::sqrt(expected * (1 - expected) / kDraws) + 1e-4);
    }
    // The log-probability reported is the model's own, at temperature 1.
    const TopK one = sampler.choose(logits, {});
    const Tensor lp = log_softmax(logits, -1);
    CHECK(one.values.data()[0] == Approx(lp.data()[one.indices.data()[0]]).margin(1e-6));
}

TEST_CASE("top-k and top-p keep to the most likely tokens, and barred tokens are never drawn", "[search]") {
    const Tensor logits = Tensor::from_vector({3.0f, 2.9f, 0.0f, -1.0f, 2.8f, -2.0f}, {1, 6});
    // Probabilities at T = 1: about 0.36, 0.33, 0.02, 0.01, 0.30, 0.00.
    RandomSampler top_k(1.0f, 2, 1.0f, 1);
    RandomSampler top_p(1.0f, 0, 0.6f, 2);  // 0.36 + 0.33 reaches 0.6: tokens 0 and 1
    RandomSampler barred(1.0f, 0, 1.0f, 3);
    const std::vector<int64_t> bar{0, 4};
    std::set<int64_t> by_k, by_p, with_bar;
    for (int i = 0; i < 2000; ++i) {
        by_k.insert(top_k.choose(logits, {}).indices.data()[0]);
        by_p.insert(top_p.choose(logits, {}).indices.data()[0]);
        with_bar.insert(barred.choose(logits, bar).indices.data()[0]);
    }
    CHECK(by_k == std::set<int64_t>{0, 1});
    CHECK(by_p == std::set<int64_t>{0, 1});
    CHECK(with_bar == std::set<int64_t>{1, 2, 3, 5});
    CHECK(BestSampler().choose(logits, bar).indices.data()[0] == 1);
    // Barred tokens' probabilities still count: the value is the model's own log-probability.
    CHECK(barred.choose(logits, bar).values.data()[0] <= std::log(0.34f));
}

TEST_CASE("every search keeps to the tokens left after the barred ones, and scores with the model's own "
          "log-probabilities",
          "[search]") {
    Generator gen(4);
    ToyLanguageModel model(gen);
    NoGradGuard no_grad;
    DecodingOptions options;
    options.max_len = 6;
    options.min_len = 7;  // no </s>: six tokens each
    // Bar the tokens greedy search chose most often without a bar.
    std::map<int64_t, int> chosen;
    for (const auto& row : search(model, kNoSource, kPrompt, options))
        for (const int64_t token : row.front().tokens) ++chosen[token];
    REQUIRE(!chosen.empty());
    std::vector<std::pair<int, int64_t>> by_count;
    for (const auto& [token, count] : chosen) by_count.emplace_back(count, token);
    std::sort(by_count.rbegin(), by_count.rend());
    for (size_t i = 0; i < std::min<size_t>(2, by_count.size()); ++i) options.barred.push_back(by_count[i].second);
    INFO("barred " << options.barred[0]);

    // Greedy: at each step the most likely token outside the bar, scored by the whole row.
    const auto greedy = search(model, kNoSource, kPrompt, options);
    for (int64_t row = 0; row < 2; ++row) {
        const Hypothesis& h = greedy[static_cast<size_t>(row)].front();
        REQUIRE(h.tokens.size() == 6);
        std::vector<int64_t> so_far;
        double log_prob = 0;
        for (const int64_t token : h.tokens) {
            std::vector<float> lp = next_log_probs(model, row_with(kPrompt, row, so_far));
            log_prob += lp[static_cast<size_t>(token)];
            for (const int64_t b : options.barred) lp[static_cast<size_t>(b)] = -INFINITY;
            lp[kEos] = -INFINITY;
            CHECK(token == std::max_element(lp.begin(), lp.end()) - lp.begin());
            so_far.push_back(token);
        }
        CHECK(h.log_prob == Approx(log_prob).margin(1e-4));
    }
    // Beam search and sampling (hot, so that every token is likely) never write a barred token.
    DecodingOptions beam = options;
    beam.beam_size = beam.nbest = 4;
    DecodingOptions hot = options;
    hot.temperature = 20;
    std::set<int64_t> written;
    for (const DecodingOptions& o : {beam, hot})
        for (uint64_t seed = 1; seed <= 20; ++seed) {
            DecodingOptions seeded = o;
            seeded.seed = seed;
            for (const auto& row : search(model, kNoSource, kPrompt, seeded))
                for (const Hypothesis& h : row) written.insert(h.tokens.begin(), h.tokens.end());
        }
    for (const int64_t b : options.barred) CHECK_FALSE(written.count(b));
    CHECK(written.size() >= 5);  // all but the bar and </s>, or nearly: the check has teeth

    // Everything barred but </s>, which min_len bars too: nothing is left to choose.
    DecodingOptions none = options;
    none.barred.clear();
    for (int64_t v = 0; v < kVocab; ++v)
        if (v != kEos) none.barred.push_back(v);
    CHECK_THROWS_WITH(search(model, kNoSource, kPrompt, none), Catch::Contains("no token to choose at step 1"));
    hot.barred = none.barred;
    CHECK_THROWS_WITH(search(model, kNoSource, kPrompt, hot),
                      Catch::Contains("every token of the vocabulary is barred"));
    beam.barred = none.barred;
    CHECK_THROWS_WITH(search(model, kNoSource, kPrompt, beam), Catch::Contains("no token to choose at step 1"));
}

TEST_CASE("searches refuse options out of range and prefixes that do not fit", "[search][errors]") {
    Generator gen(7);
    ToyLanguageModel model(gen);
    using Catch::Matchers::Contains;
    const auto error_of = [&](DecodingOptions options, const IntTensor& prefix = kPrompt) {
        return testing::error_of([&] { search(model, kNoSource, prefix, options); });
    };
    CHECK_THAT(error_of({.temperature = -1}), Contains("temperature"));
    CHECK_THAT(error_of({.top_k = -1}), Contains("top_k"));
    CHECK_THAT(error_of({.top_p = 0}), Contains("top_p"));
    CHECK_THAT(error_of({.top_p = 1.5f}), Contains("top_p"));
    CHECK_THAT(error_of({.beam_size = 2, .temperature = 1}), Contains("beam size 1"));
    CHECK_THAT(error_of({}, IntTensor::zeros({2, 0})), Contains("prefix"));
    CHECK_THAT(error_of({}, IntTensor::full({2, kLongest + 1}, 4)), Contains("no room"));
    CHECK_THAT(error_of({}, IntTensor::full({3, 2}, 4)), Contains("prefix"));
}

TEST_CASE("the decoding options' one table makes their flags and checks their ranges", "[decoding][options]") {
    using Catch::Matchers::Contains;
    std::vector<std::string> keys, flags;
    for (const OptionInfo& o : DecodingOptions::options()) {
        keys.push_back(o.key);
        flags.push_back(o.flag);
    }
    CHECK(keys == std::vector<std::string>{"beam_size", "nbest", "length_penalty", "max_len", "min_len", "temperature",
                                           "top_k", "top_p", "seed", "max_hypotheses"});
    CHECK(flags[0] == "beam");
    CHECK(flags[2] == "alpha");
    DecodingOptions o;
    o.set("beam_size", {"3"});
    o.set("nbest", {"2"});
    CHECK(o.beam_size == 3);
    CHECK_NOTHROW(o.validate());
    CHECK_THAT(testing::error_of([&] { o.set("top_p", {"0"}); }), Contains("--top-p: must be in (0, 1], got 0"));
    CHECK_THAT(testing::error_of([&] { o.set("beam_size", {"257"}); }), Contains("--beam: must be in [1, 256]"));
    CHECK(o.beam_size == 3);  // a value refused changes nothing
    o.nbest = 4;              // wider than the beam: the table's rule across fields
    CHECK_THAT(testing::error_of([&] { o.validate(); }), Contains("\"nbest\" must be at most the beam size, 3"));
    // A command's own defaults show in the help.
    DecodingOptions sampling;
    sampling.temperature = 0.8f;
    for (const OptionInfo& info : DecodingOptions::options(sampling))
        if (info.key == "temperature") CHECK_THAT(info.help, Contains("default 0.8,"));
}
