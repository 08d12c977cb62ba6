// The fused multi-head attention operation: gradcheck, agreement with the composition of
// primitives it replaces (forward, weights and every gradient, dropout included), masks,
// thread-count independence and errors.
#include "helpers.h"

using namespace seqgrad;
using testing::max_abs_diff;
using testing::random_tensor;
using testing::require_gradcheck;
using testing::ThreadCountScope;

namespace {

// The composition of primitives on split heads that the fused operation replaces.
struct Composed {
    Tensor context, weights;
};

Composed composed_attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads, const IntTensor& mask,
                            float p, bool training, Generator* gen) {
    const int64_t b = q.size(0), tq = q.size(1), tk = k.size(1), d = q.size(2), dh = d / heads;
    auto split = [&](const Tensor& x, int64_t t) { return transpose(reshape(x, {b, t, heads, dh}), 1, 2); };
    Tensor scores = div(matmul(split(q, tq), split(k, tk), false, true), Tensor::scalar(std::sqrt(float(dh))));
    if (mask.numel() > 0) scores = where(mask, scores, kAttentionMaskFill);
    const Tensor weights = softmax(scores, -1);
    const Tensor dropped = p > 0 && training ? dropout(weights, p, training, *gen) : weights;
    const Tensor context = reshape(transpose(matmul(dropped, split(v, tk)), 1, 2), {b, tq, d});
    return {context, weights};
}

// A mask [B, 1, Tq, Tk] that hides the last keys of row 1 and, for row 0, the keys after each
// query (causal); every query keeps at least one key.
IntTensor mixed_mask(int64_t b, int64_t tq, int64_t tk) {
    IntTensor mask = IntTensor::zeros({b, 1, tq, tk});
    for (int64_t r = 0; r < b; ++r)
        for (int64_t i = 0; i < tq; ++i)
            for (int64_t j = 0; j < tk; ++j)
                mask.data()[(r * tq + i) * tk + j] = r % 2 == 0 ? (j <= i ? 1 : 0) : (j < tk - 1 ? 1 : 0);
    return mask;
}

// The fused attention and its composition on the same operands (from `seed`), mask and dropout
// draws: the context, the weights, the generators' draws and every gradient agree. The loss is on
// the context and the weights, or on the context alone (the weights' gradient then never exists:
// the fused backward skips it).
void check_against_composition(int64_t b, int64_t tq, int64_t tk, int64_t d, int64_t heads, const IntTensor& mask,
                               float p, uint64_t seed, bool loss_on_weights = true) {
    auto q1 = random_tensor({b, tq, d}, seed), k1 = random_tensor({b, tk, d}, seed + 1),
         v1 = random_tensor({b, tk, d}, seed + 2);
    auto q2 = random_tensor({b, tq, d}, seed), k2 = random_tensor({b, tk, d}, seed + 1),
         v2 = random_tensor({b, tk, d}, seed + 2);
    const auto r = random_tensor({b, tq, d}, seed + 3, -1, 1, false);
    const auto rw = random_tensor({b, heads, tq, tk}, seed + 4, -1, 1, false);
    Generator gen1(seed + 5), gen2(seed + 5);
    Tensor weights;
    const Tensor fused = attention(q1, k1, v1, heads, mask, p, true, &gen1, &weights);
    const Composed reference = composed_attention(q2, k2, v2, heads, mask, p, true, &gen2);
    CHECK(max_abs_diff(fused, reference.context) < 1e-6f);
    CHECK(max_abs_diff(weights, reference.weights) < 1e-6f);
    CHECK(gen1.next_u64() == gen2.next_u64());  // both drew the same number of times
    // The weights are differentiable too: the loss takes them in, or leaves them unused.
    if (loss_on_weights) {
        ((fused * r).sum() + (weights * rw).sum()).backward();
        ((reference.context * r).sum() + (reference.weights * rw).sum()).backward();
    } else {
        (fused * r).sum().backward();
        (reference.context * r).sum().backward();
    }
    CHECK(max_abs_diff(q1.grad(), q2.grad()) < 1e-5f);
    CHECK(max_abs_diff(k1.grad(), k2.grad()) < 1e-5f);
    CHECK(max_abs_diff(v1.grad(), v2.grad()) < 1e-5f);
}

}  // namespace

