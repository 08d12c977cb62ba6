// Elementwise operations: values, broadcasting, gradients (gradcheck) and errors.
#include <functional>

#include "helpers.h"

using namespace seqgrad;
using testing::random_tensor;
using testing::require_gradcheck;

namespace {

// Values in [-1, 1] pushed at least 0.1 away from zero, for functions with a kink there.
Tensor away_from_zero(const Shape& shape, uint64_t seed) {
    Tensor t = random_tensor(shape, seed);
    for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] += t.data()[i] >= 0 ? 0.1f : -0.1f;
    return t;
}

// Pairs of shapes that broadcast, size-1 axes and rank differences included.
const std::vector<std::pair<Shape, Shape>> kBroadcastCases = {
    {{3}, {3}},       {{2, 3}, {2, 3}}, {{2, 3}, {3}}, {{3}, {2, 3}},    {{2, 1}, {1, 3}},       {{4, 1, 3}, {2, 1}},
    {{2, 3, 4}, {1}}, {{}, {2, 3}},     {{2, 3}, {}},  {{1, 1}, {2, 2}}, {{5, 1, 2}, {5, 3, 1}},
};

}  // namespace

TEST_CASE("binary operations broadcast as NumPy does", "[ops][elementwise]") {
    auto a = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
    auto row = Tensor::from_vector({10, 20, 30}, {3});
    auto col = Tensor::from_vector({100, 200}, {2, 1});
    CHECK((a + row).to_vector() == std::vector<float>{11, 22, 33, 14, 25, 36});
    CHECK((a - col).to_vector() == std::vector<float>{-99, -98, -97, -196, -195, -194});
    CHECK((a * row).to_vector() == std::vector<float>{10, 40, 90, 40, 100, 180});
    CHECK((col / a).shape() == Shape{2, 3});
    CHECK((row + col).shape() == Shape{2, 3});
    CHECK((row + col).to_vector() == std::vector<float>{110, 120, 130, 210, 220, 230});
    CHECK((2.0f - a).to_vector() == std::vector<float>{1, 0, -1, -2, -3, -4});
    CHECK((a / 2.0f).to_vector()[1] == 1.0f);
    CHECK((6.0f / a).to_vector()[2] == Approx(2.0f));
    CHECK(broadcast_shapes({4, 1, 3}, {2, 1}, "test") == Shape{4, 2, 3});
}

TEST_CASE("add, sub, mul and div pass gradcheck on broadcast shapes", "[ops][elementwise][gradcheck]") {
    for (const auto& [sa, sb] : kBroadcastCases) {
        INFO("shapes " << sa << " and " << sb);
        auto a = random_tensor(sa, 1);
        auto b = random_tensor(sb, 2, 0.5f, 2.0f);  // away from zero, for div
        require_gradcheck([](const std::vector<Tensor>& in) { return add(in[0], in[1]); }, {a, b});
        require_gradcheck([](const std::vector<Tensor>& in) { return sub(in[0], in[1]); }, {a, b});
        require_gradcheck([](const std::vector<Tensor>& in) { return mul(in[0], in[1]); }, {a, b});
        require_gradcheck([](const std::vector<Tensor>& in) { return div(in[0], in[1]); }, {a, b});
    }
}

TEST_CASE("a gradient reaches only the operands that require it", "[ops][elementwise]") {
    auto a = random_tensor({2, 3}, 1);
    auto b = random_tensor({3}, 2, -1, 1, /*requires_grad=*/false);
    mul(a, b).sum().backward();
    CHECK(a.grad().defined());
    CHECK_FALSE(b.grad().defined());
    require_gradcheck([](const std::vector<Tensor>& in) { return div(in[0], in[1]); },
                      {a, random_tensor({3}, 3, 1, 2, false)});
}

TEST_CASE("negation and the scalar forms pass gradcheck", "[ops][elementwise][gradcheck]") {
    for (const Shape& s : {Shape{}, Shape{4}, Shape{2, 1, 3}}) {
        auto x = random_tensor(s, 5, 0.5f, 2.0f);
        require_gradcheck([](const std::vector<Tensor>& in) { return -in[0]; }, {x});
        require_gradcheck([](const std::vector<Tensor>& in) { return in[0] + 3.0f; }, {x});
        require_gradcheck([](const std::vector<Tensor>& in) { return 3.0f - in[0]; }, {x});
        require_gradcheck([](const std::vector<Tensor>& in) { return in[0] * -2.5f; }, {x});
        require_gradcheck([](const std::vector<Tensor>& in) { return in[0] / 4.0f; }, {x});
        require_gradcheck([](const std::vector<Tensor>& in) { return 2.0f / in[0]; }, {x});
    }
}

