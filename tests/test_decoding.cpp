// Decoding, written once for every model: greedy and beam search over the start/step interface.
#include "helpers.h"

#include <cmath>
#include <functional>
#include <set>

#include "seqgrad/models/search.h"
#include "seqgrad/models/registry.h"

using namespace seqgrad;
using namespace seqgrad::models;

namespace {

std::vector<ModelConfig> tiny_models() {
    std::vector<ModelConfig> configs;
    ModelConfig t = model_kind("transformer").defaults();
    t.src_vocab = 9;
    t.tgt_vocab = 11;
    t.dropout = 0;
    TransformerKeys& keys = t.keys<TransformerKeys>();
    keys.d_model = 16;
    keys.n_heads = 2;
    keys.n_layers = keys.n_enc_layers = keys.n_dec_layers = 2;
    keys.d_ff = 32;
    keys.max_seq_len = 24;
    for (const char* norm : {"post", "pre"}) {
        keys.norm = norm;
        configs.push_back(t);
    }
    ModelConfig s = model_kind("seq2seq").defaults();
    ModelConfig a = model_kind("attn_seq2seq").defaults();
    for (ModelConfig* r : {&s, &a}) {
        r->src_vocab = 9;
        r->tgt_vocab = 11;
    }
    s.keys<Seq2SeqKeys>().hidden_size = a.keys<AttnSeq2SeqKeys>().hidden_size = 12;
    s.keys<Seq2SeqKeys>().num_layers = a.keys<AttnSeq2SeqKeys>().num_layers = 2;
    for (const char* decoder : {"init_state", "context_input"}) {
        s.keys<Seq2SeqKeys>().decoder = decoder;
        configs.push_back(s);
    }
    for (const char* attention : {"dot", "additive"}) {
        a.keys<AttnSeq2SeqKeys>().attention = attention;
        configs.push_back(a);
    }
    return configs;
}

// A right-padded batch of sources with ids in [4, 9).
IntTensor sources() {
    return IntTensor::from_vector({4, 5, 6, 7, 8, 5, 6, 0, 0, 0, 8, 0, 0, 0, 0, 7, 7, 4, 5, 0}, {4, 5});
}

std::string name_of(const ModelConfig& c) { return c.to_json(); }

}  // namespace

TEST_CASE("beam search with one beam chooses exactly what greedy decoding does", "[decoding]") {
    for (const ModelConfig& config : tiny_models()) {
        INFO(name_of(config));
        Generator gen(3);
        auto model = make_model(config, gen);
        model->eval();
        const auto greedy = greedy_decode(*model, sources(), 12);
        for (float alpha : {0.0f, 0.6f, 1.0f}) {
            const auto beam = beam_search(*model, sources(), {12, 1, alpha});
            REQUIRE(beam.size() == greedy.size());
            for (size_t i = 0; i < greedy.size(); ++i) {
                CHECK(beam[i].tokens == greedy[i].tokens);
                CHECK(beam[i].log_prob == greedy[i].log_prob);
            }
        }
    }
}

TEST_CASE("step-by-step decoding scores what the whole teacher-forced prefix gives", "[decoding]") {
    // The incremental decoder (the Transformer's cached keys and values, the LSTMs' carried state)
    // must agree with recomputing every prefix through forward().
    for (const ModelConfig& config : tiny_models()) {
        INFO(name_of(config));
        Generator gen(5);
        auto model = make_model(config, gen);
        model->eval();
        const IntTensor src = sources();
        const auto hypotheses = greedy_decode(*model, src, 10);
        for (int64_t row = 0; row < src.size(0); ++row) {
            const Hypothesis& h = hypotheses[static_cast<size_t>(row)];
            std::vector<int64_t> tgt_in{kSos}, tgt_out;
            tgt_in.insert(tgt_in.end(), h.tokens.begin(), h.tokens.end());
            tgt_out = h.tokens;
            if (h.finished) tgt_out.push_back(kEos);
            else tgt_in.pop_back();
            const int64_t len = static_cast<int64_t>(tgt_out.size());
            // This row alone, without padding.
            int64_t src_len = 0;
            while (src_len < src.size(1) && src.data()[row * src.size(1) + src_len] != kPad) ++src_len;
            std::vector<int64_t> row_src(src.data() + row * src.size(1), src.data() + row * src.size(1) + src_len);
            NoGradGuard no_grad;
            const Tensor log_probs = log_softmax(model->logits(IntTensor::from_vector(row_src, {1, src_len}),
                                                               IntTensor::from_vector(tgt_in, {1, len})),
                                                 -1);
            double total = 0;
            const int64_t vocab = log_probs.size(-1);
            for (int64_t t = 0; t < len; ++t) {
                const float* step = log_probs.data() + t * vocab;
                CHECK(std::max_element(step, step + vocab) - step ==
                      tgt_out[static_cast<size_t>(t)]);  // greedy's choice
                total += step[tgt_out[static_cast<size_t>(t)]];
            }
            CHECK(h.log_prob == Approx(total).margin(1e-4));
        }
    }
}