TEST_CASE("attention's weights pass gradcheck as an output of their own", "[ops][attention][gradcheck]") {
    auto q = random_tensor({2, 3, 4}, 6, -1, 1);
    auto k = random_tensor({2, 5, 4}, 7, -1, 1);
    auto v = random_tensor({2, 5, 4}, 8, -1, 1);
    const IntTensor mask = IntTensor::from_vector({1, 1, 1, 0, 1, 1, 0, 1, 1, 1}, {2, 1, 1, 5});
    require_gradcheck(
        [&](const std::vector<Tensor>& in) {
        Tensor weights;
        attention(in[0], in[1], in[2], 2, mask, 0.0f, false, nullptr, &weights);
        return weights;
        },
        {q, k, v});
}

TEST_CASE("attention passes gradcheck with and without masks and dropout", "[ops][attention][gradcheck]") {
    const int64_t b = 2, tq = 3, tk = 4, d = 6;
    auto q = random_tensor({b, tq, d}, 1, -1, 1);
    auto k = random_tensor({b, tk, d}, 2, -1, 1);
    auto v = random_tensor({b, tk, d}, 3, -1, 1);
    const std::vector<IntTensor> masks = {IntTensor(), mixed_mask(b, tq, tk),
                                          IntTensor::from_vector({1, 1, 0, 1, 1, 1, 1, 0}, {b, 1, 1, tk})};
    for (int64_t heads : {1, 2, 3}) {
        for (size_t m = 0; m < masks.size(); ++m) {
            for (float p : {0.0f, 0.3f}) {
                INFO("heads " << heads << " mask " << m << " dropout " << p);
                const IntTensor mask = masks[m];
                require_gradcheck(
                    [&](const std::vector<Tensor>& in) {
                    Generator gen(9);  // the same dropout mask at every evaluation
                    return attention(in[0], in[1], in[2], heads, mask, p, true, &gen);
                    },
                    {q, k, v});
            }
        }
    }
}

TEST_CASE("attention equals its composition from primitives, gradients and dropout included", "[ops][attention]") {
    const int64_t b = 3, tq = 5, tk = 7, d = 8;
    for (int64_t heads : {1, 2, 4}) {
        for (float p : {0.0f, 0.25f}) {
            for (bool with_mask : {false, true}) {
                INFO("heads " << heads << " dropout " << p << " mask " << with_mask);
                check_against_composition(b, tq, tk, d, heads, with_mask ? mixed_mask(b, tq, tk) : IntTensor(), p, 11);
            }
        }
    }
}

TEST_CASE("attention with head sizes and key counts off the 8 x 8 tiles equals its composition", "[ops][attention]") {
    // The forward pass lays each pair's keys out transposed, in 8 x 8 tiles where a level has them
    // and one by one for what is left: 37 keys (four tiles and five), head sizes 40, 20 (two tiles
    // and four) and 8.
    for (const int64_t heads : {1, 2, 5}) {
        INFO("heads " << heads);
        check_against_composition(2, 40, 37, 40, heads, mixed_mask(2, 40, 37), 0.0f, 51);
        check_against_composition(2, 9, 37, 40, heads, IntTensor(), 0.0f, 52);
    }
}

TEST_CASE("attention over blocks of queries that skip masked keys equals its composition", "[ops][attention]") {
    // More queries than one block (32), the last block partial; a causal mask (keys past each
    // query never computed), a padding mask (the last keys of some rows), one with a query that
    // attends to nothing inside a block (the block falls back to every key), with dropout.
    const int64_t b = 2, tq = 70, d = 8, heads = 2;
    for (const int64_t tk : {70, 90}) {
        IntTensor causal = IntTensor::zeros({1, 1, tq, tk});
        for (int64_t i = 0; i < tq; ++i)
            for (int64_t j = 0; j < tk; ++j) causal.data()[i * tk + j] = j <= i ? 1 : 0;
        IntTensor padding = IntTensor::zeros({b, 1, 1, tk});
        for (int64_t j = 0; j < tk; ++j) padding.data()[j] = j < tk - 25 ? 1 : 0;
        for (int64_t j = 0; j < tk; ++j) padding.data()[tk + j] = 1;
        IntTensor hole = mixed_mask(b, tq, tk);
        for (int64_t j = 0; j < tk; ++j) hole.data()[40 * tk + j] = 0;  // query 40 of batch row 0
        for (const IntTensor& mask : {causal, padding, hole}) {
            for (float p : {0.0f, 0.2f}) {
                for (bool loss_on_weights : {true, false}) {
                    INFO("keys " << tk << " mask " << mask.shape() << " dropout " << p << " loss on the weights "
                                 << loss_on_weights);
                    check_against_composition(b, tq, tk, d, heads, mask, p, 41, loss_on_weights);
                }
            }
        }
    }
}

