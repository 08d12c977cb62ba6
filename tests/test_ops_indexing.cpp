// Embedding lookup, index_select and where.
#include "helpers.h"

using namespace seqgrad;
using testing::random_tensor;
using testing::require_gradcheck;

TEST_CASE("embedding gathers rows and scatter-adds their gradients", "[ops][indexing]") {
    auto w = Tensor::from_vector({0, 1, 10, 11, 20, 21}, {3, 2}, true);
    auto ids = IntTensor::from_vector({2, 0, 2, 1}, {2, 2});
    auto out = embedding(w, ids);
    CHECK(out.shape() == Shape{2, 2, 2});
    CHECK(out.to_vector() == std::vector<float>{20, 21, 0, 1, 20, 21, 10, 11});
    out.sum().backward();
    CHECK(w.grad().to_vector() == std::vector<float>{1, 1, 1, 1, 2, 2});  // id 2 appears twice
}

TEST_CASE("embedding passes gradcheck with repeated ids", "[ops][indexing][gradcheck]") {
    auto w = random_tensor({5, 3}, 1);
    auto ids = IntTensor::from_vector({4, 1, 1, 0, 4, 4}, {3, 2});
    require_gradcheck([&](const std::vector<Tensor>& in) { return embedding(in[0], ids); }, {w});
    require_gradcheck([&](const std::vector<Tensor>& in) { return embedding(in[0], IntTensor::from_vector({3}, {})); },
                      {w});
}

TEST_CASE("an id outside the vocabulary is an error, not a read out of bounds", "[ops][indexing][errors]") {
    auto w = Tensor::zeros({5, 3});
    CHECK_THROWS_WITH(embedding(w, IntTensor::from_vector({1, 5}, {2})),
                      Catch::Contains("embedding") && Catch::Contains("id 5") && Catch::Contains("[5, 3]"));
    CHECK_THROWS_AS(embedding(w, IntTensor::from_vector({-1}, {1})), Error);
    CHECK_THROWS_AS(embedding(Tensor::zeros({5}), IntTensor::from_vector({1}, {1})), Error);
}

TEST_CASE("embeddings_sum adds lookups as add(add(...)) does, ids broadcast over leading axes", "[ops][indexing]") {
    const Tensor tokens = random_tensor({11, 19}, 3), positions = random_tensor({5, 19}, 4),
                 segments = random_tensor({2, 19}, 5);
    const IntTensor ids = IntTensor::from_vector({3, 10, 10, 0, 7, 1, 2, 9, 4, 10, 5, 6, 8, 0, 3}, {3, 5});
    const IntTensor at = IntTensor::from_vector({0, 1, 2, 3, 4}, {5});
    const IntTensor kinds = IntTensor::from_vector({0, 0, 1, 1, 1, 1, 0, 1, 0, 0, 1, 1, 1, 0, 0}, {3, 5});
    const Tensor fused = embeddings_sum({tokens, positions, segments}, {ids, at, kinds});
    const Tensor composed = add(add(embedding(tokens, ids), embedding(positions, at)), embedding(segments, kinds));
    CHECK(fused.shape() == Shape{3, 5, 19});
    CHECK(fused.to_vector() == composed.to_vector());  // the same sums, in the same order
    const Tensor weights = random_tensor(fused.shape(), 6, -1, 1, false);
    (fused * weights).sum().backward();
    const std::vector<Tensor> fused_grads{tokens.grad(), positions.grad(), segments.grad()};
    for (Tensor t : {tokens, positions, segments}) t.zero_grad();
    (composed * weights).sum().backward();
    const std::vector<Tensor> composed_grads{tokens.grad(), positions.grad(), segments.grad()};
    for (size_t k = 0; k < 3; ++k) CHECK(testing::max_abs_diff(fused_grads[k], composed_grads[k]) < 1e-5f);
    CHECK(embeddings_sum({tokens}, {ids}).to_vector() == embedding(tokens, ids).to_vector());
}

TEST_CASE("embeddings_sum passes gradcheck for every table, with repeated and broadcast ids",
          "[ops][indexing][gradcheck]") {
    const IntTensor ids = IntTensor::from_vector({4, 1, 1, 0, 4, 4}, {2, 3});
    const IntTensor at = IntTensor::from_vector({2, 0, 1}, {3});
    require_gradcheck(
        [&](const std::vector<Tensor>& in) {
        return embeddings_sum({in[0], in[1], in[2]}, {ids, at, ids});
        },
        {random_tensor({5, 3}, 7), random_tensor({3, 3}, 8), random_tensor({6, 3}, 9)});
}

TEST_CASE("embeddings_sum refuses ids outside a table and tables or ids that do not fit", "[ops][indexing][errors]") {
    const Tensor a = Tensor::zeros({5, 3}), b = Tensor::zeros({4, 3});
    const IntTensor ids = IntTensor::from_vector({1, 2, 3, 4}, {2, 2});
    CHECK_THROWS_WITH(embeddings_sum({a, b}, {ids, ids}),
                      Catch::Contains("embeddings_sum") && Catch::Contains("id 4") && Catch::Contains("[4, 3]"));
    CHECK_THROWS_WITH(embeddings_sum({a, b}, {ids, IntTensor::from_vector({0, 1, 2}, {3})}),
                      Catch::Contains("trailing axes"));
    CHECK_THROWS_WITH(embeddings_sum({a, Tensor::zeros({4, 2})}, {ids, ids}), Catch::Contains("width"));
    CHECK_THROWS_AS(embeddings_sum({a}, {ids, ids}), Error);
    CHECK_THROWS_AS(embeddings_sum({}, {}), Error);
    CHECK_THROWS_AS(embeddings_sum({a, Tensor()}, {ids, ids}), Error);
}

