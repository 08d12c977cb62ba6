// softmax and log_softmax: values, stability, gradients, and agreement with their composition.
#include <algorithm>
#include <cmath>
#include <limits>

#include "helpers.h"

using namespace seqgrad;
using testing::random_tensor;
using testing::require_gradcheck;

TEST_CASE("softmax rows sum to one, even with huge logits", "[ops][softmax]") {
    auto x = Tensor::from_vector({1000, 1001, 1002, -5, 0, 5}, {2, 3});
    auto y = softmax(x, -1);
    for (int64_t r = 0; r < 2; ++r) {
        float total = 0;
        for (int64_t c = 0; c < 3; ++c) total += y.data()[r * 3 + c];
        CHECK(total == Approx(1.0f));
    }
    CHECK(std::isfinite(log_softmax(x, -1).data()[0]));
}

TEST_CASE("softmax rows are uniform under a full -1e9 mask", "[ops][softmax]") {
    auto x = random_tensor({2, 4}, 1, -1, 1, false);
    auto masked = where(IntTensor::from_vector({0, 0, 0, 0}, {4}), x, -1e9f);
    for (float v : softmax(masked, -1).to_vector()) CHECK(v == Approx(0.25f));
}

TEST_CASE("softmax and log_softmax equal their composition from primitives", "[ops][softmax]") {
    for (int64_t axis : {0, 1, 2}) {
        auto x = random_tensor({3, 4, 5}, 2, -3, 3);
        auto composed_soft = exp(x) / sum(exp(x), {axis}, true);
        auto composed_log = x - log(sum(exp(x), {axis}, true));
        CHECK(testing::max_abs_diff(softmax(x, axis), composed_soft) < 1e-6f);
        CHECK(testing::max_abs_diff(log_softmax(x, axis), composed_log) < 1e-5f);
        // Gradients too, through the same random projection.
        auto r = random_tensor({3, 4, 5}, 3, -1, 1, false);
        auto a = x.detach().set_requires_grad(true);
        auto b = Tensor::from_vector(x.to_vector(), x.shape(), true);
        (softmax(a, axis) * r).sum().backward();
        (exp(b) / sum(exp(b), {axis}, true) * r).sum().backward();
        CHECK(testing::max_abs_diff(a.grad(), b.grad()) < 1e-6f);
        auto c = Tensor::from_vector(x.to_vector(), x.shape(), true);
        auto d = Tensor::from_vector(x.to_vector(), x.shape(), true);
        (log_softmax(c, axis) * r).sum().backward();
        ((d - log(sum(exp(d), {axis}, true))) * r).sum().backward();
        CHECK(testing::max_abs_diff(c.grad(), d.grad()) < 1e-5f);
    }
}

TEST_CASE("softmax and log_softmax of long rows match exp, element by element, and keep the limits", "[ops][softmax]") {
    // Rows long enough for the vectorised kernels (sixteen and thirty-two lanes at a time) and
    // lengths that leave remainders of many sizes, with the mask fill, a value whose exponential
    // underflows, and then NaN and the infinities among the lanes.
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    for (const int64_t n :
         {int64_t{31}, int64_t{32}, int64_t{33}, int64_t{64}, int64_t{65}, int64_t{100}, int64_t{127}, int64_t{1000}}) {
        INFO("n " << n);
        Tensor x = random_tensor({3, n}, 70 + static_cast<uint64_t>(n), -30.0f, 30.0f, false);
        x.data()[n + 3] = -1e9f;     // the mask fill: weight exactly 0
        x.data()[n + 17] = -200.0f;  // e^(x - max) below the normal floats: 0
        x.data()[n + n - 1] = 80.0f;
        const std::vector<float> values = x.to_vector();
        const std::vector<float> y = softmax(x, -1).to_vector(), ly = log_softmax(x, -1).to_vector();
        for (int64_t r = 0; r < 3; ++r) {
            const float* row = values.data() + r * n;
            const float m = *std::max_element(row, row + n);
            double total = 0;
            for (int64_t j = 0; j < n; ++j) total += std::exp(static_cast<double>(row[j]) - m);
            for (int64_t j = 0; j < n; ++j) {
                const double expected = std::exp(static_cast<double>(row[j]) - m) / total;
                CHECK(y[static_cast<size_t>(r * n + j)] == Approx(expected).epsilon(1e-5).margin(1e-30));
                CHECK(ly[static_cast<size_t>(r * n + j)] ==
                      Approx(row[j] - m - std::log(total)).epsilon(1e-5).margin(1e-4));
            }
        }
        CHECK(y[static_cast<size_t>(n + 3)] == 0.0f);
        CHECK(y[static_cast<size_t>(n + 17)] == 0.0f);
        // A NaN anywhere in a row makes the whole row NaN; +inf makes it NaN too (inf - inf).
        for (const float special : {nan, inf}) {
            Tensor z = Tensor::from_vector(values, {3, n});
            z.data()[2 * n + n / 2] = special;
            const std::vector<float> out = softmax(z, -1).to_vector();
            for (int64_t j = 0; j < n; ++j) CHECK(std::isnan(out[static_cast<size_t>(2 * n + j)]));
            CHECK(std::isfinite(out[0]));
        }
        // -inf is a zero weight, as the mask fill is.
        Tensor w = Tensor::from_vector(values, {3, n});
        w.data()[5] = -inf;
        CHECK(softmax(w, -1).to_vector()[5] == 0.0f);
    }
}

