// Attention: masks, MultiHeadAttention (properties, gradients, parity with PyTorch) and the
// attention Seq2Seq scorers AttentionSimple and AttentionParams.
#include "test_nn_helpers.h"

#include "seqgrad/nn.h"

using namespace seqgrad;
using namespace seqgrad::nn;
using Catch::Matchers::Contains;
using testing::random_tensor;
using testing::require_close;
using testing::require_gradcheck_in_place;

namespace {

// The largest weight a masked key may get: 0 in exact arithmetic and in PyTorch, about 1e-38
// from a fast exp that clamps its argument.
constexpr float kMasked = 1e-30f;

// weights[b, h, q, k] of a [B, H, Tq, Tk] tensor
float at4(const Tensor& t, int64_t b, int64_t h, int64_t q, int64_t k) {
    const Shape& s = t.shape();
    return t.data()[((b * s[1] + h) * s[2] + q) * s[3] + k];
}

}  // namespace

TEST_CASE("padding, causal and decoder masks: real keys, the lower triangle, and both", "[nn][attention]") {
    const IntTensor ids = IntTensor::from_vector({5, 6, 0, 7, 0, 0}, {2, 3});
    const IntTensor pad = padding_mask(ids);
    CHECK(pad.shape() == Shape{2, 1, 1, 3});
    CHECK(pad.to_vector() == std::vector<int64_t>{1, 1, 0, 1, 0, 0});
    const IntTensor causal = causal_mask(3);
    CHECK(causal.shape() == Shape{1, 1, 3, 3});
    CHECK(causal.to_vector() == std::vector<int64_t>{1, 0, 0, 1, 1, 0, 1, 1, 1});
    const IntTensor dec = decoder_mask(ids);
    CHECK(dec.shape() == Shape{2, 1, 3, 3});
    CHECK(dec.to_vector() == std::vector<int64_t>{1, 0, 0, 1, 1, 0, 1, 1, 0,    // row 0: key 2 is padding
                                                  1, 0, 0, 1, 0, 0, 1, 0, 0});  // row 1: keys 1, 2
}

TEST_CASE("MultiHeadAttention has wq, wk, wv, wo and returns weights [B, H, Tq, Tk] that sum to one",
          "[nn][attention]") {
    Generator gen(1);
    MultiHeadAttention mha(8, 2, gen);
    std::vector<std::string> names;
    for (const auto& [name, p] : mha.named_parameters()) names.push_back(name);
    CHECK(names == std::vector<std::string>{"wq.weight", "wq.bias", "wk.weight", "wk.bias", "wv.weight", "wv.bias",
                                            "wo.weight", "wo.bias"});
    const Tensor q = random_tensor({3, 4, 8}, 2), kv = random_tensor({3, 5, 8}, 3);
    const AttentionOutput out = mha.forward(q, kv, kv);
    CHECK(out.output.shape() == Shape{3, 4, 8});
    REQUIRE(out.attention_weights.shape() == Shape{3, 2, 4, 5});
    const Tensor row_sums = sum(out.attention_weights, {3});
    for (float s : row_sums.to_vector()) CHECK(s == Approx(1.0f).epsilon(1e-5));
    CHECK_THROWS_WITH(MultiHeadAttention(6, 4, gen), Contains("multiple of n_heads"));
    CHECK_THROWS_WITH(mha.forward(q, kv, kv, IntTensor::full({3, 1, 1, 4}, 1)),
                      Contains("MultiHeadAttention") && Contains("broadcast"));
    CHECK_THROWS_WITH(mha.forward(q, random_tensor({5, 8}, 4), random_tensor({5, 8}, 5)),
                      Contains("key and value must be [batch, length, 8], got [5, 8] and [5, 8]"));
    CHECK_THROWS_WITH(mha.forward(q, kv, random_tensor({3, 6, 8}, 6)),
                      Contains("key [3, 5, 8] and value [3, 6, 8] differ in batch or length"));
    CHECK_THROWS_WITH(mha.forward(q, random_tensor({2, 5, 8}, 7), random_tensor({2, 5, 8}, 8)),
                      Contains("keys [2, 5, 8] do not fit queries [3, 4, 8]"));
}

