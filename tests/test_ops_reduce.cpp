// Reductions: sum, mean, max and argmax over axes.
#include "helpers.h"

using namespace seqgrad;
using testing::random_tensor;
using testing::require_gradcheck;

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