TEST_CASE("index_select picks slices along any axis and scatter-adds their gradients", "[ops][indexing]") {
    auto x = Tensor::from_vector({0, 1, 2, 10, 11, 12}, {2, 3}, true);
    CHECK(index_select(x, 0, IntTensor::from_vector({1, 1, 0}, {3})).to_vector() ==
          std::vector<float>{10, 11, 12, 10, 11, 12, 0, 1, 2});
    auto columns = index_select(x, -1, IntTensor::from_vector({2, 0, 2, 2}, {4}));
    CHECK(columns.shape() == Shape{2, 4});
    CHECK(columns.to_vector() == std::vector<float>{2, 0, 2, 2, 12, 10, 12, 12});
    columns.sum().backward();
    CHECK(x.grad().to_vector() == std::vector<float>{1, 0, 3, 1, 0, 3});  // column 2 was picked three times
    // A middle axis: [2, 3, 2] -> [2, 2, 2].
    auto y = Tensor::from_vector({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {2, 3, 2});
    CHECK(index_select(y, 1, IntTensor::from_vector({2, 0}, {2})).to_vector() ==
          std::vector<float>{4, 5, 0, 1, 10, 11, 6, 7});
    CHECK(index_select(y, 1, IntTensor::from_vector({}, {0})).shape() == Shape{2, 0, 2});
    auto flat = Tensor::zeros({3, 0}, true);  // no elements at all
    auto none = index_select(flat, 0, IntTensor::from_vector({2, 0}, {2}));
    CHECK(none.shape() == Shape{2, 0});
    none.sum().backward();
    CHECK(flat.grad().shape() == Shape{3, 0});
}

TEST_CASE("index_select passes gradcheck on every axis, with repeats", "[ops][indexing][gradcheck]") {
    auto x = random_tensor({3, 4, 5}, 2);
    const IntTensor picks[] = {IntTensor::from_vector({2, 0, 2}, {3}), IntTensor::from_vector({3, 3, 1, 0, 3}, {5}),
                               IntTensor::from_vector({4, 0, 1, 4}, {4})};
    for (int64_t axis = 0; axis < 3; ++axis) {
        const IntTensor& idx = picks[axis];
        require_gradcheck([&](const std::vector<Tensor>& in) { return index_select(in[0], axis, idx); }, {x});
        require_gradcheck([&](const std::vector<Tensor>& in) { return index_select(in[0], axis - 3, idx); }, {x});
    }
    // It equals embedding on a matrix's rows, values and gradients alike.
    auto w = random_tensor({5, 3}, 3);
    const IntTensor ids = IntTensor::from_vector({4, 1, 1, 0}, {4});
    CHECK(index_select(w, 0, ids).to_vector() == embedding(w, ids).to_vector());
}

TEST_CASE("index_select refuses indices out of range or not one-dimensional", "[ops][indexing][errors]") {
    auto x = Tensor::zeros({2, 3});
    CHECK_THROWS_WITH(index_select(x, 1, IntTensor::from_vector({0, 3}, {2})),
                      Catch::Contains("index_select: index 3 at position 1 is outside [0, 3) of axis 1 of [2, 3]"));
    CHECK_THROWS_WITH(index_select(x, 0, IntTensor::from_vector({-1}, {1})), Catch::Contains("index -1"));
    CHECK_THROWS_WITH(index_select(x, 0, IntTensor::from_vector({0, 1}, {1, 2})),
                      Catch::Contains("indices must be one-dimensional, got [1, 2]"));
    CHECK_THROWS_WITH(index_select(x, 2, IntTensor::from_vector({0}, {1})), Catch::Contains("out of range"));
    CHECK_THROWS_WITH(index_select(Tensor(), 0, IntTensor::from_vector({0}, {1})), Catch::Contains("undefined"));
}

TEST_CASE("where fills where the broadcast mask is not set and blocks the gradient there", "[ops][indexing]") {
    auto x = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3}, true);
    auto mask = IntTensor::from_vector({1, 0, 1}, {3});
    auto y = where(mask, x, -1e9f);
    CHECK(y.to_vector() == std::vector<float>{1, -1e9f, 3, 4, -1e9f, 6});
    y.sum().backward();
    CHECK(x.grad().to_vector() == std::vector<float>{1, 0, 1, 1, 0, 1});
}

TEST_CASE("where passes gradcheck with broadcast masks", "[ops][indexing][gradcheck]") {
    auto x = random_tensor({2, 2, 3, 4}, 1);
    for (const IntTensor& mask :
         {IntTensor::from_vector({1, 0, 0, 1, 0, 0, 0, 1}, {2, 1, 1, 4}),
          IntTensor::from_vector({0, 1, 1, 0, 0, 1, 1, 1, 0, 0, 0, 0}, {3, 4}), IntTensor::from_vector({1}, {1})})
        require_gradcheck([&](const std::vector<Tensor>& in) { return where(mask, in[0], 0.5f); }, {x});
}

TEST_CASE("a mask that does not broadcast to the input is an error", "[ops][indexing][errors]") {
    CHECK_THROWS_WITH(where(IntTensor::zeros({2}), Tensor::zeros({2, 3}), 0),
                      Catch::Contains("where") && Catch::Contains("[2, 3]"));
    CHECK_THROWS_AS(where(IntTensor::zeros({4, 2, 3}), Tensor::zeros({2, 3}), 0), Error);
}
