// WeightPanels (core/panels.h): a weight laid out once for the products of an LSTM's recurrence.
// Each product against the same sums in double, in both layouts of the weight, with and without
// adding to C, at row counts that end in every partial tile and widths that end in a partial
// panel; the same bits on one thread and on two, split by columns or by rows, and on the calling
// thread alone; where it steps aside (more than 512 rows, fewer than four products, the portable
// level, oneDNN's products) it still computes the product; and lstm_sequence's results and
// gradients with the panels (its threads sharing the columns, or each taking its own rows) agree
// with those through sgemm. A weight laid out for many calls (RepeatedWeight: linear, and
// nn::LSTM's prepared steps) agrees with its tensor, passes gradcheck, and is laid out again in a
// new backward pass.
#include "helpers.h"

#include <cmath>
#include <cstring>
#include <string>

#include "../core/panels.h"
#include "seqgrad/core/gradcheck.h"
#include "seqgrad/nn/lstm.h"

using namespace seqgrad;
using namespace seqgrad::testing;

namespace {

// Sets products of weights to sgemm (where the panels run) and a level for its lifetime.
struct PanelsScope {
    explicit PanelsScope(IsaLevel level) {
        set_float32_products("sgemm");
        set_isa_level(level);
    }
    ~PanelsScope() {
        set_isa_level(max_isa_level());
        set_float32_products("auto");
    }
    PanelsScope(const PanelsScope&) = delete;
    PanelsScope& operator=(const PanelsScope&) = delete;
};

// Whether this CPU runs the AVX2 level; else the case says so and returns (and fails under CI:
// every x86-64 CPU CI runs on has AVX2).
bool have_avx2() {
    if (static_cast<int>(max_isa_level()) >= static_cast<int>(IsaLevel::avx2)) return true;
    const char* ci = std::getenv("CI");
    if (ci != nullptr && std::string(ci) == "true") FAIL("the AVX2 level is not available under CI");
    skip_test("this CPU has no AVX2 level: the panels' kernel does not run here");
    return false;
}

std::vector<float> values(int64_t n, double seed) {
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<float>(std::sin(seed + 0.731 * i));
    return v;
}

// The worst |c - (c0 when accumulate) - a b| over C, against the largest |a b| (b from the weight
// stored [k, n], or [n, k] when transposed), in double.
double worst_relative(const std::vector<float>& c, const std::vector<float>& c0, const std::vector<float>& a,
                      const std::vector<float>& w, int64_t m, int64_t n, int64_t k, bool transposed, bool accumulate) {
    double worst = 0, scale = 0;
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
            double sum = accumulate ? c0[static_cast<size_t>(i * n + j)] : 0.0;
            for (int64_t p = 0; p < k; ++p)
                sum += static_cast<double>(a[static_cast<size_t>(i * k + p)]) *
                       w[static_cast<size_t>(transposed ? j * k + p : p * n + j)];
            scale = std::max(scale, std::abs(sum));
            worst = std::max(worst, std::abs(sum - c[static_cast<size_t>(i * n + j)]));
        }
    return worst / std::max(scale, 1e-30);
}

}  // namespace

TEST_CASE("WeightPanels multiply as sums in double, in both layouts, on one thread and two", "[panels][ops]") {
    if (!have_avx2()) return;
    const PanelsScope scope(IsaLevel::avx2);
    // k 300: more inputs than a panel's stretch of 256, so the second stretch adds to the first's.
    for (bool transposed : {true, false})
        for (bool accumulate : {false, true})
            for (int64_t m : {1, 5, 6, 7, 9, 13, 32, 64, 65, 130, 203})
                for (int64_t n : {40, 200})
                    for (int64_t k : {3, 300}) {
                        INFO("transposed " << transposed << " accumulate " << accumulate << " m " << m << " n " << n
                                           << " k " << k);
                        const std::vector<float> w = values(n * k, 1.0), a = values(m * k, 2.0),
                                                 c0 = values(m * n, 3.0);
                        // Up to 64 rows the two threads split the columns, above they split the
                        // rows (130 and 203: two blocks of rows on one thread).
                        const detail::WeightPanels panels(w.data(), n, k, transposed, m, 4);
                        REQUIRE(panels.active());
                        std::vector<float> two = c0, one = c0, here = c0;
                        {
                            const ThreadCountScope restore;
                            set_num_threads(2);
                            panels.multiply(m, a.data(), two.data(), accumulate);
                            panels.multiply_here(m, a.data(), here.data(), accumulate);
                            set_num_threads(1);
                            panels.multiply(m, a.data(), one.data(), accumulate);
                        }
                        CHECK(worst_relative(two, c0, a, w, m, n, k, transposed, accumulate) < 1e-5);
                        CHECK(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)) == 0);
                        CHECK(std::memcmp(one.data(), here.data(), one.size() * sizeof(float)) == 0);
                    }
}