TEST_CASE("a query whose keys are all masked gets uniform weights, not NaN", "[nn][attention]") {
    Generator gen(4);
    MultiHeadAttention mha(6, 3, gen);
    const Tensor x = random_tensor({2, 4, 6}, 5, -3, 3);
    const IntTensor mask = IntTensor::from_vector({1, 1, 0, 0, 0, 0, 0, 0}, {2, 1, 1, 4});  // row 1: all masked
    const AttentionOutput out = mha.forward(x, x, x, mask);
    for (int64_t h = 0; h < 3; ++h)
        for (int64_t q = 0; q < 4; ++q)
            for (int64_t k = 0; k < 4; ++k) CHECK(at4(out.attention_weights, 1, h, q, k) == Approx(0.25f));
    for (float v : out.output.to_vector()) CHECK(std::isfinite(v));
    out.output.sum().backward();
    for (const Tensor& p : mha.parameters())
        for (float g : p.grad().to_vector()) CHECK(std::isfinite(g));
}

TEST_CASE("a padding mask blocks keys: zero weight, and their keys and values change nothing", "[nn][attention]") {
    Generator gen(6);
    MultiHeadAttention mha(8, 2, gen);
    const Tensor q = random_tensor({2, 3, 8}, 7, -1, 1, false);
    Tensor kv = random_tensor({2, 5, 8}, 8, -1, 1, false);
    const IntTensor ids = IntTensor::from_vector({4, 4, 4, 0, 0, 4, 4, 4, 4, 0}, {2, 5});
    const IntTensor mask = padding_mask(ids);
    const AttentionOutput before = mha.forward(q, kv, kv, mask);
    for (int64_t h = 0; h < 2; ++h)
        for (int64_t i = 0; i < 3; ++i) {
            CHECK(at4(before.attention_weights, 0, h, i, 3) < kMasked);
            CHECK(at4(before.attention_weights, 0, h, i, 4) < kMasked);
            CHECK(at4(before.attention_weights, 1, h, i, 4) < kMasked);
            CHECK(at4(before.attention_weights, 1, h, i, 0) > 1e-3f);
        }
    for (int64_t j = 0; j < 8; ++j) {  // scribble over the padded positions
        kv.data()[(0 * 5 + 3) * 8 + j] = 50;
        kv.data()[(0 * 5 + 4) * 8 + j] = -50;
        kv.data()[(1 * 5 + 4) * 8 + j] = 9;
    }
    const AttentionOutput after = mha.forward(q, kv, kv, mask);
    CHECK(testing::max_abs_diff(before.output, after.output) < 1e-6f);
    // Without the mask the scribbles would matter.
    CHECK(testing::max_abs_diff(mha.forward(q, kv, kv).output, after.output) > 1e-2f);
}

TEST_CASE("a causal mask lets position t see only positions up to t", "[nn][attention]") {
    Generator gen(9);
    MultiHeadAttention mha(4, 2, gen);
    Tensor x = random_tensor({1, 5, 4}, 10, -1, 1, false);
    const IntTensor mask = causal_mask(5);
    const AttentionOutput before = mha.forward(x, x, x, mask);
    for (int64_t h = 0; h < 2; ++h)
        for (int64_t q = 0; q < 5; ++q)
            for (int64_t k = q + 1; k < 5; ++k) CHECK(at4(before.attention_weights, 0, h, q, k) < kMasked);
    for (int64_t j = 0; j < 4; ++j) x.data()[3 * 4 + j] += 2;  // change position 3
    const AttentionOutput after = mha.forward(x, x, x, mask);
    const Tensor first_three = slice(after.output, 1, 0, 3);
    CHECK(testing::max_abs_diff(slice(before.output, 1, 0, 3), first_three) < 1e-6f);
    CHECK(testing::max_abs_diff(slice(before.output, 1, 3, 5), slice(after.output, 1, 3, 5)) > 1e-3f);
}

TEST_CASE("MultiHeadAttention's gradients pass gradcheck, with a mask", "[nn][attention][gradcheck]") {
    Generator gen(11);
    MultiHeadAttention mha(4, 2, gen);
    const Tensor q = random_tensor({2, 3, 4}, 12), k = random_tensor({2, 2, 4}, 13), v = random_tensor({2, 2, 4}, 14);
    const IntTensor mask = IntTensor::from_vector({1, 1, 1, 0}, {2, 1, 1, 2});
    // Every parameter but wk.bias, whose gradient is zero in exact arithmetic (a shift of every
    // score of a row by q . b_k leaves the softmax as it is), so no check could tell it from a wrong one.
    std::vector<Tensor> checked{q, k, v};
    for (const auto& [name, p] : mha.named_parameters())
        if (name != "wk.bias") checked.push_back(p);
    require_gradcheck_in_place([&] { return mha.forward(q, k, v, mask).output; }, checked);
    // and through the attention weights themselves
    require_gradcheck_in_place([&] { return mha.forward(q, k, v, mask).attention_weights; }, {q, k});
}