TEST_CASE("beam search keeps one source's hypotheses apart from another's", "[decoding]") {
    // The same source twice in a batch gets the same answer as alone.
    for (const ModelConfig& config : tiny_models()) {
        INFO(name_of(config));
        Generator gen(7);
        auto model = make_model(config, gen);
        model->eval();
        const IntTensor pair = IntTensor::from_vector({4, 6, 5, 8, 0, 4, 6, 5, 8, 0, 7, 4, 0, 0, 0}, {3, 5});
        const IntTensor alone = IntTensor::from_vector({7, 4}, {1, 2});
        const auto batch = beam_search(*model, pair, {12, 4, 0.6f});
        const auto single = beam_search(*model, alone, {12, 4, 0.6f});
        CHECK(batch[0].tokens == batch[1].tokens);
        CHECK(batch[2].tokens == single[0].tokens);
        CHECK(batch[2].score == Approx(single[0].score).margin(1e-5));
        for (const Hypothesis& h : batch) CHECK(static_cast<int64_t>(h.tokens.size()) <= 12);
    }
}

TEST_CASE("n-best beam search lists distinct hypotheses best first, the first being beam search's choice",
          "[decoding]") {
    for (const ModelConfig& config : tiny_models()) {
        INFO(name_of(config));
        Generator gen(9);
        auto model = make_model(config, gen);
        model->eval();
        DecodingOptions options{10, 5, 0.6f};
        const auto best = beam_search(*model, sources(), options);
        options.nbest = 3;
        const auto lists = search(*model, sources(), options);
        REQUIRE(lists.size() == best.size());
        for (size_t b = 0; b < lists.size(); ++b) {
            REQUIRE(!lists[b].empty());
            CHECK(lists[b].size() <= 3);
            CHECK(lists[b][0].tokens == best[b].tokens);
            CHECK(lists[b][0].score == best[b].score);
            std::set<std::vector<int64_t>> distinct;
            for (size_t i = 0; i < lists[b].size(); ++i) {
                distinct.insert(lists[b][i].tokens);
                if (i > 0) CHECK(lists[b][i - 1].score >= lists[b][i].score);
            }
            CHECK(distinct.size() == lists[b].size());
        }
        options.nbest = 6;
        CHECK_THROWS_WITH(search(*model, sources(), options), Catch::Contains("nbest"));
    }
}

namespace {

// The best hypothesis by exhaustive search, scored as beam search scores them: every sequence of
// tokens that ends with </s> within max_len, and every sequence of max_len other tokens.
Hypothesis exhaustive_best(Model& model, const IntTensor& src, int64_t max_len, float alpha) {
    Hypothesis best;
    best.score = -INFINITY;
    std::vector<int64_t> prefix;
    const std::function<void(float)> extend = [&](float log_prob) {
        // Re-decode the prefix from the start: slow, but independent of the search under test.
        auto state = model.start_decoding(src);
        IntTensor token = IntTensor::full({1}, kSos);
        Tensor log_probs;
        for (size_t t = 0; t <= prefix.size(); ++t) {
            log_probs = log_softmax(model.decode_step(*state, token), -1);
            if (t < prefix.size()) token.data()[0] = prefix[t];
        }
        const int64_t vocab = log_probs.size(-1);
        for (int64_t v = 0; v < vocab; ++v) {
            const float lp = log_prob + log_probs.data()[v];
            const auto length = static_cast<int64_t>(prefix.size()) + 1;
            if (v == kEos || length == max_len) {
                // A finished sequence counts its </s>; one cut at max_len only its tokens.
                std::vector<int64_t> tokens = prefix;
                if (v != kEos) tokens.push_back(v);
                const float score =
                    lp / length_penalty(v == kEos ? length : static_cast<int64_t>(tokens.size()), alpha);
                if (score > best.score) best = {tokens, lp, score, v == kEos};
                continue;
            }
            prefix.push_back(v);
            extend(lp);
            prefix.pop_back();
        }
    };
    extend(0.0f);
    return best;
}

}  // namespace

