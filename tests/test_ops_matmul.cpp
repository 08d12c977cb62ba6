// Matrix products: 2-D and batched, transposition flags, broadcast batch axes, linear.
#include "helpers.h"

using namespace seqgrad;
using testing::random_tensor;
using testing::require_gradcheck;

namespace {

// A plain triple loop for one [m, k] x [k, n] product.
std::vector<float> naive_matmul(const std::vector<float>& a, const std::vector<float>& b, int64_t m, int64_t k,
                                int64_t n) {
    std::vector<float> c(static_cast<size_t>(m * n), 0.0f);
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j)
            for (int64_t p = 0; p < k; ++p)
                c[static_cast<size_t>(i * n + j)] +=
                    a[static_cast<size_t>(i * k + p)] * b[static_cast<size_t>(p * n + j)];
    return c;
}

}  // namespace

TEST_CASE("matmul multiplies matrices and honours the transposition flags", "[ops][matmul]") {
    auto a = random_tensor({3, 4}, 1, -1, 1, false);
    auto b = random_tensor({4, 5}, 2, -1, 1, false);
    const auto expected = naive_matmul(a.to_vector(), b.to_vector(), 3, 4, 5);
    auto c = matmul(a, b);
    CHECK(c.shape() == Shape{3, 5});
    for (size_t i = 0; i < expected.size(); ++i) CHECK(c.to_vector()[i] == Approx(expected[i]).margin(1e-5));
    CHECK(testing::max_abs_diff(matmul(a.transpose(0, 1), b, true, false), c) < 1e-5f);
    CHECK(testing::max_abs_diff(matmul(a, b.transpose(0, 1), false, true), c) < 1e-5f);
    CHECK(testing::max_abs_diff(matmul(a.transpose(0, 1), b.transpose(0, 1), true, true), c) < 1e-5f);
}

TEST_CASE("matmul passes gradcheck for every transposition", "[ops][matmul][gradcheck]") {
    for (bool ta : {false, true})
        for (bool tb : {false, true}) {
            INFO("ta " << ta << " tb " << tb);
            auto a = random_tensor(ta ? Shape{4, 3} : Shape{3, 4}, 1);
            auto b = random_tensor(tb ? Shape{2, 4} : Shape{4, 2}, 2);
            require_gradcheck([&](const std::vector<Tensor>& in) { return matmul(in[0], in[1], ta, tb); }, {a, b});
        }
}

TEST_CASE("batched matmul broadcasts batch axes", "[ops][matmul][gradcheck]") {
    const std::vector<std::pair<Shape, Shape>> cases = {
        {{2, 3, 4}, {2, 4, 5}},       {{2, 3, 4}, {4, 5}},    {{3, 4}, {2, 4, 5}},
        {{2, 1, 3, 4}, {1, 3, 4, 2}}, {{1, 3, 4}, {2, 4, 1}}, {{2, 2, 1, 4}, {4, 3}},
    };
    for (const auto& [sa, sb] : cases) {
        INFO("shapes " << sa << " and " << sb);
        auto a = random_tensor(sa, 3);
        auto b = random_tensor(sb, 4);
        auto c = matmul(a, b);
        // Each batch element equals the 2-D product of its operands.
        const Shape batch(c.shape().begin(), c.shape().end() - 2);
        CHECK(c.shape()[c.shape().size() - 2] == sa[sa.size() - 2]);
        require_gradcheck([](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); }, {a, b});
        for (bool tb : {true}) {
            Shape sbt = sb;
            std::swap(sbt[sbt.size() - 1], sbt[sbt.size() - 2]);
            auto bt = random_tensor(sbt, 5);
            require_gradcheck([tb](const std::vector<Tensor>& in) { return matmul(in[0], in[1], false, tb); }, {a, bt});
        }
    }
    auto a = random_tensor({2, 3, 4}, 6, -1, 1, false);
    auto b = random_tensor({2, 4, 5}, 7, -1, 1, false);
    auto c = matmul(a, b);
    for (int64_t i = 0; i < 2; ++i) {
        auto ci = matmul(slice(a, 0, i, i + 1).reshape({3, 4}), slice(b, 0, i, i + 1).reshape({4, 5}));
        CHECK(testing::max_abs_diff(slice(c, 0, i, i + 1).reshape({3, 5}), ci) < 1e-6f);
    }
}