TEST_CASE("softmax and log_softmax pass gradcheck along each axis", "[ops][softmax][gradcheck]") {
    for (const Shape& s : {Shape{5}, Shape{3, 4}, Shape{2, 3, 4}, Shape{2, 1, 3}}) {
        auto x = random_tensor(s, 4, -2, 2);
        for (int64_t axis = -1; axis < x.dim(); ++axis) {
            INFO("shape " << s << " axis " << axis);
            require_gradcheck([axis](const std::vector<Tensor>& in) { return softmax(in[0], axis); }, {x});
            require_gradcheck([axis](const std::vector<Tensor>& in) { return log_softmax(in[0], axis); }, {x});
        }
    }
}

TEST_CASE("softmax rejects an axis out of range", "[ops][softmax][errors]") {
    CHECK_THROWS_WITH(softmax(Tensor::zeros({2, 3}), 2), Catch::Contains("softmax"));
    CHECK_THROWS_AS(log_softmax(Tensor::zeros({2, 3}), -3), Error);
}

TEST_CASE("masked scores get exactly zero weight", "[ops][softmax]") {
    auto x = Tensor::from_vector({0.5f, -1e9f, 2.0f, -1e9f}, {4});
    auto y = softmax(x, 0);
    CHECK(y.data()[1] == 0.0f);
    CHECK(y.data()[3] == 0.0f);
    CHECK(exp(Tensor::from_vector({-200.0f, 100.0f}, {2})).to_vector()[0] == 0.0f);
    CHECK(std::isinf(exp(Tensor::from_vector({100.0f}, {1})).item()));
}

TEST_CASE("log_softmax_top_k gives log_softmax's k best entries of each row, bit for bit", "[ops][softmax]") {
    const int64_t rows = 6, n = 1000;
    Tensor logits = testing::random_tensor({rows, n}, 31, -8.0f, 8.0f, false);
    logits.data()[2 * n + 10] = logits.data()[2 * n + 500] = 20.0f;  // a tie: the lower index first
    const Tensor log_probs = log_softmax(logits, -1);
    for (const std::vector<int64_t>& barred : {std::vector<int64_t>{}, {10}, {500, 10, 7}}) {
        for (const int64_t k : {int64_t{1}, int64_t{8}}) {
            INFO("k " << k << " barred " << barred.size());
            const TopK top = log_softmax_top_k(logits, k, barred);
            REQUIRE(top.values.shape() == Shape{rows, k});
            REQUIRE(top.indices.shape() == Shape{rows, k});
            for (int64_t r = 0; r < rows; ++r) {
                std::vector<std::pair<float, int64_t>> all;
                for (int64_t j = 0; j < n; ++j)
                    if (std::find(barred.begin(), barred.end(), j) == barred.end())
                        all.emplace_back(log_probs.data()[r * n + j], j);
                std::stable_sort(all.begin(), all.end(),
                                 [](const auto& a, const auto& b) { return a.first > b.first; });
                for (int64_t c = 0; c < k; ++c) {
                    CHECK(top.indices.data()[r * k + c] == all[static_cast<size_t>(c)].second);
                    CHECK(top.values.data()[r * k + c] == all[static_cast<size_t>(c)].first);  // exactly
                }
            }
        }
    }
    CHECK(log_softmax_top_k(logits, 1).indices.data()[2] == 10);
    const std::vector<int64_t> ten{10};
    CHECK(log_softmax_top_k(logits, 1, ten).indices.data()[2] == 500);
}

TEST_CASE("log_softmax_top_k marks missing entries and rejects bad arguments", "[ops][softmax][errors]") {
    Tensor logits = Tensor::from_vector({1.0f, 2.0f, 3.0f, NAN, 0.5f, 0.25f}, {2, 3});
    const std::vector<int64_t> two{2};
    const TopK top = log_softmax_top_k(logits, 4, two);
    // Row 0: index 1, then 0 (2 is barred), then nothing. Row 1 holds a NaN, which makes its whole
    // log_softmax NaN: its entries in index order, NaN-valued.
    CHECK(top.indices.to_vector() == std::vector<int64_t>{1, 0, -1, -1, 0, 1, -1, -1});
    CHECK(std::isinf(top.values.data()[2]));
    CHECK(std::isnan(top.values.data()[4]));
    CHECK_THROWS_WITH(log_softmax_top_k(logits, 0), Catch::Contains("k must be at least 1"));
    CHECK_THROWS_WITH(log_softmax_top_k(Tensor::zeros({2, 2, 2}), 1), Catch::Contains("expects logits [rows, n]"));
}
