// Fused cross-entropy: PyTorch's definition with ignore_index and label smoothing.
#include "helpers.h"

using namespace seqgrad;
using testing::random_tensor;
using testing::require_gradcheck;

namespace {

// The definition written with primitives: the mean over counted positions of
// (1 - eps) * -log p[target] + eps * mean_c(-log p[c]).
Tensor composed_cross_entropy(const Tensor& logits, const IntTensor& targets, int64_t ignore, float eps) {
    const int64_t v = logits.size(-1);
    auto logp = reshape(log_softmax(logits, -1), {-1, v});
    std::vector<float> onehot(static_cast<size_t>(targets.numel() * v), 0.0f),
        keep(static_cast<size_t>(targets.numel()), 0.0f);
    int64_t counted = 0;
    for (int64_t i = 0; i < targets.numel(); ++i) {
        if (targets.data()[i] == ignore) continue;
        onehot[static_cast<size_t>(i * v + targets.data()[i])] = 1.0f;
        keep[static_cast<size_t>(i)] = 1.0f;
        ++counted;
    }
    auto nll = -sum(logp * Tensor::from_vector(onehot, {targets.numel(), v}), {1});
    auto smooth = -mean(logp, {1});
    auto per_position = (nll * (1 - eps) + smooth * eps) * Tensor::from_vector(keep, {targets.numel()});
    return sum(per_position) / static_cast<float>(counted);
}

}  // namespace

TEST_CASE("cross-entropy matches a hand computation", "[ops][loss]") {
    auto logits = Tensor::from_vector({1, 2, 3, 1, 1, 1}, {2, 3});
    auto targets = IntTensor::from_vector({2, 0}, {2});
    const double lse0 = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
    const double lse1 = 1 + std::log(3.0);  // log(3e)
    CHECK(cross_entropy(logits, targets).item() == Approx(((lse0 - 3) + (lse1 - 1)) / 2));
    // Label smoothing 0.1: 0.9 * nll + 0.1 * (lse - mean(x)).
    const double smoothed = (0.9 * (lse0 - 3) + 0.1 * (lse0 - 2) + 0.9 * (lse1 - 1) + 0.1 * (lse1 - 1)) / 2;
    CHECK(cross_entropy(logits, targets, -100, 0.1f).item() == Approx(smoothed));
    // Ignoring the second position averages over the first only.
    CHECK(cross_entropy(logits, targets, 0).item() == Approx(lse0 - 3));
}

// Each row's maximum and sum of exponentials are taken in vectors at the avx2 and avx512 levels,
// whole ones and a remainder: every class must count, whichever part of the row it falls in.
TEST_CASE("cross-entropy counts every class at every vocabulary size", "[ops][loss]") {
    for (int64_t vocab : {1, 2, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 1000}) {
        const int64_t rows = 5;
        const Tensor logits = random_tensor({rows, vocab}, static_cast<uint64_t>(vocab), -4.0f, 4.0f, false);
        std::vector<int64_t> targets;
        for (int64_t i = 0; i < rows; ++i) targets.push_back((i * 7) % vocab);
        double expected = 0;
        for (int64_t i = 0; i < rows; ++i) {
            const float* row = logits.data() + i * vocab;
            double total = 0;
            for (int64_t c = 0; c < vocab; ++c) total += std::exp(static_cast<double>(row[c]));
            expected += std::log(total) - row[targets[static_cast<size_t>(i)]];
        }
        INFO("vocab " << vocab);
        CHECK(cross_entropy(logits, IntTensor::from_vector(targets, {rows})).item() ==
              Approx(expected / rows).epsilon(1e-6));
    }
}

TEST_CASE("fused cross-entropy equals its composition, values and gradients", "[ops][loss]") {
    for (float eps : {0.0f, 0.1f, 0.3f}) {
        auto logits = random_tensor({3, 4, 7}, 1, -3, 3);
        auto twin = Tensor::from_vector(logits.to_vector(), logits.shape(), true);
        auto targets = IntTensor::from_vector({1, 4, 0, 6, 2, 0, 0, 3, 5, 1, 0, 2}, {3, 4});
        auto fused = cross_entropy(logits, targets, 0, eps);
        auto composed = composed_cross_entropy(twin, targets, 0, eps);
        CHECK(fused.item() == Approx(composed.item()).epsilon(1e-5));
        fused.backward();
        composed.backward();
        CHECK(testing::max_abs_diff(logits.grad(), twin.grad()) < 1e-6f);
    }
}

TEST_CASE("cross-entropy passes gradcheck with ignored positions and smoothing", "[ops][loss][gradcheck]") {
    auto logits = random_tensor({2, 3, 5}, 2, -2, 2);
    auto targets = IntTensor::from_vector({1, 4, 0, 3, 0, 2}, {2, 3});
    for (float eps : {0.0f, 0.1f})
        for (int64_t ignore : {int64_t{0}, int64_t{-100}})
            require_gradcheck([&](const std::vector<Tensor>& in) { return cross_entropy(in[0], targets, ignore, eps); },
                              {logits});
    require_gradcheck(
        [](const std::vector<Tensor>& in) { return cross_entropy(in[0], IntTensor::from_vector({3}, {}), -100, 0.2f); },
        {random_tensor({5}, 3)});
}

TEST_CASE("cross-entropy with every target ignored is zero with zero gradient", "[ops][loss]") {
    auto logits = random_tensor({2, 3}, 4);
    auto loss = cross_entropy(logits, IntTensor::from_vector({0, 0}, {2}), 0);
    CHECK(loss.item() == 0.0f);
    loss.backward();
    for (float g : logits.grad().to_vector()) CHECK(g == 0.0f);
}

TEST_CASE("cross-entropy rejects targets out of range and mismatched shapes", "[ops][loss][errors]") {
    auto logits = Tensor::zeros({2, 3});
    CHECK_THROWS_WITH(cross_entropy(logits, IntTensor::from_vector({1, 3}, {2})),
                      Catch::Contains("cross_entropy") && Catch::Contains("target 3"));
    CHECK_THROWS_AS(cross_entropy(logits, IntTensor::from_vector({1, -2}, {2})), Error);
    CHECK_THROWS_WITH(cross_entropy(logits, IntTensor::from_vector({1, 1, 1}, {3})), Catch::Contains("[2, 3]"));
    CHECK_THROWS_AS(cross_entropy(logits, IntTensor::from_vector({1, 1}, {2}), -100, 1.5f), Error);
}