TEST_CASE("batched matmul agrees with a double-precision product on both sides of the tiny size", "[ops][matmul]") {
    // Below 2^14 multiply-adds a product is computed in matmul's own loops, above it by sgemm; an
    // attention decoder's scores and context (1 x 12 x 256, per batch row) and their gradients'
    // products take every combination of the transposition flags.
    struct Case {
        int64_t m, n, k;
    };
    const std::vector<Case> cases = {{1, 12, 256}, {12, 256, 1}, {1, 256, 12}, {5, 7, 9}, {16, 32, 40}, {24, 24, 24}};
    for (const Case& c : cases)
        for (bool ta : {false, true})
            for (bool tb : {false, true}) {
                INFO("m " << c.m << " n " << c.n << " k " << c.k << " ta " << ta << " tb " << tb);
                const int64_t batch = 3;
                const Tensor a = random_tensor(ta ? Shape{batch, c.k, c.m} : Shape{batch, c.m, c.k}, 71, -1, 1, false);
                const Tensor b = random_tensor(tb ? Shape{batch, c.n, c.k} : Shape{batch, c.k, c.n}, 72, -1, 1, false);
                const Tensor out = matmul(a, b, ta, tb);
                REQUIRE(out.shape() == Shape{batch, c.m, c.n});
                double worst = 0;
                for (int64_t s = 0; s < batch; ++s)
                    for (int64_t i = 0; i < c.m; ++i)
                        for (int64_t j = 0; j < c.n; ++j) {
                            double sum = 0;
                            for (int64_t p = 0; p < c.k; ++p) {
                                const float x = a.data()[s * c.m * c.k + (ta ? p * c.m + i : i * c.k + p)];
                                const float y = b.data()[s * c.k * c.n + (tb ? j * c.k + p : p * c.n + j)];
                                sum += static_cast<double>(x) * y;
                            }
                            const double got = out.data()[(s * c.m + i) * c.n + j];
                            worst = std::max(worst, std::abs(got - sum));
                        }
                CHECK(worst < 5e-5);
            }
}

TEST_CASE("linear equals x W^T + b and passes gradcheck", "[ops][matmul][gradcheck]") {
    auto x = random_tensor({2, 3, 4}, 1);
    auto w = random_tensor({5, 4}, 2);
    auto b = random_tensor({5}, 3);
    auto fused = linear(x, w, b);
    auto composed = matmul(x, w, false, true) + b;
    CHECK(testing::max_abs_diff(fused, composed) < 1e-6f);
    require_gradcheck([](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2]); }, {x, w, b});
    require_gradcheck([](const std::vector<Tensor>& in) { return linear(in[0], in[1], Tensor()); }, {x, w});
    require_gradcheck([](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2]); },
                      {random_tensor({4}, 4), w, b});
}

TEST_CASE("matmul and linear reject shapes that do not fit", "[ops][matmul][errors]") {
    CHECK_THROWS_WITH(matmul(Tensor::zeros({2, 3}), Tensor::zeros({4, 5})),
                      Catch::Contains("matmul") && Catch::Contains("[2, 3]") && Catch::Contains("[4, 5]"));
    CHECK_THROWS_AS(matmul(Tensor::zeros({3}), Tensor::zeros({3, 2})), Error);
    CHECK_THROWS_AS(matmul(Tensor::zeros({2, 2, 3}), Tensor::zeros({3, 3, 2})), Error);
    CHECK_THROWS_WITH(linear(Tensor::zeros({2, 3}), Tensor::zeros({5, 4}), Tensor()), Catch::Contains("linear"));
    CHECK_THROWS_AS(linear(Tensor::zeros({2, 4}), Tensor::zeros({5, 4}), Tensor::zeros({4})), Error);
}

TEST_CASE("matmul with an empty inner axis gives zeros", "[ops][matmul]") {
    CHECK(matmul(Tensor::zeros({2, 0}), Tensor::zeros({0, 3})).to_vector() == std::vector<float>(6, 0.0f));
}