TEST_CASE("attention without grad or weights asked for gives the same context", "[ops][attention]") {
    // Then no weights are kept: each block of queries has its scores in a buffer of the thread's.
    // The context must be the one computed beside the kept weights, bit for bit: over blocks of
    // queries (70 rows: three blocks, the last partial), with masks and with dropout drawn alike.
    const int64_t b = 3, tq = 70, tk = 45, d = 16, heads = 4;
    auto q = random_tensor({b, tq, d}, 61, -1, 1, false), k = random_tensor({b, tk, d}, 62, -1, 1, false),
         v = random_tensor({b, tk, d}, 63, -1, 1, false);
    for (const IntTensor& mask : {IntTensor(), mixed_mask(b, tq, tk)}) {
        for (float p : {0.0f, 0.3f}) {
            INFO("mask " << mask.shape() << " dropout " << p);
            Generator gen1(7), gen2(7);
            Tensor weights;
            const Tensor kept = attention(q, k, v, heads, mask, p, p > 0, &gen1, &weights);
            NoGradGuard no_grad;
            const Tensor not_kept = attention(q, k, v, heads, mask, p, p > 0, &gen2);
            CHECK(kept.to_vector() == not_kept.to_vector());
            if (p == 0)
                CHECK(max_abs_diff(not_kept, composed_attention(q, k, v, heads, mask, 0.0f, false, nullptr).context) <
                      1e-6f);
        }
    }
}

TEST_CASE("attention broadcasts per-head and per-query masks", "[ops][attention]") {
    const int64_t b = 2, tq = 3, tk = 4, d = 4, heads = 2;
    auto q = random_tensor({b, tq, d}, 21), k = random_tensor({b, tk, d}, 22), v = random_tensor({b, tk, d}, 23);
    IntTensor per_head = IntTensor::full({b, heads, tq, tk}, 1);
    for (int64_t i = 0; i < per_head.numel(); i += 3) per_head.data()[i] = 0;
    for (const IntTensor& mask : {per_head, IntTensor::from_vector({1, 0, 1, 1}, {tk}), mixed_mask(1, tq, tk)}) {
        INFO("mask " << mask.shape());
        Tensor weights;
        const Tensor fused = attention(q, k, v, heads, mask, 0.0f, false, nullptr, &weights);
        const Composed reference = composed_attention(q, k, v, heads, mask, 0.0f, false, nullptr);
        CHECK(max_abs_diff(fused, reference.context) < 1e-6f);
        CHECK(max_abs_diff(weights, reference.weights) < 1e-6f);
    }
}

TEST_CASE("attention gives a query whose keys are all masked uniform weights", "[ops][attention]") {
    auto q = random_tensor({1, 2, 4}, 31), k = random_tensor({1, 3, 4}, 32), v = random_tensor({1, 3, 4}, 33);
    const IntTensor mask = IntTensor::from_vector({0, 0, 0, 1, 1, 0}, {1, 1, 2, 3});
    Tensor weights;
    attention(q, k, v, 2, mask, 0.0f, false, nullptr, &weights);
    for (int64_t h = 0; h < 2; ++h)
        for (int64_t j = 0; j < 3; ++j) CHECK(weights.data()[h * 6 + j] == Approx(1.0f / 3));
}

TEST_CASE("attention's dropout at p = 1 zeroes the context but not the weights", "[ops][attention]") {
    auto q = random_tensor({2, 3, 4}, 41), k = random_tensor({2, 3, 4}, 42), v = random_tensor({2, 3, 4}, 43);
    Generator gen(1);
    Tensor weights;
    const Tensor context = attention(q, k, v, 2, IntTensor(), 1.0f, true, &gen, &weights);
    for (float c : context.to_vector()) CHECK(c == 0.0f);
    CHECK(max_abs_diff(weights, composed_attention(q, k, v, 2, IntTensor(), 0, false, nullptr).weights) < 1e-6f);
    context.sum().backward();
    for (float g : q.grad().to_vector()) CHECK(g == 0.0f);
}

TEST_CASE("attention's results do not depend on the number of threads", "[ops][attention][threads]") {
    auto run = [](int threads) {
        set_num_threads(threads);
        auto q = random_tensor({64, 6, 32}, 51), k = random_tensor({64, 9, 32}, 52), v = random_tensor({64, 9, 32}, 53);
        Generator gen(3);
        const Tensor out = attention(q, k, v, 4, mixed_mask(64, 6, 9), 0.2f, true, &gen);
        (out * out).sum().backward();
        std::vector<float> all = out.to_vector();
        for (const Tensor* t : {&q, &k, &v}) {
            const auto g = t->grad().to_vector();
            all.insert(all.end(), g.begin(), g.end());
        }
        return all;
    };
    std::vector<float> one, two;
    {
        const ThreadCountScope restore;
        one = run(1);
        two = run(2);
    }
    CHECK(one == two);
}