TEST_CASE("unary functions compute their values", "[ops][elementwise]") {
    auto x = Tensor::from_vector({-2.0f, -0.5f, 0.0f, 0.5f, 2.0f}, {5});
    for (int64_t i = 0; i < 5; ++i) {
        const float v = x.data()[i];
        CHECK(exp(x).data()[i] == Approx(std::exp(v)));
        CHECK(tanh(x).data()[i] == Approx(std::tanh(v)));
        CHECK(sigmoid(x).data()[i] == Approx(1 / (1 + std::exp(-v))));
        CHECK(relu(x).data()[i] == (v > 0 ? v : 0));
        CHECK(gelu(x).data()[i] == Approx(0.5 * v * (1 + std::erf(v / std::sqrt(2.0)))).margin(1e-7));
    }
    auto p = Tensor::from_vector({1.0f, 4.0f, 9.0f}, {3});
    CHECK(sqrt(p).to_vector() == std::vector<float>{1, 2, 3});
    CHECK(log(p).data()[1] == Approx(std::log(4.0f)));
    CHECK(pow(p, 1.5f).data()[1] == Approx(8.0f));
    CHECK(gelu(Tensor::from_vector({1.0f}, {1})).item() == Approx(0.8413447f));  // PyTorch's value
}

// Past |x| = 13.2 erf's exp(-x^2 / 2) is below the floats gelu's exponential computes (it stops at
// e^-87): the values and slopes there must still be gelu's limits, 0 and x on the far sides.
TEST_CASE("gelu and its slope hold from -30 to 30, where erf's exponential underflows", "[ops][elementwise]") {
    std::vector<float> values;
    for (float v = -30.0f; v <= 30.0f; v += 0.37f) values.push_back(v);
    const auto n = static_cast<int64_t>(values.size());
    const Tensor x = Tensor::from_vector(values, {n}, true);
    const Tensor y = gelu(x);
    y.backward(Tensor::ones({n}));
    for (int64_t i = 0; i < n; ++i) {
        const double v = values[static_cast<size_t>(i)];
        const double cdf = 0.5 * (1 + std::erf(v / std::sqrt(2.0)));
        const double slope = cdf + v * std::exp(-v * v / 2) / std::sqrt(2 * M_PI);
        INFO("x = " << v);
        CHECK(y.data()[i] == Approx(v * cdf).margin(2e-7 * std::max(1.0, std::fabs(v))));
        CHECK(x.grad().data()[i] == Approx(slope).margin(2e-7 * std::max(1.0, std::fabs(v))));
    }
}

TEST_CASE("gelu's gradient is the exact derivative, Phi(x) + x phi(x)", "[ops][elementwise]") {
    // Checked against the derivative in double at 4001 points over [-10, 10] (the tails included,
    // where the slope reaches 0 and 1), tighter than gradcheck's finite differences can tell.
    std::vector<float> values;
    for (int i = -2000; i <= 2000; ++i) values.push_back(static_cast<float>(i) / 200.0f);
    auto x = Tensor::from_vector(values, {static_cast<int64_t>(values.size())}, true);
    const auto g = random_tensor(x.shape(), 12, -2.0f, 2.0f, false);
    gelu(x).backward(g);
    double worst = 0;
    for (size_t i = 0; i < values.size(); ++i) {
        const double v = values[i];
        const double slope =
            0.5 * (1 + std::erf(v / std::sqrt(2.0))) + v * std::exp(-0.5 * v * v) / std::sqrt(2 * M_PI);
        worst = std::max(worst, std::abs(x.grad().data()[i] - g.data()[i] * slope));
    }
    CHECK(worst < 2e-6);
}

TEST_CASE("unary functions pass gradcheck", "[ops][elementwise][gradcheck]") {
    for (const Shape& s : {Shape{}, Shape{7}, Shape{2, 3, 1}}) {
        INFO("shape " << s);
        auto x = random_tensor(s, 9, -2.0f, 2.0f);
        auto positive = random_tensor(s, 10, 0.5f, 3.0f);
        auto kinked = away_from_zero(s, 11);
        require_gradcheck([](const std::vector<Tensor>& in) { return exp(in[0]); }, {x});
        require_gradcheck([](const std::vector<Tensor>& in) { return tanh(in[0]); }, {x});
        require_gradcheck([](const std::vector<Tensor>& in) { return sigmoid(in[0]); }, {x});
        require_gradcheck([](const std::vector<Tensor>& in) { return gelu(in[0]); }, {x});
        require_gradcheck([](const std::vector<Tensor>& in) { return relu(in[0]); }, {kinked});
        require_gradcheck([](const std::vector<Tensor>& in) { return log(in[0]); }, {positive});
        require_gradcheck([](const std::vector<Tensor>& in) { return sqrt(in[0]); }, {positive});
        require_gradcheck([](const std::vector<Tensor>& in) { return pow(in[0], 3.0f); }, {x});
        require_gradcheck([](const std::vector<Tensor>& in) { return pow(in[0], -1.5f); }, {positive});
    }
}

