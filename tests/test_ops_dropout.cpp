// Dropout: seeded, identity in evaluation, scaled in training, gradient through the same mask.
#include <cmath>
#include <limits>

#include "../core/ops/kernels.h"
#include "helpers.h"
#include "seqgrad/core/hash.h"

using namespace seqgrad;

TEST_CASE("dropout is the identity in evaluation and with p = 0", "[ops][dropout]") {
    Generator gen(1);
    auto x = testing::random_tensor({4, 5}, 1);
    CHECK(dropout(x, 0.5f, false, gen).to_vector() == x.to_vector());
    CHECK(dropout(x, 0.0f, true, gen).to_vector() == x.to_vector());
}

TEST_CASE("dropout zeroes about p of the elements and scales the rest", "[ops][dropout]") {
    Generator gen(2);
    auto x = Tensor::ones({100000});
    auto y = dropout(x, 0.3f, true, gen);
    int64_t zeros = 0;
    for (float v : y.to_vector()) {
        if (v == 0) ++zeros;
        else REQUIRE(v == Approx(1 / 0.7f));
    }
    CHECK(static_cast<double>(zeros) / 100000 == Approx(0.3).margin(0.01));
}

TEST_CASE("dropout multiplies every element by its factor, as PyTorch does", "[ops][dropout]") {
    // Each element is multiplied by 1 / (1 - p) or by 0, never skipped: a dropped infinity or NaN
    // becomes NaN (as torch.nn.functional.dropout makes it), a kept one stays what it was scaled.
    Generator gen(5);
    const float inf = std::numeric_limits<float>::infinity();
    std::vector<float> values(1000, inf);
    for (size_t i = 0; i < values.size(); i += 2) values[i] = -2.0f;
    const auto y = dropout(Tensor::from_vector(values, {1000}), 0.5f, true, gen).to_vector();
    int64_t dropped_inf = 0, kept_inf = 0, dropped_finite = 0;
    for (size_t i = 0; i < y.size(); ++i) {
        if (values[i] == inf) {
            if (std::isnan(y[i])) {
                ++dropped_inf;
            } else {
                REQUIRE(y[i] == inf);
                ++kept_inf;
            }
        } else if (y[i] == 0) {
            ++dropped_finite;
        } else {
            REQUIRE(y[i] == -4.0f);
        }
    }
    CHECK(dropped_inf > 200);
    CHECK(kept_inf > 200);
    CHECK(dropped_finite > 200);
}

TEST_CASE("dropout's decisions are independent between neighbours and between calls", "[ops][dropout]") {
    // The mask is counter-based (element i of a call decides from the call's key and i), so check
    // that neighbouring elements and successive calls do not repeat each other: with p = 0.5,
    // each of the four (kept, kept') combinations should come up about a quarter of the time.
    Generator gen(8);
    const int64_t n = 200000;
    const auto first = dropout(Tensor::ones({n}), 0.5f, true, gen).to_vector();
    const auto second = dropout(Tensor::ones({n}), 0.5f, true, gen).to_vector();
    int64_t neighbours[2][2] = {}, calls[2][2] = {};
    for (int64_t i = 0; i + 1 < n; ++i) neighbours[first[i] != 0][first[i + 1] != 0]++;
    for (int64_t i = 0; i < n; ++i) calls[first[i] != 0][second[i] != 0]++;
    for (int a = 0; a < 2; ++a) {
        for (int b = 0; b < 2; ++b) {
            CHECK(static_cast<double>(neighbours[a][b]) / (n - 1) == Approx(0.25).margin(0.006));
            CHECK(static_cast<double>(calls[a][b]) / n == Approx(0.25).margin(0.006));
        }
    }
}

