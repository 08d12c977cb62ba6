// The float32 products of weight matrices on oneDNN instead of sgemm (float32_products(),
// core/precision.h): the choice and its names, and linear layers and LSTM gates on either library
// against the same products summed here in double, forward and backward, with the dispatch itself
// observed (oneDNN's blocks counted), so that a choice that silently ran the other library fails.
#include "helpers.h"

#include <cstdlib>
#include <string>

#include "../core/blas.h"

using namespace seqgrad;
using namespace seqgrad::testing;

namespace {

// Sets the choice for its lifetime and goes back to the default's rule after.
struct Float32Products {
    explicit Float32Products(const std::string& which) { set_float32_products(which); }
    ~Float32Products() { set_float32_products("auto"); }
};

// Whether this build runs products on oneDNN; if not, the calling case says so and returns (and
// fails under CI, where oneDNN is a dependency).
bool have_onednn() {
    try {
        Float32Products probe("onednn");
        return true;
    } catch (const Error& e) {
        const char* ci = std::getenv("CI");
        if (ci != nullptr && std::string(ci) == "true") FAIL("oneDNN is missing under CI: " << e.what());
        skip_test(e.what());
        return false;
    }
}

// x w^T (+ bias) in double, x [rows, in], w [out, in].
std::vector<double> linear_in_double(const Tensor& x, const Tensor& w, const Tensor& bias) {
    const int64_t rows = x.size(0), in = x.size(1), out = w.size(0);
    std::vector<double> y(static_cast<size_t>(rows * out));
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t o = 0; o < out; ++o) {
            double sum = bias.defined() ? bias.data()[o] : 0.0;
            for (int64_t i = 0; i < in; ++i)
                sum += static_cast<double>(x.data()[r * in + i]) * static_cast<double>(w.data()[o * in + i]);
            y[static_cast<size_t>(r * out + o)] = sum;
        }
    return y;
}

// a^T b in double, a [k, m], b [k, n]: the weight gradient dY^T X.
std::vector<double> transposed_product(const Tensor& a, const Tensor& b) {
    const int64_t k = a.size(0), m = a.size(1), n = b.size(1);
    std::vector<double> c(static_cast<size_t>(m * n), 0.0);
    for (int64_t p = 0; p < k; ++p)
        for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j)
                c[static_cast<size_t>(i * n + j)] +=
                    static_cast<double>(a.data()[p * m + i]) * static_cast<double>(b.data()[p * n + j]);
    return c;
}

double worst_relative(const Tensor& actual, const std::vector<double>& expected) {
    REQUIRE(static_cast<size_t>(actual.numel()) == expected.size());
    double scale = 0, worst = 0;
    for (size_t i = 0; i < expected.size(); ++i) scale = std::max(scale, std::abs(expected[i]));
    for (size_t i = 0; i < expected.size(); ++i)
        worst = std::max(worst, std::abs(static_cast<double>(actual.data()[i]) - expected[i]));
    return worst / std::max(scale, 1e-30);
}

}  // namespace

TEST_CASE("float32_products names its choice and kernel and refuses unknown names", "[float32_products]") {
    const std::string by_default = float32_products();
    CHECK((by_default == "sgemm" || by_default == "onednn"));
    CHECK(float32_products_kernel().rfind(by_default == "onednn" ? "oneDNN " : "OpenBLAS sgemm (", 0) == 0);
    {
        Float32Products sgemm("sgemm");
        CHECK(float32_products() == "sgemm");
        CHECK(float32_products_kernel().rfind("OpenBLAS sgemm (", 0) == 0);
        CHECK_THROWS_WITH(set_float32_products("mkl"), Catch::Contains("not one of sgemm, onednn, auto"));
        CHECK(float32_products() == "sgemm");  // a refused name changes nothing
    }
    CHECK(float32_products() == by_default);
}

TEST_CASE("linear layers on sgemm and on oneDNN equal their products summed in double", "[float32_products]") {
    if (!have_onednn()) return;
    for (const std::string which : {"sgemm", "onednn"}) {
        for (const auto& [rows, in, out] :
             std::vector<std::array<int64_t, 3>>{{1, 40, 33}, {37, 300, 130}, {256, 64, 96}}) {
            INFO(which << ": rows " << rows << " in " << in << " out " << out);
            Float32Products chosen(which);
            auto x = random_tensor({rows, in}, 21, -1, 1, true);
            auto w = random_tensor({out, in}, 22, -1, 1, true);
            auto bias = random_tensor({out}, 23, -1, 1, true);
            const auto g = random_tensor({rows, out}, 24, -1, 1, false);
            const int64_t before = detail::onednn_float32_blocks_run();
            const Tensor y = linear(x, w, bias);
            (y * g).sum().backward();
            const int64_t blocks = detail::onednn_float32_blocks_run() - before;
            // One row forward stays on sgemv; its backward products and every other shape's run on
            // the chosen library.
            if (which == "onednn") CHECK(blocks > 0);
            else CHECK(blocks == 0);
            CHECK(worst_relative(y, linear_in_double(x, w, bias)) < 1e-5);
            CHECK(worst_relative(x.grad(), linear_in_double(g, transpose(w.detach(), 0, 1), Tensor())) < 1e-5);
            CHECK(worst_relative(w.grad(), transposed_product(g, x)) < 1e-5);
            // Plain matmul stays on sgemm whatever the choice.
            const int64_t before_matmul = detail::onednn_float32_blocks_run();
            const Tensor plain = matmul(x.detach(), w.detach(), false, true);
            CHECK(detail::onednn_float32_blocks_run() == before_matmul);
            CHECK(max_abs_diff(plain + bias, y) < 1e-4f);
        }
    }
}