TEST_CASE("WeightPanels step aside for many rows, few products, the portable level and oneDNN, and still multiply",
          "[panels][ops]") {
    if (!have_avx2()) return;
    const int64_t n = 24, k = 17;
    const std::vector<float> w = values(n * k, 4.0);
    auto product_is_right = [&](const detail::WeightPanels& panels, int64_t m) {
        const std::vector<float> a = values(m * k, 5.0), c0 = values(m * n, 6.0);
        std::vector<float> c = c0;
        panels.multiply(m, a.data(), c.data(), true);
        return worst_relative(c, c0, a, w, m, n, k, true, true) < 1e-5;
    };
    {
        const PanelsScope scope(IsaLevel::avx2);
        CHECK(detail::weight_panels_run());
        CHECK(detail::WeightPanels(w.data(), n, k, true, 512, 4).active());
        const detail::WeightPanels many(w.data(), n, k, true, 513, 4);
        CHECK_FALSE(many.active());
        CHECK(product_is_right(many, 513));
        const detail::WeightPanels once(w.data(), n, k, true, 8, 3);
        CHECK_FALSE(once.active());
        CHECK(product_is_right(once, 8));
    }
    {
        const PanelsScope scope(IsaLevel::portable);
        CHECK_FALSE(detail::weight_panels_run());
        const detail::WeightPanels portable(w.data(), n, k, true, 8, 4);
        CHECK_FALSE(portable.active());
        CHECK(product_is_right(portable, 8));
    }
    try {
        set_float32_products("onednn");
    } catch (const Error&) {
        set_float32_products("auto");
        return;  // a build without oneDNN: the cases above were checked
    }
    CHECK_FALSE(detail::weight_panels_run());
    const detail::WeightPanels onednn(w.data(), n, k, true, 8, 4);
    CHECK_FALSE(onednn.active());
    CHECK(product_is_right(onednn, 8));
    set_float32_products("auto");
}

TEST_CASE("lstm_sequence with its weight in panels agrees with sgemm's products, gradients too", "[panels][lstm]") {
    if (!have_avx2()) return;
    const int64_t batch = 7, steps = 5, hidden = 20;  // 4 x 20 gates: a partial panel
    const std::vector<int64_t> lengths = {5, 3, 1, 0, 5, 4, 2};
    for (bool reverse : {false, true}) {
        INFO("reverse " << reverse);
        std::vector<std::vector<Tensor>> results;
        // The panels split by columns, each thread's rows through the panels (above 64 rows), then
        // sgemm (above 512 rows the panels step aside).
        for (int64_t rows : {batch, int64_t{65}, int64_t{513}}) {
            const PanelsScope scope(IsaLevel::avx2);
            // rows - batch padding rows of zero length, whose state passes through: the same
            // results for the first `batch` rows.
            std::vector<int64_t> all = lengths;
            all.resize(static_cast<size_t>(rows), 0);
            const Tensor gates = random_tensor({rows, steps, 4 * hidden}, 101);
            const Tensor h0 = random_tensor({rows, hidden}, 102), c0 = random_tensor({rows, hidden}, 103);
            const Tensor w = random_tensor({4 * hidden, hidden}, 104, -0.5, 0.5);
            const LstmSequence run = lstm_sequence(gates, h0, c0, w, all, reverse);
            const Tensor r = random_tensor({rows, steps, hidden}, 105, -1, 1, false);
            ((run.outputs * r).sum() + run.h.sum() + run.c.sum() * 0.5f).backward();
            results.push_back({slice(run.outputs, 0, 0, batch).detach(), slice(run.h, 0, 0, batch).detach(),
                               slice(gates.grad(), 0, 0, batch), slice(h0.grad(), 0, 0, batch), w.grad()});
        }
        for (size_t run = 1; run < results.size(); ++run)
            for (size_t i = 0; i < results[0].size(); ++i) {
                INFO("run " << run << " result " << i);
                CHECK(max_abs_diff(results[0][i], results[run][i]) < 1e-5f);
            }
    }
}

namespace {

// `uses` products of rows x [2, 3, in] each by one weight, through a RepeatedWeight laid out for
// them (repeated) or the tensor, concatenated: [2, 3 * uses, out].
Tensor products(const std::vector<Tensor>& xs, const Tensor& w, const Tensor& b, bool repeated) {
    const RepeatedWeight laid_out(w, 6, static_cast<int64_t>(xs.size()));
    std::vector<Tensor> ys;
    for (const Tensor& x : xs) ys.push_back(repeated ? linear(x, laid_out, b) : linear(x, w, b));
    return concat(ys, 1);
}

}  // namespace