TEST_CASE("attending in two halves with a growing key cache equals attending all at once", "[nn][attention]") {
    Generator gen(15);
    for (bool rotary : {false, true}) {
        MultiHeadAttention mha(8, 2, gen, 0.0f, nullptr, rotary);
        const Tensor x = random_tensor({2, 4, 8}, 16, -1, 1, false);
        const AttentionOutput full = mha.forward(x, x, x, causal_mask(4));
        // Step by step: each new position's keys and values appended to the cache.
        KeysValues cache;
        for (int64_t t = 0; t < 4; ++t) {
            const Tensor xt = slice(x, 1, t, t + 1);
            const KeysValues step = mha.project_keys_values(xt, xt, t);
            cache = t == 0 ? step
                           : KeysValues{concat({cache.keys, step.keys}, 1), concat({cache.values, step.values}, 1)};
            const AttentionOutput out = mha.attend(xt, cache, IntTensor(), t);
            INFO("rotary " << rotary << " step " << t);
            CHECK(testing::max_abs_diff(out.output, slice(full.output, 1, t, t + 1)) < 1e-5f);
        }
    }
}

TEST_CASE("stepping through a key/value cache equals attending over the whole prefix, rows reordered or not",
          "[nn][attention]") {
    Generator gen(19);
    NoGradGuard no_grad;
    for (bool rotary : {false, true}) {
        INFO("rotary " << rotary);
        MultiHeadAttention mha(8, 2, gen, 0.0f, nullptr, rotary);
        const Tensor x = random_tensor({3, 6, 8}, 20, -1, 1, false);
        const Tensor full = mha.forward(x, x, x, causal_mask(6)).output;  // [3, 6, 8]
        KeyValueCache cache(3, 2, 8, 6);  // two layers' storage; this attention is layer 1
        const float* storage = nullptr;
        for (int64_t t = 0; t < 6; ++t) {
            CHECK(cache.advance() == t);
            const Tensor out = mha.step(slice(x, 1, t, t + 1), cache, 1).output;
            CHECK(testing::max_abs_diff(out, slice(full, 1, t, t + 1)) < 1e-5f);
            if (t == 0) storage = cache.stored(1).keys.data();
            CHECK(cache.stored(1).keys.data() == storage);  // written in place, never moved
        }
        CHECK_THROWS_WITH(cache.advance(), Catch::Contains("beyond the longest sequence"));
    }
    // Reordered rows (beam search) continue as the rows they took the history of.
    MultiHeadAttention mha(8, 2, gen);
    const Tensor x = random_tensor({2, 4, 8}, 21, -1, 1, false);
    KeyValueCache cache(2, 1, 8, 8);
    for (int64_t t = 0; t < 3; ++t) {
        cache.advance();
        mha.step(slice(x, 1, t, t + 1), cache, 0);
    }
    const std::vector<int64_t> rows = {1, 1, 0};  // three rows now: row 1 twice, then row 0
    cache.select_rows(rows);
    CHECK(cache.rows() == 3);
    cache.advance();
    const Tensor next = random_tensor({3, 1, 8}, 22, -1, 1, false);
    const Tensor stepped = mha.step(next, cache, 0).output;
    for (int64_t i = 0; i < 3; ++i) {
        // Row i's history is row rows[i]'s three positions, then its own new one.
        const int64_t from = rows[static_cast<size_t>(i)];
        const Tensor history = concat({slice(slice(x, 0, from, from + 1), 1, 0, 3), slice(next, 0, i, i + 1)}, 1);
        const Tensor expected = mha.forward(history, history, history, causal_mask(4)).output;
        CHECK(testing::max_abs_diff(slice(stepped, 0, i, i + 1), slice(expected, 1, 3, 4)) < 1e-5f);
    }
    CHECK_THROWS_WITH(cache.reorder_beams({2, 0, 1}, 2), Catch::Contains("not in the group"));
    CHECK_THROWS_WITH(cache.select_rows({3}), Catch::Contains("outside [0, 3)"));
}