TEST_CASE("a beam wide enough to hold every hypothesis finds what exhaustive search finds", "[decoding]") {
    NoGradGuard no_grad;
    for (ModelConfig config : tiny_models()) {
        INFO(name_of(config));
        config.tgt_vocab = 6;  // ids 0-5: 6 + 36 + 216 sequences of up to three tokens
        Generator gen(21);
        auto model = make_model(config, gen);
        model->eval();
        for (const IntTensor& src : {IntTensor::from_vector({4, 5, 6}, {1, 3}), IntTensor::from_vector({7}, {1, 1})}) {
            const Hypothesis expected = exhaustive_best(*model, src, 3, 0.6f);
            const Hypothesis found = beam_search(*model, src, {3, 256, 0.6f}).front();
            CHECK(found.tokens == expected.tokens);
            CHECK(found.finished == expected.finished);
            CHECK(found.score == Approx(expected.score).margin(1e-5));
        }
    }
}

TEST_CASE("decoding rejects bad arguments", "[decoding][errors]") {
    Generator gen(1);
    auto model = make_model(tiny_models()[0], gen);
    CHECK_THROWS_AS(greedy_decode(*model, IntTensor::zeros({0, 3}), 5), Error);
    CHECK_THROWS_AS(greedy_decode(*model, sources(), 0), Error);
    CHECK_THROWS_WITH(beam_search(*model, sources(), {5, 0, 0.6f}),
                      Catch::Contains("\"beam_size\" must be in [1, 256], got 0"));
    CHECK(length_penalty(1, 0.0f) == 1.0f);
    CHECK(length_penalty(7, 1.0f) == Approx(2.0f));
}

TEST_CASE("min_len bars </s> until that many tokens, in greedy and in beam search", "[decoding]") {
    int shorter_without = 0;
    for (const ModelConfig& config : tiny_models()) {
        INFO(name_of(config));
        Generator gen(5);
        auto model = make_model(config, gen);
        model->eval();
        for (int64_t beam : {1, 3}) {
            DecodingOptions options{10, beam, 0.6f};
            options.min_len = 10;  // every hypothesis runs the 10 steps
            for (const Hypothesis& h : beam_search(*model, sources(), options)) {
                CHECK(static_cast<int64_t>(h.tokens.size()) + (h.finished ? 1 : 0) == 10);
                CHECK(std::count(h.tokens.begin(), h.tokens.end(), kEos) == 0);
            }
            // A min_len of 0 or 1 bars nothing: the same search either way.
            options.min_len = 0;
            const auto free = beam_search(*model, sources(), options);
            options.min_len = 1;
            const auto one = beam_search(*model, sources(), options);
            for (size_t i = 0; i < free.size(); ++i) CHECK(free[i].tokens == one[i].tokens);
            for (const Hypothesis& h : free) shorter_without += h.finished && h.tokens.size() + 1 < 10 ? 1 : 0;
        }
    }
    CHECK(shorter_without > 0);  // min_len had hypotheses to hold back
}

TEST_CASE("reordering beams within their sources steps as selecting the rows does", "[decoding]") {
    for (const ModelConfig& config : tiny_models()) {
        INFO(name_of(config));
        Generator gen(9);
        auto model = make_model(config, gen);
        model->eval();
        NoGradGuard no_grad;
        const int64_t k = 3;
        auto by_select = model->start_decoding(sources());
        auto by_reorder = model->start_decoding(sources());
        std::vector<int64_t> expand;  // each source's row repeated k times
        for (int64_t b = 0; b < 4; ++b) expand.insert(expand.end(), static_cast<size_t>(k), b);
        by_select->select_rows(expand);
        by_reorder->select_rows(expand);
        IntTensor tokens = IntTensor::full({4 * k}, kSos);
        for (int64_t step = 0; step < 4; ++step) {
            const Tensor a = model->decode_step(*by_select, tokens), b = model->decode_step(*by_reorder, tokens);
            REQUIRE(a.to_vector() == b.to_vector());
            std::vector<int64_t> parents;  // within each source: reversed, then the middle beam twice
            for (int64_t s = 0; s < 4; ++s)
                for (int64_t j = 0; j < k; ++j) parents.push_back(s * k + (step % 2 == 0 ? k - 1 - j : 1));
            by_select->select_rows(parents);
            by_reorder->reorder_beams(parents, k);
            for (int64_t r = 0; r < 4 * k; ++r) tokens.data()[r] = 4 + (r * 7 + step) % 6;
        }
    }
}