TEST_CASE("LSTM gates on oneDNN equal those on sgemm, forward and backward", "[float32_products]") {
    if (!have_onednn()) return;
    const int64_t batch = 24, in = 48, hidden = 40;
    std::vector<std::vector<float>> results;
    for (const std::string which : {"sgemm", "onednn"}) {
        Float32Products chosen(which);
        auto x = random_tensor({batch, in}, 31, -1, 1, true);
        auto h = random_tensor({batch, hidden}, 32, -1, 1, true);
        auto c = random_tensor({batch, hidden}, 33, -1, 1, true);
        auto w_ih = random_tensor({4 * hidden, in}, 34, -0.3f, 0.3f, true);
        auto w_hh = random_tensor({4 * hidden, hidden}, 35, -0.3f, 0.3f, true);
        auto b_ih = random_tensor({4 * hidden}, 36, -0.1f, 0.1f, true);
        auto b_hh = random_tensor({4 * hidden}, 37, -0.1f, 0.1f, true);
        const int64_t before = detail::onednn_float32_blocks_run();
        const auto [h1, c1] = lstm_cell(x, LstmState{h, c}, w_ih, w_hh, b_ih, b_hh);
        (h1.sum() + (c1 * c1).sum()).backward();
        CHECK((detail::onednn_float32_blocks_run() > before) == (which == "onednn"));
        std::vector<float> all = h1.to_vector();
        for (const Tensor& t : {c1, x.grad(), h.grad(), w_ih.grad(), w_hh.grad()})
            for (float v : t.to_vector()) all.push_back(v);
        results.push_back(all);
    }
    REQUIRE(results[0].size() == results[1].size());
    float worst = 0;
    for (size_t i = 0; i < results[0].size(); ++i) worst = std::max(worst, std::abs(results[0][i] - results[1][i]));
    CHECK(worst < 1e-5f);
}

TEST_CASE("a weight's gradient summed over many rows in parts, one a thread, equals its sum in double",
          "[float32_products][threads]") {
    // dW [48, 40] = dy^T x over 3,001 rows: long against dW's sides, so on sgemm with two or more
    // threads each thread sums its own stretch of the rows and the parts are added after. Both
    // forms, C = A^T B and C += A^T B, at one, two and three threads, against the sum in double;
    // and the same bits again at the same thread count.
    Float32Products sgemm("sgemm");
    const int64_t rows = 3001, in = 40, out = 48;
    const Tensor dy = random_tensor({rows, out}, 31, -1, 1, false), x = random_tensor({rows, in}, 32, -1, 1, false);
    const Tensor start = random_tensor({out, in}, 33, -1, 1, false);
    std::vector<double> expected = transposed_product(dy, x), added = expected;
    for (size_t i = 0; i < added.size(); ++i) added[i] += start.data()[i];
    {
        const ThreadCountScope restore;
        for (int threads : {1, 2, 3}) {
            INFO(threads << " threads");
            set_num_threads(threads);
            const int64_t before = detail::products_summed_in_parts();
            Tensor fresh = Tensor::empty({out, in}), sum = start.clone(), again = Tensor::empty({out, in});
            detail::gemm_weights(true, false, out, in, rows, dy.data(), x.data(), fresh.data(), false);
            detail::gemm_weights(true, false, out, in, rows, dy.data(), x.data(), sum.data(), true);
            detail::gemm_weights(true, false, out, in, rows, dy.data(), x.data(), again.data(), false);
            CHECK(detail::products_summed_in_parts() - before == (threads == 1 ? 0 : 3));
            CHECK(worst_relative(fresh, expected) < 1e-5);
            CHECK(worst_relative(sum, added) < 1e-5);
            CHECK(fresh.to_vector() == again.to_vector());
        }
    }
    // A sum shorter than twice dW's longer side keeps the split by dW's rows.
    const ThreadCountScope scope(2);
    const int64_t before = detail::products_summed_in_parts();
    const Tensor dy_wide = random_tensor({1100, 600}, 34, -1, 1, false),
                 x_wide = random_tensor({1100, 500}, 35, -1, 1, false);
    Tensor wide = Tensor::empty({600, 500});
    detail::gemm_weights(true, false, 600, 500, 1100, dy_wide.data(), x_wide.data(), wide.data(), false);
    CHECK(detail::products_summed_in_parts() == before);
    CHECK(worst_relative(wide, transposed_product(dy_wide, x_wide)) < 1e-5);
}