TEST_CASE("a prefix read in one pass (prefill) equals stepping through it, and later steps agree", "[nn][attention]") {
    Generator gen(23);
    NoGradGuard no_grad;
    for (bool rotary : {false, true}) {
        INFO("rotary " << rotary);
        MultiHeadAttention mha(8, 2, gen, 0.0f, nullptr, rotary);
        const Tensor x = random_tensor({2, 7, 8}, 24, -1, 1, false);
        const Tensor full = mha.forward(x, x, x, causal_mask(7)).output;
        KeyValueCache cache(2, 1, 8, 7);
        CHECK(cache.advance(5) == 0);
        CHECK(cache.length() == 5);
        const Tensor prefix = mha.prefill(slice(x, 1, 0, 5), cache, 0).output;  // [2, 5, 8]
        CHECK(testing::max_abs_diff(prefix, slice(full, 1, 0, 5)) < 1e-5f);
        for (int64_t t = 5; t < 7; ++t) {
            CHECK(cache.advance() == t);
            const Tensor out = mha.step(slice(x, 1, t, t + 1), cache, 0).output;
            CHECK(testing::max_abs_diff(out, slice(full, 1, t, t + 1)) < 1e-5f);
        }
        CHECK_THROWS_WITH(cache.advance(), Catch::Contains("beyond the longest sequence"));
    }
}

TEST_CASE("rotary attention depends on relative positions only", "[nn][attention]") {
    Generator gen(17);
    MultiHeadAttention rotary(8, 2, gen, 0.0f, nullptr, /*rotary=*/true);
    MultiHeadAttention plain(8, 2, gen);
    const NamedTensors weights = rotary.state_dict();
    plain.load_state_dict({weights.begin(), weights.end()});
    const Tensor x = random_tensor({1, 5, 8}, 18, -1, 1, false);
    const AttentionOutput at_zero = rotary.forward(x, x, x);
    const AttentionOutput shifted = rotary.attend(x, rotary.project_keys_values(x, x, 11), IntTensor(), 11);
    CHECK(testing::max_abs_diff(at_zero.output, shifted.output) < 1e-4f);
    CHECK(testing::max_abs_diff(at_zero.output, plain.forward(x, x, x).output) > 1e-3f);
    // Queries and keys at different offsets see a different relative position.
    const AttentionOutput apart = rotary.attend(x, rotary.project_keys_values(x, x, 3), IntTensor(), 0);
    CHECK(testing::max_abs_diff(at_zero.attention_weights, apart.attention_weights) > 1e-3f);
}

TEST_CASE("MultiHeadAttention matches PyTorch on the committed fixtures", "[nn][attention][parity]") {
    for (const char* name : {"multi_head_attention_key_mask.safetensors", "multi_head_attention_causal.safetensors"}) {
        INFO(name);
        const testing::Fixture fx = testing::load_fixture(name);
        REQUIRE(fx.config.at("model") == "multi_head_attention");
        Generator gen(0);
        MultiHeadAttention mha(fx.config.at("d_model").get<int64_t>(), fx.config.at("n_heads").get<int64_t>(), gen);
        mha.load_state_dict(fx.parameters);
        const Tensor q = testing::leaf_copy(fx.file.tensor("input.q"));
        const Tensor k = testing::leaf_copy(fx.file.tensor("input.k"));
        const Tensor v = testing::leaf_copy(fx.file.tensor("input.v"));
        const IntTensor mask = fx.file.int_tensor("input.mask");
        const AttentionOutput out = mha.forward(q, k, v, mask);
        require_close(out.output, fx.file.tensor("expect.output"), "output");
        require_close(out.attention_weights, fx.file.tensor("expect.attention_weights"), "attention_weights");
        const Tensor loss = sum(mul(out.output, fx.file.tensor("input.out_weight")));
        require_close(loss, fx.file.tensor("expect.loss"), "loss");
        loss.backward();
        for (const auto& [pname, p] : mha.named_parameters())
            require_close(p.grad(), fx.file.tensor("expect.grad." + pname), "grad " + pname);
        require_close(q.grad(), fx.file.tensor("expect.input_grad.q"), "input_grad.q");
        require_close(k.grad(), fx.file.tensor("expect.input_grad.k"), "input_grad.k");
        require_close(v.grad(), fx.file.tensor("expect.input_grad.v"), "input_grad.v");
    }
}

// ---- the attention Seq2Seq scorers ----

