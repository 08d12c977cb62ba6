// Shape operations: reshape, transpose, permute, slice, concat, stack, split and chunk.
#include "helpers.h"

using namespace seqgrad;
using testing::random_tensor;
using testing::require_gradcheck;

TEST_CASE("transpose and permute move axes", "[ops][shape]") {
    auto x = Tensor::from_vector({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {2, 3, 2});
    auto p = x.permute({2, 0, 1});
    CHECK(p.shape() == Shape{2, 2, 3});
    CHECK(p.to_vector() == std::vector<float>{0, 2, 4, 6, 8, 10, 1, 3, 5, 7, 9, 11});
    CHECK(x.transpose(0, -1).shape() == Shape{2, 3, 2});
    CHECK(x.transpose(0, 1).to_vector() == std::vector<float>{0, 1, 6, 7, 2, 3, 8, 9, 4, 5, 10, 11});
}

TEST_CASE("shape operations pass gradcheck", "[ops][shape][gradcheck]") {
    auto x = random_tensor({2, 3, 4}, 1);
    require_gradcheck([](const std::vector<Tensor>& in) { return reshape(in[0], {4, -1}); }, {x});
    require_gradcheck([](const std::vector<Tensor>& in) { return reshape(in[0], {24}) * 2.0f; }, {x});
    require_gradcheck([](const std::vector<Tensor>& in) { return transpose(in[0], 0, 2); }, {x});
    require_gradcheck([](const std::vector<Tensor>& in) { return transpose(in[0], 1, 2); }, {x});
    require_gradcheck([](const std::vector<Tensor>& in) { return permute(in[0], {1, 2, 0}); }, {x});
    require_gradcheck([](const std::vector<Tensor>& in) { return slice(in[0], 1, 1, 3); }, {x});
    require_gradcheck([](const std::vector<Tensor>& in) { return slice(in[0], -1, -3, 4); }, {x});
    require_gradcheck([](const std::vector<Tensor>& in) { return slice(in[0], 0, 1, 2); }, {x});
    auto y = random_tensor({2, 1, 4}, 2);
    auto z = random_tensor({2, 2, 4}, 3);
    require_gradcheck([](const std::vector<Tensor>& in) { return concat({in[0], in[1], in[2]}, 1); }, {x, y, z});
    require_gradcheck([](const std::vector<Tensor>& in) { return concat({in[0], in[0]}, -1); }, {x});
    auto w = random_tensor({2, 3, 4}, 4);
    for (int64_t axis : {0, 1, 3, -1})
        require_gradcheck([axis](const std::vector<Tensor>& in) { return stack({in[0], in[1]}, axis); }, {x, w});
    require_gradcheck(
        [](const std::vector<Tensor>& in) {
        auto parts = split(in[0], {1, 3}, 2);
        return parts[0] * 2.0f + sum(parts[1], {2}, true);
        },
        {x});
    require_gradcheck(
        [](const std::vector<Tensor>& in) {
        auto parts = chunk(in[0], 3, 1);
        return parts[0] * parts[2] - parts[1];
        },
        {x});
}

TEST_CASE("slice, concat, stack and split move the right elements", "[ops][shape]") {
    auto x = Tensor::from_vector({0, 1, 2, 3, 4, 5}, {2, 3});
    CHECK(slice(x, 1, 1, 3).to_vector() == std::vector<float>{1, 2, 4, 5});
    CHECK(slice(x, 0, -1, 2).to_vector() == std::vector<float>{3, 4, 5});
    CHECK(concat({x, x}, 0).shape() == Shape{4, 3});
    CHECK(concat({x, slice(x, 1, 0, 1)}, 1).to_vector() == std::vector<float>{0, 1, 2, 0, 3, 4, 5, 3});
    CHECK(stack({x, x}, 1).shape() == Shape{2, 2, 3});
    auto parts = split(x, {2, 1}, 1);
    CHECK(parts[0].to_vector() == std::vector<float>{0, 1, 3, 4});
    CHECK(parts[1].to_vector() == std::vector<float>{2, 5});
}

TEST_CASE("shape operations reject arguments that do not fit", "[ops][shape][errors]") {
    auto x = Tensor::zeros({2, 3});
    CHECK_THROWS_WITH(reshape(x, {4, 2}), Catch::Contains("reshape") && Catch::Contains("[2, 3]"));
    CHECK_THROWS_AS(reshape(x, {-1, -1}), Error);
    CHECK_THROWS_AS(permute(x, {0, 0}), Error);
    CHECK_THROWS_AS(permute(x, {0}), Error);
    CHECK_THROWS_AS(transpose(x, 0, 2), Error);
    CHECK_THROWS_WITH(slice(x, 1, 2, 5), Catch::Contains("slice") && Catch::Contains("[2, 3]"));
    CHECK_THROWS_AS(slice(x, 0, 2, 1), Error);
    CHECK_THROWS_WITH(concat({x, Tensor::zeros({3, 3})}, 1), Catch::Contains("concat"));
    CHECK_THROWS_AS(concat({}, 0), Error);
    CHECK_THROWS_AS(stack({x, Tensor::zeros({3, 2})}, 0), Error);
    CHECK_THROWS_WITH(split(x, {1, 1}, 1), Catch::Contains("split"));
    CHECK_THROWS_AS(chunk(x, 2, 1), Error);
}

TEST_CASE("empty slices and pieces are allowed and carry no data", "[ops][shape]") {
    auto x = testing::random_tensor({2, 3}, 9);
    auto empty = slice(x, 1, 3, 3);
    CHECK(empty.shape() == Shape{2, 0});
    auto parts = split(x, {0, 3}, 1);
    CHECK(parts[0].numel() == 0);
    CHECK(concat({parts[0], parts[1]}, 1).to_vector() == x.to_vector());
    (concat({empty, x}, 1) * 2.0f).sum().backward();
    CHECK(x.grad().to_vector() == std::vector<float>(6, 2.0f));
}
