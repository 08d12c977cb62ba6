// Tensor and IntTensor: factories, accessors, views and the quick-start API.
#include "helpers.h"

using namespace seqgrad;

TEST_CASE("the quick-start example computes the gradient of tanh(a b).sum()", "[tensor]") {
    auto a = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3}, /*requires_grad=*/true);
    auto b = Tensor::from_vector({1, 0, 0, 1, 1, 1}, {3, 2}, true);
    auto loss = seqgrad::tanh(seqgrad::matmul(a, b)).sum();
    loss.backward();
    std::vector<float> ga = a.grad().to_vector();
    // a b = [[4, 5], [10, 11]]; d tanh = 1 - tanh^2; ga = d * b^T
    const float d00 = 1 - std::pow(std::tanh(4.0f), 2.0f), d01 = 1 - std::pow(std::tanh(5.0f), 2.0f);
    const float d10 = 1 - std::pow(std::tanh(10.0f), 2.0f), d11 = 1 - std::pow(std::tanh(11.0f), 2.0f);
    const std::vector<float> expected{d00, d01, d00 + d01, d10, d11, d10 + d11};
    REQUIRE(ga.size() == expected.size());
    for (size_t i = 0; i < ga.size(); ++i) CHECK(ga[i] == Approx(expected[i]).margin(1e-6));
    CHECK(loss.item() == Approx(std::tanh(4.0f) + std::tanh(5.0f) + std::tanh(10.0f) + std::tanh(11.0f)));
    CHECK(a.shape() == Shape{2, 3});
    auto c = a + b.transpose(0, 1) * a - (-a);
    CHECK(c.shape() == Shape{2, 3});
}

TEST_CASE("factories fill and shape their tensors", "[tensor]") {
    CHECK(Tensor::zeros({2, 3}).to_vector() == std::vector<float>(6, 0.0f));
    CHECK(Tensor::ones({4}).to_vector() == std::vector<float>(4, 1.0f));
    CHECK(Tensor::full({2, 2}, 7.5f).to_vector() == std::vector<float>(4, 7.5f));
    auto s = Tensor::scalar(3.0f);
    CHECK(s.dim() == 0);
    CHECK(s.numel() == 1);
    CHECK(s.item() == 3.0f);
    CHECK(Tensor::zeros({3, 0}).numel() == 0);
    CHECK(Tensor::zeros({2, 3, 4}).size(-1) == 4);
    // Past 4 MB the fill is split across the threads: every element written, at 1, 2 and 3 threads,
    // over memory that held other numbers before (the allocator hands back freed blocks), each time
    // a value no earlier fill wrote.
    const testing::ThreadCountScope restore;
    for (int threads : {1, 2, 3}) {
        INFO(threads << " threads");
        set_num_threads(threads);
        const float value = 2.5f + static_cast<float>(threads);
        { Tensor used = Tensor::full({3, 700001}, -value); }
        const std::vector<float> filled = Tensor::full({3, 700001}, value).to_vector();
        CHECK(std::count(filled.begin(), filled.end(), value) == 3 * 700001);
    }
}

TEST_CASE("random factories are reproducible from the seed and have the right moments", "[tensor]") {
    Generator g1(42), g2(42), g3(43);
    auto a = Tensor::normal({10000}, 1.0f, 2.0f, g1);
    auto b = Tensor::normal({10000}, 1.0f, 2.0f, g2);
    auto c = Tensor::normal({10000}, 1.0f, 2.0f, g3);
    CHECK(a.to_vector() == b.to_vector());
    CHECK(a.to_vector() != c.to_vector());
    double mean = 0, var = 0;
    for (float v : a.to_vector()) mean += v;
    mean /= 10000;
    for (float v : a.to_vector()) var += (v - mean) * (v - mean);
    var /= 10000;
    CHECK(mean == Approx(1.0).margin(0.08));
    CHECK(std::sqrt(var) == Approx(2.0).margin(0.08));
    auto u = Tensor::uniform({10000}, -3.0f, 5.0f, g1);
    for (float v : u.to_vector()) REQUIRE((v >= -3.0f && v < 5.0f));
}

TEST_CASE("a tensor handle shares its storage and reshape is a view", "[tensor]") {
    auto a = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
    Tensor alias = a;
    alias.data()[0] = 10;
    CHECK(a.data()[0] == 10);
    auto r = a.reshape({3, 2});
    CHECK(r.data() == a.data());
    CHECK(a.reshape({-1}).shape() == Shape{6});
    auto t = a.transpose(0, 1);
    CHECK(t.data() != a.data());
    CHECK(t.to_vector() == std::vector<float>{10, 4, 2, 5, 3, 6});
}

TEST_CASE("factories and accessors reject bad arguments with seqgrad::Error", "[tensor][errors]") {
    CHECK_THROWS_AS(Tensor::from_vector({1, 2, 3}, {2, 2}), Error);
    CHECK_THROWS_WITH(Tensor::from_vector({1, 2, 3}, {2, 2}), Catch::Contains("[2, 2]"));
    CHECK_THROWS_AS(Tensor::zeros({2, -1}), Error);
    CHECK_THROWS_AS(Tensor::zeros({2, 2}).item(), Error);
    CHECK_THROWS_AS(Tensor::zeros({2, 2}).size(2), Error);
    CHECK_THROWS_AS(Tensor().shape(), Error);
    CHECK_THROWS_AS(Tensor::zeros({2}).reshape({3}), Error);
    CHECK_THROWS_AS(IntTensor::from_vector({1, 2}, {3}), Error);
}

TEST_CASE("IntTensor holds ids and slices its last axis", "[tensor]") {
    auto ids = IntTensor::from_vector({1, 5, 6, 2, 1, 7, 2, 0}, {2, 4});
    CHECK(ids.slice_last(0, 3).to_vector() == std::vector<int64_t>{1, 5, 6, 1, 7, 2});
    CHECK(ids.slice_last(1, 4).to_vector() == std::vector<int64_t>{5, 6, 2, 7, 2, 0});
    CHECK(ids.reshape({8}).shape() == Shape{8});
    CHECK_THROWS_AS(ids.slice_last(2, 5), Error);
}

TEST_CASE("a generator restored from its state continues the same stream", "[tensor]") {
    Generator gen(5);
    for (int i = 0; i < 10; ++i) gen.next_u64();
    const Generator::State saved = gen.state();
    const float a = gen.normal(0, 1);
    const uint64_t b = gen.next_u64();
    Generator other(99);
    other.set_state(saved);
    CHECK(other.normal(0, 1) == a);
    CHECK(other.next_u64() == b);
    CHECK_THROWS_AS(other.set_state({0, 0, 0, 0}), Error);
}