TEST_CASE("dropout keeps element i when its draw from the call's key is at least p 2^32", "[ops][dropout]") {
    // The mask's definition (hash.h's dropout_draw, kernels.h's DropoutMask), at every kernel level
    // the loop is compiled for: a run resumed from a checkpoint draws the masks it would have drawn.
    const int64_t n = 5000;
    const float p = 0.3f;
    Generator gen(21), copy(21);
    const uint64_t key = copy.next_u64();
    const auto threshold = static_cast<uint32_t>(std::ldexp(static_cast<double>(p), 32));
    const auto y = dropout(Tensor::ones({n}), p, true, gen).to_vector();
    for (int64_t i = 0; i < n; ++i) {
        INFO("element " << i);
        REQUIRE(y[static_cast<size_t>(i)] ==
                (dropout_draw(key, static_cast<uint64_t>(i)) >= threshold ? 1 / (1 - p) : 0));
    }
}

TEST_CASE("a dropout mask past 2^32 elements draws each element as dropout_draw defines it", "[ops][dropout]") {
    // Attention counts a mask's elements over [batch, heads, queries, keys], which can pass 2^32:
    // the stretches on either side of a multiple of 2^32 take their own (a, b).
    Generator gen(22);
    const detail::DropoutMask mask(0.5f, gen);
    const float scale = 2.0f;
    for (const int64_t first : {int64_t{0}, (int64_t{1} << 32) - 37, (int64_t{3} << 32) - 1, int64_t{5} << 32}) {
        CAPTURE(first);
        std::vector<float> factors(100), in(100, 1.0f), out(100);
        mask.factors(factors.data(), 100, first);
        mask.apply(in.data(), out.data(), 100, first);
        int64_t kept = 0;
        for (int64_t j = 0; j < 100; ++j) {
            const uint64_t i = static_cast<uint64_t>(first + j);
            const float expected = dropout_draw(mask.key, i) >= mask.threshold ? scale : 0.0f;
            CHECK(factors[static_cast<size_t>(j)] == expected);
            CHECK(out[static_cast<size_t>(j)] == expected);
            kept += expected != 0;
        }
        CHECK(kept > 25);  // about half
        CHECK(kept < 75);
        // map() hands each element the same factor
        mask.map(out.data(), 100, first, [](int64_t, float factor) { return factor; });
        CHECK(out == factors);
    }
    // the elements after 2^32 are not those of the first 2^32 again
    std::vector<float> low(64), high(64);
    mask.factors(low.data(), 64, 0);
    mask.factors(high.data(), 64, int64_t{1} << 32);
    CHECK(low != high);
}

TEST_CASE("dropout's mask does not depend on the number of threads", "[ops][dropout][threads]") {
    auto x = testing::random_tensor({300000}, 9);
    std::vector<float> serial, parallel;
    {
        const testing::ThreadCountScope restore(1);
        Generator one(10);
        serial = dropout(x, 0.25f, true, one).to_vector();
        set_num_threads(2);
        Generator two(10);
        parallel = dropout(x, 0.25f, true, two).to_vector();
    }
    CHECK(serial == parallel);
}

TEST_CASE("dropout with p = 1 drops everything, gradient included", "[ops][dropout]") {
    Generator gen(11);
    auto x = testing::random_tensor({3, 5}, 12);
    auto y = dropout(x, 1.0f, true, gen);
    for (float v : y.to_vector()) CHECK(v == 0.0f);
    y.sum().backward();
    for (float g : x.grad().to_vector()) CHECK(g == 0.0f);
}

TEST_CASE("dropout is reproducible from the generator's seed", "[ops][dropout]") {
    Generator a(3), b(3);
    auto x = Tensor::ones({64});
    CHECK(dropout(x, 0.5f, true, a).to_vector() == dropout(x, 0.5f, true, b).to_vector());
}

TEST_CASE("dropout's gradient goes through the same mask", "[ops][dropout][gradcheck]") {
    // With a fixed mask (a fresh generator of the same seed per call), dropout is a fixed linear map.
    auto x = testing::random_tensor({3, 4}, 4);
    testing::require_gradcheck(
        [](const std::vector<Tensor>& in) {
        Generator gen(5);
        return dropout(in[0], 0.4f, true, gen);
        },
        {x});
    Generator gen(6);
    auto y = dropout(x, 0.5f, true, gen);
    y.sum().backward();
    for (int64_t i = 0; i < x.numel(); ++i) CHECK(x.grad().data()[i] == (y.data()[i] == 0 ? 0.0f : 2.0f));
}

