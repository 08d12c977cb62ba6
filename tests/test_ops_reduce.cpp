// Reductions: sum, mean, max and argmax over axes.
#include <cmath>

#include "helpers.h"

using namespace seqgrad;
using testing::random_tensor;
using testing::require_gradcheck;
using testing::ThreadCountScope;

TEST_CASE("sum and mean reduce the given axes", "[ops][reduce]") {
    auto x = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
    CHECK(x.sum().item() == 21);
    CHECK(x.sum({0}).to_vector() == std::vector<float>{5, 7, 9});
    CHECK(x.sum({1}).to_vector() == std::vector<float>{6, 15});
    CHECK(x.sum({-1}, true).shape() == Shape{2, 1});
    CHECK(x.sum({0, 1}).shape() == Shape{});
    CHECK(x.mean({1}).to_vector() == std::vector<float>{2, 5});
    CHECK(x.mean().item() == 3.5f);
    auto y = random_tensor({2, 3, 4, 5}, 3, -1, 1, false);
    auto by_parts = y.sum({1}, true).sum({3}, true);
    auto at_once = y.sum({1, 3}, true);
    CHECK(testing::max_abs_diff(by_parts, at_once) < 1e-6f);
}

TEST_CASE("over no elements, sum is 0 and mean is NaN, as in PyTorch", "[ops][reduce]") {
    auto empty = Tensor::zeros({2, 0});
    CHECK(empty.sum().item() == 0);
    CHECK(std::isnan(empty.mean().item()));
    const std::vector<float> per_row = empty.mean({1}).to_vector();
    REQUIRE(per_row.size() == 2);
    CHECK((std::isnan(per_row[0]) && std::isnan(per_row[1])));
    CHECK(empty.mean({0}).shape() == Shape{0});  // nothing to average, and nothing to return
}

TEST_CASE("sum keeps float32 accuracy over a long axis", "[ops][reduce]") {
    auto x = Tensor::full({1 << 20}, 0.1f);
    CHECK(x.sum().item() == Approx(0.1 * (1 << 20)).epsilon(1e-6));
}

TEST_CASE("sums over a middle axis: each column in double, the same bits on any number of threads",
          "[ops][reduce][threads]") {
    // [outer, reduced, inner] with reduced past a stretch of 64 rows (and exactly one stretch, and
    // short), inner past a block of 1,024 columns, and a bias gradient's [rows, d]. Each column
    // against its sum in double over the rows in order: up to 64 rows the same float, beyond within
    // a float's rounding of it; and the same bits on 1, 2 and 3 threads.
    const std::vector<Shape> shapes{{3, 200, 1100}, {2, 64, 70}, {1, 5, 3000}, {1, 3072, 256}, {4, 129, 1}};
    for (const Shape& shape : shapes) {
        INFO("shape " << shape);
        const Tensor x = random_tensor(shape, 7, -2, 2, false);
        const int64_t outer = shape[0], reduced = shape[1], inner = shape[2];
        std::vector<std::vector<float>> by_threads;
        {
            const ThreadCountScope restore;
            for (int threads : {1, 2, 3}) {
                set_num_threads(threads);
                by_threads.push_back(x.sum({1}).to_vector());
            }
        }
        CHECK(by_threads[0] == by_threads[1]);
        CHECK(by_threads[0] == by_threads[2]);
        const std::vector<float> values = x.to_vector();
        double worst = 0;
        for (int64_t o = 0; o < outer; ++o)
            for (int64_t i = 0; i < inner; ++i) {
                double total = 0, scale = 0;
                for (int64_t r = 0; r < reduced; ++r) {
                    total += values[static_cast<size_t>((o * reduced + r) * inner + i)];
                    scale += std::abs(values[static_cast<size_t>((o * reduced + r) * inner + i)]);
                }
                const float got = by_threads[0][static_cast<size_t>(o * inner + i)];
                if (reduced <= 64) REQUIRE(got == static_cast<float>(total));
                worst = std::max(worst, std::abs(got - total) / std::max(scale, 1e-30));
            }
        CHECK(worst < 1e-7);
    }
}

TEST_CASE("sum and mean pass gradcheck over any set of axes", "[ops][reduce][gradcheck]") {
    auto x = random_tensor({2, 3, 4}, 1);
    for (const std::vector<int64_t>& axes :
         std::vector<std::vector<int64_t>>{{}, {0}, {1}, {2}, {0, 2}, {-1, 0}, {0, 1, 2}}) {
        for (bool keepdim : {false, true}) {
            require_gradcheck([&](const std::vector<Tensor>& in) { return sum(in[0], axes, keepdim); }, {x});
            require_gradcheck([&](const std::vector<Tensor>& in) { return mean(in[0], axes, keepdim); }, {x});
        }
    }
    require_gradcheck([](const std::vector<Tensor>& in) { return sum(in[0]); }, {random_tensor({1, 5, 1}, 2)});
    require_gradcheck([](const std::vector<Tensor>& in) { return mean(in[0]); }, {random_tensor({}, 3)});
}

TEST_CASE("max takes the largest value and sends its gradient there", "[ops][reduce]") {
    auto x = Tensor::from_vector({1, 7, 3, 9, 2, 9}, {2, 3}, true);
    auto m = x.max(1);
    CHECK(m.to_vector() == std::vector<float>{7, 9});
    m.sum().backward();
    CHECK(x.grad().to_vector() == std::vector<float>{0, 1, 0, 1, 0, 0});  // the first of tied maxima
    CHECK(x.max(0, true).shape() == Shape{1, 3});
    CHECK(argmax(x, 1).to_vector() == std::vector<int64_t>{1, 0});
    CHECK(argmax(x, 0).to_vector() == std::vector<int64_t>{1, 0, 1});
}

TEST_CASE("max passes gradcheck along each axis", "[ops][reduce][gradcheck]") {
    // Distinct values 0.1 apart, so no finite-difference step crosses a tie.
    std::vector<float> values(24);
    for (size_t i = 0; i < values.size(); ++i) values[i] = 0.1f * static_cast<float>((i * 7) % 24);
    auto x = Tensor::from_vector(values, {2, 3, 4}, true);
    for (int64_t axis : {0, 1, 2, -1})
        for (bool keepdim : {false, true})
            require_gradcheck([&](const std::vector<Tensor>& in) { return max(in[0], axis, keepdim); }, {x},
                              {.step = 1e-3});
}

TEST_CASE("reductions reject bad axes", "[ops][reduce][errors]") {
    auto x = Tensor::zeros({2, 3});
    CHECK_THROWS_WITH(x.sum({2}), Catch::Contains("sum") && Catch::Contains("axis 2"));
    CHECK_THROWS_WITH(x.sum({1, -1}), Catch::Contains("repeated"));
    CHECK_THROWS_AS(x.max(-3), Error);
    CHECK_THROWS_AS(Tensor::zeros({2, 0}).max(1), Error);
}