TEST_CASE("operands that do not broadcast are an error naming the shapes", "[ops][elementwise][errors]") {
    auto a = Tensor::zeros({2, 3});
    auto b = Tensor::zeros({4});
    CHECK_THROWS_AS(a + b, Error);
    CHECK_THROWS_WITH(a * b, Catch::Contains("mul") && Catch::Contains("[2, 3]") && Catch::Contains("[4]"));
    CHECK_THROWS_WITH(a / Tensor::zeros({3, 3}), Catch::Contains("div"));
    CHECK_THROWS_AS(exp(Tensor()), Error);
}

TEST_CASE("sum_to reduces a gradient back over broadcast axes", "[ops][elementwise]") {
    auto g = Tensor::ones({4, 2, 3});
    CHECK(sum_to(g, {2, 3}).to_vector() == std::vector<float>(6, 4.0f));
    CHECK(sum_to(g, {2, 1}).to_vector() == std::vector<float>(2, 12.0f));
    CHECK(sum_to(g, {}).item() == 24.0f);
}

TEST_CASE("exp, sigmoid, tanh, gelu and softmax give NaN for NaN and the limits for infinities", "[ops][elementwise]") {
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    const Tensor x = Tensor::from_vector({nan, inf, -inf, 0.0f}, {4});
    const std::vector<float> e = seqgrad::exp(x).to_vector(), s = sigmoid(x).to_vector(),
                             t = seqgrad::tanh(x).to_vector();
    CHECK(std::isnan(e[0]));
    CHECK(e[1] == inf);
    CHECK(e[2] == 0.0f);
    CHECK(e[3] == 1.0f);
    CHECK(std::isnan(s[0]));
    CHECK(s[1] == 1.0f);
    CHECK(s[2] == 0.0f);
    CHECK(std::isnan(t[0]));
    CHECK(t[1] == 1.0f);
    CHECK(t[2] == -1.0f);
    CHECK(std::isnan(gelu(x).to_vector()[0]));
    for (const float v : softmax(Tensor::from_vector({1.0f, nan, 2.0f}, {3})).to_vector()) CHECK(std::isnan(v));
}

TEST_CASE("elementwise operations hold only what their derivatives read", "[ops][elementwise]") {
    // Each operation's operands are fresh 64 KB outputs of linear (whose backward holds its input,
    // not its output): after the operands' handles go, what is left in use is the result, plus
    // the operand or result the derivative reads.
    Tensor x = random_tensor({64, 32}, 60), w = random_tensor({256, 32}, 61);
    const int64_t one = 64 * 256 * static_cast<int64_t>(sizeof(float));
    struct Case {
        const char* name;
        std::function<Tensor(const Tensor&, const Tensor&)> op;
        int64_t held;           // blocks of 64 KB in use once only the result's handle is left
        bool constant = false;  // b a tensor that needs no gradient (a mask, a scale)
    };
    const std::vector<Case> cases = {
        {"add", [](const Tensor& a, const Tensor& b) { return a + b; }, 1},
        {"sub", [](const Tensor& a, const Tensor& b) { return a - b; }, 1},
        {"mul", [](const Tensor& a, const Tensor& b) { return a * b; }, 3},
        {"mul by a constant", [](const Tensor& a, const Tensor& b) { return a * b; }, 2, true},
        {"a constant times", [](const Tensor& a, const Tensor& b) { return b * a; }, 2, true},
        {"div", [](const Tensor& a, const Tensor& b) { return div(a, b); }, 2},
        {"div by a constant", [](const Tensor& a, const Tensor& b) { return div(a, b); }, 2, true},
        {"a constant over", [](const Tensor& a, const Tensor& b) { return div(b, a); }, 2, true},
        {"mul_scalar", [](const Tensor& a, const Tensor&) { return a * 3.0f; }, 1},
        {"add_scalar", [](const Tensor& a, const Tensor&) { return a + 3.0f; }, 1},
        {"neg", [](const Tensor& a, const Tensor&) { return -a; }, 1},
        {"tanh", [](const Tensor& a, const Tensor&) { return tanh(a); }, 1},
        {"sigmoid", [](const Tensor& a, const Tensor&) { return sigmoid(a); }, 1},
        {"exp", [](const Tensor& a, const Tensor&) { return exp(a); }, 1},
        {"relu", [](const Tensor& a, const Tensor&) { return relu(a); }, 1},
    };
    for (const Case& c : cases) {
        INFO(c.name);
        empty_cache();  // blocks of every size are fresh: the counts below are exact
        const int64_t before = allocator_stats().bytes_in_use;
        Tensor y;
        {
            Generator gen(62);
            const Tensor a = linear(x, w, Tensor());
            const Tensor b = c.constant ? Tensor::uniform({64, 256}, 1, 2, gen) : linear(x, w, Tensor());
            y = c.op(a, b);
        }
        CHECK(allocator_stats().bytes_in_use - before == c.held * one);
        y.sum().backward();  // the edges without data still carry the gradient to the leaves
        CHECK(x.grad().defined());
        x.zero_grad();
        w.zero_grad();
    }
}