TEST_CASE("dropout rejects a probability outside [0, 1]", "[ops][dropout][errors]") {
    Generator gen(7);
    CHECK_THROWS_WITH(dropout(Tensor::ones({2}), 1.5f, true, gen), Catch::Contains("dropout"));
    CHECK_THROWS_AS(dropout(Tensor::ones({2}), -0.1f, true, gen), Error);
}

// ---- dropout fused with the work around it ----

namespace {

// Inputs away from relu's kink, so that finite differences do not straddle it.
Tensor away_from_zero(const Shape& shape, uint64_t seed) {
    std::vector<float> v = testing::random_tensor(shape, seed, -1, 1, false).to_vector();
    for (float& x : v) x = x < 0 ? x - 0.1f : x + 0.1f;
    return Tensor::from_vector(v, shape, true);
}

}  // namespace

TEST_CASE("add_dropout is add(x, dropout(y)): the same values, draws and gradients", "[ops][dropout]") {
    for (float p : {0.1f, 0.5f}) {
        for (const Shape& shape : {Shape{1003}, Shape{7, 129}}) {
            INFO("p " << p << " shape " << shape);
            const Tensor x1 = testing::random_tensor(shape, 31), y1 = testing::random_tensor(shape, 32);
            const Tensor x2 = testing::random_tensor(shape, 31), y2 = testing::random_tensor(shape, 32);
            Generator fused_gen(33), plain_gen(33);
            const Tensor fused = add_dropout(x1, y1, p, true, fused_gen);
            const Tensor plain = add(x2, dropout(y2, p, true, plain_gen));
            CHECK(fused.to_vector() == plain.to_vector());        // the product rounded before the sum, as apart
            CHECK(fused_gen.next_u64() == plain_gen.next_u64());  // one draw each
            const Tensor r = testing::random_tensor(shape, 34, -1, 1, false);
            (fused * r).sum().backward();
            (plain * r).sum().backward();
            CHECK(x1.grad().to_vector() == x2.grad().to_vector());
            CHECK(y1.grad().to_vector() == y2.grad().to_vector());
        }
    }
    // evaluation, p = 0, p = 1 and a y broadcast over x: what add and dropout give
    Generator gen(35), same(35);
    const Tensor x = testing::random_tensor({3, 4}, 36), y = testing::random_tensor({3, 4}, 37);
    CHECK(add_dropout(x, y, 0.5f, false, gen).to_vector() == add(x, y).to_vector());
    CHECK(add_dropout(x, y, 0.0f, true, gen).to_vector() == add(x, y).to_vector());
    CHECK(add_dropout(x, y, 1.0f, true, gen).to_vector() == x.to_vector());
    const Tensor row = testing::random_tensor({4}, 38);
    CHECK(add_dropout(x, row, 0.5f, true, gen).to_vector() == add(x, dropout(row, 0.5f, true, same)).to_vector());
    CHECK_THROWS_AS(add_dropout(x, y, 1.5f, true, gen), Error);
}