TEST_CASE("attention rejects operands and masks that do not fit", "[ops][attention][errors]") {
    auto q = Tensor::zeros({2, 3, 4}), k = Tensor::zeros({2, 5, 4});
    CHECK_THROWS_WITH(attention(q, k, k, 3, IntTensor()), Catch::Contains("multiple of 3 heads"));
    CHECK_THROWS_WITH(attention(q, k, Tensor::zeros({2, 4, 4}), 2, IntTensor()), Catch::Contains("do not fit"));
    CHECK_THROWS_WITH(attention(q, Tensor::zeros({3, 5, 4}), Tensor::zeros({3, 5, 4}), 2, IntTensor()),
                      Catch::Contains("do not fit"));
    CHECK_THROWS_WITH(attention(q, k, k, 2, IntTensor::full({2, 1, 3, 4}, 1)), Catch::Contains("broadcast"));
    CHECK_THROWS_WITH(attention(Tensor::zeros({2, 3}), k, k, 2, IntTensor()), Catch::Contains("attention"));
    Generator gen(1);
    CHECK_THROWS_WITH(attention(q, k, k, 2, IntTensor(), 0.5f, true, nullptr), Catch::Contains("generator"));
    CHECK_THROWS_AS(attention(q, k, k, 2, IntTensor(), 1.5f, true, &gen), Error);
}

// ---- gathered_attention (incremental decoding) ----

namespace {

// Row i's keys, position j taken from row rows[i, j] of a cache [M, C, D]: [N, length, D].
Tensor gather_positions(const Tensor& cache, const IntTensor& rows, int64_t length) {
    const int64_t n = rows.size(0), capacity = cache.size(1), d = cache.size(2);
    Tensor out = Tensor::empty({n, length, d});
    for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < length; ++j)
            std::copy_n(cache.data() + (rows.data()[i * rows.size(1) + j] * capacity + j) * d, d,
                        out.data() + (i * length + j) * d);
    return out;
}

}  // namespace

TEST_CASE("gathered attention equals attention over the keys its table of rows picks", "[ops][attention]") {
    NoGradGuard no_grad;
    // Heads 4 wide (the plain loops), 8 wide (the avx2 level's vectors; plain at avx512), and 16
    // and 64 wide in groups of 8 heads and fewer (the vector paths of both levels: 10 heads are a
    // group of 8 and one of 2).
    const std::vector<std::pair<int64_t, int64_t>> widths_and_heads = {{12, 3}, {24, 3}, {128, 2}, {160, 10}, {512, 8}};
    for (const auto& [d, heads] : widths_and_heads) {
        INFO("width " << d << ", " << heads << " heads");
        const int64_t n = 5, m = 3, capacity = 7, length = 6;
        const Tensor q = random_tensor({n, 1, d}, 1, -1, 1, false);
        const Tensor k = random_tensor({m, capacity, d}, 2, -1, 1, false);
        const Tensor v = random_tensor({m, capacity, d}, 3, -1, 1, false);
        // Rows 8 wide (wider than length: the rest unread), every row mixing histories.
        IntTensor rows = IntTensor::zeros({n, 8});
        for (int64_t i = 0; i < n; ++i)
            for (int64_t j = 0; j < 8; ++j) rows.data()[i * 8 + j] = (i * 7 + j * 3) % m;
        IntTensor mask = IntTensor::full({n, 1, 1, length}, 1);
        mask.data()[1 * length + 2] = 0;  // row 1 does not see position 2
        mask.data()[3 * length + 5] = 0;
        for (const bool masked : {false, true}) {
            INFO("masked " << masked);
            const IntTensor used = masked ? mask : IntTensor();
            Tensor weights, expected_weights;
            const Tensor context = gathered_attention(q, k, v, rows, length, heads, used, &weights);
            const Tensor expected = attention(q, gather_positions(k, rows, length), gather_positions(v, rows, length),
                                              heads, used, 0.0f, false, nullptr, &expected_weights);
            REQUIRE(context.shape() == Shape{n, 1, d});
            REQUIRE(weights.shape() == Shape{n, heads, 1, length});
            CHECK(max_abs_diff(context, expected) < 1e-6f);
            CHECK(max_abs_diff(weights, expected_weights) < 1e-6f);
            if (masked) {
                for (int64_t h = 0; h < heads; ++h) CHECK(weights.data()[(1 * heads + h) * length + 2] == 0.0f);
            }
        }
        // A source's keys shared by its rows, as the Transformer's cross-attention reads them.
        const IntTensor shared = IntTensor::from_vector({0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1,  //
                                                         1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0},
                                                        {n, length});
        const Tensor context = gathered_attention(q, k, v, shared, length, heads);
        const Tensor expected =
            attention(q, gather_positions(k, shared, length), gather_positions(v, shared, length), heads, IntTensor());
        CHECK(max_abs_diff(context, expected) < 1e-6f);
    }
}