TEST_CASE("linear through a RepeatedWeight agrees with linear and passes gradcheck, its panels active",
          "[panels][ops][matmul][gradcheck]") {
    if (!have_avx2()) return;
    const PanelsScope scope(IsaLevel::avx2);
    const int64_t in = 37, out = 50;  // 50 outputs: a partial panel
    const Tensor w = random_tensor({out, in}, 201, -0.5, 0.5);
    REQUIRE(RepeatedWeight(w, 6, 4).forward_panels().active());
    CHECK_FALSE(RepeatedWeight(w, 6, 3).forward_panels().active());
    std::vector<std::vector<Tensor>> results;
    for (bool repeated : {true, false}) {
        std::vector<Tensor> xs;
        for (uint64_t t = 0; t < 4; ++t) xs.push_back(random_tensor({2, 3, in}, 210 + t));
        const Tensor weight = w.detach().clone().set_requires_grad(true), b = random_tensor({out}, 202);
        const Tensor y = products(xs, weight, b, repeated);
        (y * random_tensor(y.shape(), 203, -1, 1, false)).sum().backward();
        results.push_back({y.detach(), xs[0].grad(), xs[3].grad(), weight.grad(), b.grad()});
    }
    for (size_t i = 0; i < results[0].size(); ++i) {
        INFO("result " << i);
        CHECK(max_abs_diff(results[0][i], results[1][i]) < 1e-5f);
    }
    std::vector<Tensor> inputs;
    for (uint64_t t = 0; t < 4; ++t) inputs.push_back(random_tensor({2, 3, in}, 220 + t));
    inputs.push_back(w.detach().clone().set_requires_grad(true));
    inputs.push_back(random_tensor({out}, 204));
    require_gradcheck(
        [](const std::vector<Tensor>& in) {
        return products({in[0], in[1], in[2], in[3]}, in[4], in[5], true);
        },
        inputs);
}

TEST_CASE("a RepeatedWeight lays its weight out again in each backward pass", "[panels][ops][matmul]") {
    if (!have_avx2()) return;
    const PanelsScope scope(IsaLevel::avx2);
    Tensor w = random_tensor({24, 20}, 231);
    std::vector<Tensor> xs;
    for (uint64_t t = 0; t < 4; ++t) xs.push_back(random_tensor({2, 3, 20}, 232 + t));
    const Tensor y = products(xs, w, Tensor(), true).sum();
    y.backward(/*retain_graph=*/true);
    const Tensor first = xs[1].grad().clone();
    {  // an optimizer's step between the passes: the weight doubled in place
        float* pw = w.data();
        for (int64_t i = 0; i < w.numel(); ++i) pw[i] *= 2;
    }
    for (Tensor& x : xs) x.zero_grad();
    y.backward();
    CHECK(max_abs_diff(xs[1].grad(), mul(first, 2.0f)) < 1e-5f);
}

TEST_CASE("an LSTM prepared for a decoder's steps agrees with its forward, gradients too", "[panels][nn][lstm]") {
    if (!have_avx2()) return;
    const PanelsScope scope(IsaLevel::avx2);
    const int64_t batch = 5, steps = 6, in = 9, hidden = 20;
    std::vector<std::vector<Tensor>> results;
    for (bool prepared : {true, false}) {
        Generator gen(7);
        const nn::LSTM lstm(in, hidden, 2, false, gen);
        Tensor h = random_tensor({2, batch, hidden}, 241), c = random_tensor({2, batch, hidden}, 242);
        const Tensor x = random_tensor({batch, steps, in}, 243);
        const nn::LSTM::Prepared ready = lstm.prepare(batch, steps);
        REQUIRE(ready.w_hh[1].forward_panels().active());
        Tensor loss = Tensor::scalar(0);
        for (int64_t t = 0; t < steps; ++t) {
            const Tensor input = slice(x, 1, t, t + 1);
            const nn::LSTMOutput out = prepared ? lstm.forward(input, h, c, ready) : lstm.forward(input, {}, h, c);
            h = out.h_n;
            c = out.c_n;
            loss = loss +
                   (out.output * random_tensor(out.output.shape(), 250 + static_cast<uint64_t>(t), -1, 1, false)).sum();
        }
        (loss + c.sum()).backward();
        std::vector<Tensor> got{h.detach(), c.detach(), x.grad()};
        for (const auto& [name, p] : lstm.named_parameters()) got.push_back(p.grad());
        results.push_back(got);
    }
    for (size_t i = 0; i < results[0].size(); ++i) {
        INFO("result " << i);
        CHECK(max_abs_diff(results[0][i], results[1][i]) < 1e-5f);
    }
    Generator gen(8);
    const nn::LSTM one(in, hidden, 2, false, gen), other(in, hidden, 2, false, gen), single(in, hidden, 1, false, gen);
    const Tensor input = random_tensor({batch, 1, in}, 260), state = Tensor::zeros({2, batch, hidden});
    CHECK_THROWS_WITH(one.forward(input, state, state, other.prepare(batch, steps)), Catch::Contains("another LSTM's"));
    CHECK_THROWS_WITH(one.forward(input, state, state, single.prepare(batch, steps)),
                      Catch::Contains("1 layers and directions; this LSTM has 2"));
    CHECK_THROWS_AS(one.prepare(0, steps), Error);
}
