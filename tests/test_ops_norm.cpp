// Fused layer norm against its composition, its gradients and its errors.
#include <cmath>

#include "helpers.h"

using namespace seqgrad;
using testing::random_tensor;
using testing::require_gradcheck;
using testing::ThreadCountScope;

namespace {

// LayerNorm (biased variance inside the square root) written with primitives.
Tensor composed_layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps) {
    auto mu = mean(x, {-1}, true);
    auto centered = x - mu;
    auto var = mean(centered * centered, {-1}, true);
    return gamma * (centered / sqrt(var + eps)) + beta;
}

}  // namespace

TEST_CASE("layer norm gives rows of mean 0 and variance 1 before the affine part", "[ops][norm]") {
    auto x = random_tensor({4, 16}, 1, -5, 5, false);
    auto y = layer_norm(x, Tensor::ones({16}), Tensor::zeros({16}), 1e-6f);
    for (int64_t r = 0; r < 4; ++r) {
        double m = 0, v = 0;
        for (int64_t j = 0; j < 16; ++j) m += y.data()[r * 16 + j];
        m /= 16;
        for (int64_t j = 0; j < 16; ++j) v += std::pow(y.data()[r * 16 + j] - m, 2);
        CHECK(m == Approx(0).margin(1e-6));
        CHECK(v / 16 == Approx(1).epsilon(1e-4));
    }
}

TEST_CASE("fused layer norm equals its composition, values and gradients", "[ops][norm]") {
    auto x = random_tensor({3, 5, 8}, 2, -2, 2);
    auto gamma = random_tensor({8}, 3, 0.5, 1.5);
    auto beta = random_tensor({8}, 4);
    auto x2 = Tensor::from_vector(x.to_vector(), x.shape(), true);
    auto gamma2 = Tensor::from_vector(gamma.to_vector(), gamma.shape(), true);
    auto beta2 = Tensor::from_vector(beta.to_vector(), beta.shape(), true);
    auto r = random_tensor({3, 5, 8}, 5, -1, 1, false);
    auto fused = layer_norm(x, gamma, beta, 1e-6f);
    auto composed = composed_layer_norm(x2, gamma2, beta2, 1e-6f);
    CHECK(testing::max_abs_diff(fused, composed) < 1e-5f);
    (fused * r).sum().backward();
    (composed * r).sum().backward();
    CHECK(testing::max_abs_diff(x.grad(), x2.grad()) < 1e-4f);
    CHECK(testing::max_abs_diff(gamma.grad(), gamma2.grad()) < 1e-4f);
    CHECK(testing::max_abs_diff(beta.grad(), beta2.grad()) < 1e-5f);
}

TEST_CASE("layer norm's gradients over many rows: sums in double, the same bits on any number of threads",
          "[ops][norm][threads]") {
    // 1,000 rows: past the backward's stretches of 64, the last one partial, and enough work to
    // split between threads. dgamma and dbeta against sums in double; every gradient the same bits
    // on 1, 2 and 3 threads, and dgamma and dbeta the same whether x asks for its gradient or not.
    const int64_t rows = 1000, d = 200;
    const Tensor r = random_tensor({rows, d}, 9, -1, 1, false);
    std::vector<std::vector<float>> runs;
    {
        const ThreadCountScope restore;
        for (int threads : {1, 2, 3})
            for (bool x_grad : {true, false}) {
                set_num_threads(threads);
                const Tensor x = random_tensor({rows, d}, 10, -2, 2, x_grad);
                const Tensor gamma = random_tensor({d}, 11, 0.5, 1.5), beta = random_tensor({d}, 12);
                (layer_norm(x, gamma, beta, 1e-5f) * r).sum().backward();
                std::vector<float> got = gamma.grad().to_vector();
                for (float v : beta.grad().to_vector()) got.push_back(v);
                if (x_grad)
                    for (float v : x.grad().to_vector()) got.push_back(v);
                runs.push_back(got);
                if (threads == 1 && x_grad) {  // against double
                    const std::vector<float> xs = x.to_vector(), gs = r.to_vector();
                    std::vector<double> dgamma(d, 0.0), dbeta(d, 0.0);
                    for (int64_t i = 0; i < rows; ++i) {
                        double m = 0, v = 0;
                        for (int64_t j = 0; j < d; ++j) m += xs[static_cast<size_t>(i * d + j)];
                        m /= d;
                        for (int64_t j = 0; j < d; ++j) v += std::pow(xs[static_cast<size_t>(i * d + j)] - m, 2);
                        const double inv = 1 / std::sqrt(v / d + 1e-5);
                        for (int64_t j = 0; j < d; ++j) {
                            const double g = gs[static_cast<size_t>(i * d + j)];
                            dgamma[static_cast<size_t>(j)] += g * (xs[static_cast<size_t>(i * d + j)] - m) * inv;
                            dbeta[static_cast<size_t>(j)] += g;
                        }
                    }
                    for (int64_t j = 0; j < d; ++j) {
                        CHECK(got[static_cast<size_t>(j)] == Approx(dgamma[static_cast<size_t>(j)]).margin(1e-4));
                        CHECK(got[static_cast<size_t>(d + j)] == Approx(dbeta[static_cast<size_t>(j)]).margin(1e-4));
                    }
                }
            }
    }
    for (size_t k = 2; k < runs.size(); k += 2) CHECK(runs[k] == runs[0]);  // x's gradient asked
    for (size_t k = 1; k < runs.size(); k += 2) {
        CHECK(runs[k] == std::vector<float>(runs[0].begin(), runs[0].begin() + 2 * d));  // dgamma, dbeta alone
    }
}

TEST_CASE("layer norm passes gradcheck", "[ops][norm][gradcheck]") {
    for (const Shape& s : {Shape{6}, Shape{3, 4}, Shape{2, 1, 5}}) {
        INFO("shape " << s);
        const int64_t d = s.back();
        auto x = random_tensor(s, 6, -2, 2);
        auto gamma = random_tensor({d}, 7, 0.5, 1.5);
        auto beta = random_tensor({d}, 8);
        require_gradcheck([](const std::vector<Tensor>& in) { return layer_norm(in[0], in[1], in[2], 1e-6f); },
                          {x, gamma, beta});
        require_gradcheck([](const std::vector<Tensor>& in) { return layer_norm(in[0], in[1], in[2], 0.1f); },
                          {x, gamma, beta});
    }
}

TEST_CASE("layer norm rejects parameters that do not match the last axis", "[ops][norm][errors]") {
    CHECK_THROWS_WITH(layer_norm(Tensor::zeros({2, 4}), Tensor::ones({3}), Tensor::zeros({3}), 1e-6f),
                      Catch::Contains("layer_norm") && Catch::Contains("[2, 4]"));
    CHECK_THROWS_AS(layer_norm(Tensor::zeros({2, 4}), Tensor::ones({4}), Tensor::zeros({4}), -1.0f), Error);
}