TEST_CASE("gathered attention at one row splits its heads among threads, with the same results",
          "[ops][attention][threads]") {
    NoGradGuard no_grad;
    // Long enough caches that one row's heads are shared out; heads 64, 32 and 12 wide (vector
    // paths and plain loops), masks the same for every head and one for each head. Then caches
    // too short to share out, with heads 128 and 32 wide, at lengths that leave the last eight
    // positions short.
    const std::vector<std::tuple<int64_t, int64_t, int64_t>> shapes = {{512, 8, 64}, {384, 6, 60}, {96, 3, 200},
                                                                       {60, 5, 300}, {256, 2, 45}, {64, 2, 77}};
    for (const auto& [d, heads, length] : shapes) {
        INFO("width " << d << ", " << heads << " heads, " << length << " positions");
        const int64_t capacity = length + 3;
        const Tensor q = random_tensor({1, 1, d}, 4, -1, 1, false);
        const Tensor k = random_tensor({2, capacity, d}, 5, -1, 1, false);
        const Tensor v = random_tensor({2, capacity, d}, 6, -1, 1, false);
        IntTensor rows = IntTensor::zeros({1, capacity});
        for (int64_t j = 0; j < capacity; ++j) rows.data()[j] = (j / 7) % 2;
        IntTensor per_head = IntTensor::full({1, heads, 1, length}, 1);
        for (int64_t h = 0; h < heads; ++h)
            for (int64_t j = h; j < length; j += heads + 1) per_head.data()[h * length + j] = 0;
        IntTensor shared = IntTensor::full({1, 1, 1, length}, 1);
        shared.data()[length / 2] = 0;
        for (const IntTensor& mask : {IntTensor(), shared, per_head}) {
            INFO("mask " << mask.shape());
            std::vector<float> by_thread_count[2];
            for (const int threads : {1, 2}) {
                const ThreadCountScope restore;
                set_num_threads(threads);
                Tensor weights, expected_weights;
                const Tensor context = gathered_attention(q, k, v, rows, length, heads, mask, &weights);
                const Tensor expected = attention(q, gather_positions(k, rows, length),
                                                  gather_positions(v, rows, length), heads, mask, 0.0f, false, nullptr,
                                                  &expected_weights);
                CHECK(max_abs_diff(context, expected) < 1e-5f);
                CHECK(max_abs_diff(weights, expected_weights) < 1e-6f);
                by_thread_count[threads - 1] = context.to_vector();
                const std::vector<float> w = weights.to_vector();
                by_thread_count[threads - 1].insert(by_thread_count[threads - 1].end(), w.begin(), w.end());
            }
            CHECK(by_thread_count[0] == by_thread_count[1]);
        }
    }
}

TEST_CASE("gathered attention rejects gradients, rows and lengths that do not fit", "[ops][attention][errors]") {
    const Tensor q = random_tensor({2, 1, 4}, 1, -1, 1, false);
    const Tensor k = random_tensor({2, 3, 4}, 2, -1, 1, false);
    const IntTensor rows = IntTensor::zeros({2, 3});
    CHECK_THROWS_WITH(gathered_attention(random_tensor({2, 1, 4}, 1), k, k, rows, 2, 2),
                      Catch::Contains("no backward"));
    NoGradGuard no_grad;
    CHECK_THROWS_WITH(gathered_attention(q, k, k, rows, 4, 2), Catch::Contains("length at most 3"));
    CHECK_THROWS_WITH(gathered_attention(q, k, k, IntTensor::full({2, 3}, 2), 2, 2),
                      Catch::Contains("rows[0, 0] = 2 is outside [0, 2)"));
    CHECK_THROWS_WITH(gathered_attention(random_tensor({2, 2, 4}, 1, -1, 1, false), k, k, rows, 2, 2),
                      Catch::Contains("one query position per row"));
    CHECK_THROWS_WITH(gathered_attention(q, k, k, rows, 2, 3), Catch::Contains("multiple of 3 heads"));
    CHECK_THROWS_WITH(gathered_attention(q, k, k, rows, 2, 2, IntTensor::full({3, 1, 1, 2}, 1)),
                      Catch::Contains("do not broadcast"));
}