TEST_CASE("activation_dropout is dropout(relu(x)) and dropout(gelu(x)), gradients too", "[ops][dropout]") {
    for (bool gelu_activation : {false, true}) {
        for (float p : {0.1f, 0.5f}) {
            INFO("gelu " << gelu_activation << " p " << p);
            const Shape shape{11, 203};  // past one stretch of gelu_dropout's buffer (1,024)
            const Tensor x1 = testing::random_tensor(shape, 41, -3, 3), x2 = testing::random_tensor(shape, 41, -3, 3);
            Generator fused_gen(42), plain_gen(42);
            const Tensor fused = activation_dropout(x1, gelu_activation, p, true, fused_gen);
            const Tensor plain = dropout(gelu_activation ? gelu(x2) : relu(x2), p, true, plain_gen);
            CHECK(fused.to_vector() == plain.to_vector());
            CHECK(fused_gen.next_u64() == plain_gen.next_u64());
            const Tensor r = testing::random_tensor(shape, 43, -1, 1, false);
            (fused * r).sum().backward();
            (plain * r).sum().backward();
            CHECK(x1.grad().to_vector() == x2.grad().to_vector());
        }
        Generator gen(44);
        const Tensor x = testing::random_tensor({6}, 45);
        const Tensor activated = gelu_activation ? gelu(x) : relu(x);
        CHECK(activation_dropout(x, gelu_activation, 0.5f, false, gen).to_vector() == activated.to_vector());
        CHECK(activation_dropout(x, gelu_activation, 0.0f, true, gen).to_vector() == activated.to_vector());
        CHECK(activation_dropout(x, gelu_activation, 1.0f, true, gen).to_vector() == std::vector<float>(6, 0.0f));
    }
}

TEST_CASE("relu_dropout's gradient is dropout(relu(x))'s at zeros, infinities and NaNs too", "[ops][dropout]") {
    // Its backward reads the output, not x: the gradient passes where the output is above zero.
    // (Where an element above zero is dropped, the gradient is +0 rather than g times 0.)
    const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> values;
    for (int i = 0; i < 40; ++i)
        for (float v : {0.0f, -0.0f, inf, -inf, nan, 1e-45f, -1e-45f, 2.5f, -2.5f, 1e-38f})
            values.push_back(v * (i % 2 == 0 ? 1.0f : 3.0f));
    const Shape shape{static_cast<int64_t>(values.size())};
    const Tensor x1 = Tensor::from_vector(values, shape, true), x2 = Tensor::from_vector(values, shape, true);
    Generator fused_gen(48), plain_gen(48);
    const Tensor fused = activation_dropout(x1, false, 0.3f, true, fused_gen);
    const Tensor plain = dropout(relu(x2), 0.3f, true, plain_gen);
    const Tensor g = testing::random_tensor(shape, 49, -1, 1, false);
    fused.backward(g);
    plain.backward(g);
    const std::vector<float> a = x1.grad().to_vector(), b = x2.grad().to_vector();
    REQUIRE(a.size() == b.size());
    for (size_t i = 0; i < a.size(); ++i) {
        INFO("element " << i << ", x " << values[i]);
        CHECK(a[i] == b[i]);
    }
}

TEST_CASE("relu_dropout lets its input go after the forward pass", "[ops][dropout]") {
    const Tensor leaf = testing::random_tensor({64, 32}, 50), weight = testing::random_tensor({256, 32}, 52);
    Generator gen(51);
    empty_cache();  // blocks of every size are fresh: the counts below are exact
    const int64_t before = allocator_stats().bytes_in_use;
    Tensor y;
    {
        const Tensor h = linear(leaf, weight, Tensor());  // 64 KB that linear's backward does not hold
        y = activation_dropout(h, false, 0.1f, true, gen);
    }
    // What is left is y (and nothing of h): 64 x 256 floats.
    CHECK(allocator_stats().bytes_in_use - before == 64 * 256 * static_cast<int64_t>(sizeof(float)));
    y.sum().backward();
    CHECK(leaf.grad().defined());
}

TEST_CASE("add_dropout and activation_dropout pass gradcheck", "[ops][dropout][gradcheck]") {
    // A fixed mask: each call draws its key from a generator seeded the same.
    testing::require_gradcheck(
        [](const std::vector<Tensor>& in) {
        Generator gen(51);
        return add_dropout(in[0], in[1], 0.4f, true, gen);
        },
        {testing::random_tensor({4, 9}, 52), testing::random_tensor({4, 9}, 53)});
    for (bool gelu_activation : {false, true}) {
        INFO("gelu " << gelu_activation);
        testing::require_gradcheck(
            [&](const std::vector<Tensor>& in) {
            Generator gen(54);
            return activation_dropout(in[0], gelu_activation, 0.4f, true, gen);
            },
            {away_from_zero({4, 9}, 55)});
    }
}