namespace {

// softmax over j of score(b, j), with -1e9 where the source is padding; in double.
std::vector<double> reference_weights(int64_t batch, int64_t src_len, const IntTensor& src_mask,
                                      const std::function<double(int64_t, int64_t)>& score) {
    std::vector<double> out(static_cast<size_t>(batch * src_len));
    for (int64_t b = 0; b < batch; ++b) {
        std::vector<double> s(static_cast<size_t>(src_len));
        double top = -1e300;
        for (int64_t j = 0; j < src_len; ++j) {
            s[static_cast<size_t>(j)] = src_mask.data()[b * src_len + j] == 0 ? -1e9 : score(b, j);
            top = std::max(top, s[static_cast<size_t>(j)]);
        }
        double total = 0;
        for (double& v : s) total += (v = std::exp(v - top));
        for (int64_t j = 0; j < src_len; ++j)
            out[static_cast<size_t>(b * src_len + j)] = s[static_cast<size_t>(j)] / total;
    }
    return out;
}

}  // namespace

TEST_CASE("AttentionSimple scores q . enc_j / sqrt(hidden), masks padding, has no parameters", "[nn][attention]") {
    const int64_t batch = 2, src_len = 4, hidden = 3;
    AttentionSimple attention(hidden);
    CHECK(attention.named_parameters().empty());
    const Tensor query = random_tensor({batch, hidden}, 20, -2, 2);
    const Tensor enc = random_tensor({batch, src_len, hidden}, 21, -2, 2);
    const IntTensor src_mask = IntTensor::from_vector({1, 1, 1, 0, 1, 0, 0, 0}, {batch, src_len});
    const Tensor weights = attention.forward(query, enc, src_mask);
    REQUIRE(weights.shape() == Shape{batch, src_len});
    const auto expected = reference_weights(batch, src_len, src_mask, [&](int64_t b, int64_t j) {
        double dot = 0;
        for (int64_t i = 0; i < hidden; ++i)
            dot += query.data()[b * hidden + i] * enc.data()[(b * src_len + j) * hidden + i];
        return dot / std::sqrt(static_cast<double>(hidden));
    });
    for (size_t i = 0; i < expected.size(); ++i) CHECK(weights.to_vector()[i] == Approx(expected[i]).margin(1e-6));
    CHECK(weights.to_vector()[4] == Approx(1.0f).epsilon(1e-6));  // a one-token source takes all the weight
    testing::require_gradcheck([&](const std::vector<Tensor>& in) { return attention.forward(in[0], in[1], src_mask); },
                               {query, enc});
}

TEST_CASE("AttentionParams scores v . tanh(attn(q and enc_j concatenated)), the query in attn's first columns",
          "[nn][attention]") {
    const int64_t batch = 2, src_len = 3, hidden = 2;
    Generator gen(22);
    AttentionParams attention(hidden, gen);
    std::vector<std::string> names;
    for (const auto& [name, p] : attention.named_parameters()) names.push_back(name);
    CHECK(names == std::vector<std::string>{"v", "attn.weight", "attn.bias"});  // PyTorch's order
    CHECK(attention.attn->weight.shape() == Shape{hidden, 2 * hidden});
    for (float v : attention.v.to_vector()) CHECK((v >= 0 && v < 1));  // torch.rand

    const Tensor query = random_tensor({batch, hidden}, 23);
    const Tensor enc = random_tensor({batch, src_len, hidden}, 24);
    const IntTensor src_mask = IntTensor::from_vector({1, 1, 0, 1, 1, 1}, {batch, src_len});
    const Tensor weights = attention.forward(query, enc, src_mask);
    const float* w = attention.attn->weight.data();
    const float* bias = attention.attn->bias.data();
    const auto expected = reference_weights(batch, src_len, src_mask, [&](int64_t b, int64_t j) {
        double score = 0;
        for (int64_t o = 0; o < hidden; ++o) {
            double energy = bias[o];
            for (int64_t i = 0; i < hidden; ++i) {
                energy += w[o * 2 * hidden + i] * query.data()[b * hidden + i];
                energy += w[o * 2 * hidden + hidden + i] * enc.data()[(b * src_len + j) * hidden + i];
            }
            score += attention.v.data()[o] * std::tanh(energy);
        }
        return score;
    });
    for (size_t i = 0; i < expected.size(); ++i) CHECK(weights.to_vector()[i] == Approx(expected[i]).margin(1e-6));

    std::vector<Tensor> checked{query, enc};
    for (const Tensor& p : attention.parameters()) checked.push_back(p);
    require_gradcheck_in_place([&] { return attention.forward(query, enc, src_mask); }, checked);
}
