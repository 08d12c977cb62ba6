// Positional encodings: the sinusoidal table (a buffer), the learned table (a parameter), and
// rotary position embedding.
#include "test_nn_helpers.h"

#include "seqgrad/nn.h"

using namespace seqgrad;
using namespace seqgrad::nn;
using Catch::Matchers::Contains;
using testing::random_tensor;

namespace {

// sum over the last axis of a * b, for [.., d] tensors: [..]
Tensor dot_last(const Tensor& a, const Tensor& b) { return sum(mul(a, b), {-1}); }

}  // namespace

TEST_CASE("the sinusoidal table is sin at even and cos at odd features of p / 10000^(2i/d)", "[nn][positional]") {
    const int64_t len = 50, d = 8;
    const Tensor pe = sinusoidal_table(len, d);
    REQUIRE(pe.shape() == Shape{len, d});
    for (int64_t p = 0; p < len; ++p)
        for (int64_t i = 0; i < d / 2; ++i) {
            const double angle = static_cast<double>(p) / std::pow(10000.0, 2.0 * static_cast<double>(i) / d);
            INFO("p " << p << " i " << i);
            CHECK(pe.data()[p * d + 2 * i] == Approx(std::sin(angle)).margin(2e-5));
            CHECK(pe.data()[p * d + 2 * i + 1] == Approx(std::cos(angle)).margin(2e-5));
        }
    CHECK_THROWS_WITH(sinusoidal_table(4, 7), Contains("even"));
}

TEST_CASE("the sinusoidal encoding is a buffer added to x[:, :T], not a parameter", "[nn][positional]") {
    PositionalEncoding pos(6, 10);
    CHECK(pos.named_parameters().empty());
    CHECK(pos.state_dict().empty());
    REQUIRE(pos.named_buffers().size() == 1);
    CHECK(pos.named_buffers()[0].first == "pe");
    const Tensor x = random_tensor({2, 4, 6}, 1);
    const Tensor y = pos.forward(x);
    const Tensor pe = sinusoidal_table(10, 6);
    for (int64_t b = 0; b < 2; ++b)
        for (int64_t t = 0; t < 4; ++t)
            for (int64_t j = 0; j < 6; ++j)
                CHECK(y.data()[(b * 4 + t) * 6 + j] == x.data()[(b * 4 + t) * 6 + j] + pe.data()[t * 6 + j]);
    CHECK_THROWS_WITH(pos.forward(random_tensor({1, 11, 6}, 2)), Contains("exceeds max_len 10"));
}

TEST_CASE("the learned encoding is the parameter 'weight' [max_len, d], trained only where used", "[nn][positional]") {
    PositionalEncoding pos(4, 6, PositionalKind::learned);
    REQUIRE(pos.named_parameters().size() == 1);
    CHECK(pos.named_parameters()[0].first == "weight");
    CHECK(pos.table.shape() == Shape{6, 4});
    CHECK(pos.named_buffers().empty());
    CHECK(pos.table.to_vector() == sinusoidal_table(6, 4).to_vector());  // its starting point
    const Tensor x = random_tensor({3, 2, 4}, 3);
    pos.forward(x).sum().backward();
    const auto g = pos.table.grad().to_vector();
    for (size_t i = 0; i < g.size(); ++i) CHECK(g[i] == (i < 8 ? 3.0f : 0.0f));  // rows 0, 1; batch of 3
}

TEST_CASE("rotary embedding makes q . k depend only on the difference of positions", "[nn][positional]") {
    const Tensor q = random_tensor({1, 1, 8}, 4, -1, 1, false);  // [B, T=1, d]
    const Tensor k = random_tensor({1, 1, 8}, 5, -1, 1, false);
    auto score = [&](int64_t m, int64_t n) { return dot_last(apply_rotary(q, m), apply_rotary(k, n)).item(); };
    for (int64_t shift : {1, 7, 40}) {
        CHECK(score(3, 5) == Approx(score(3 + shift, 5 + shift)).margin(1e-4));
        CHECK(score(9, 2) == Approx(score(9 + shift, 2 + shift)).margin(1e-4));
    }
    // ... and does depend on that difference.
    CHECK(std::fabs(score(3, 5) - score(3, 6)) > 1e-3);
    // Position 0 is the identity; rotations keep the norm.
    CHECK(testing::max_abs_diff(apply_rotary(q, 0), q) < 1e-7f);
    const Tensor rotated = apply_rotary(q, 13);
    CHECK(dot_last(rotated, rotated).item() == Approx(dot_last(q, q).item()).epsilon(1e-5));
}

TEST_CASE("rotary embedding of a sequence rotates row t by position offset + t", "[nn][positional]") {
    const Tensor x = random_tensor({2, 3, 5, 4}, 6, -1, 1, false);  // [B, H, T, d]
    const Tensor whole = apply_rotary(x, 2);
    for (int64_t t = 0; t < 5; ++t) {
        const Tensor row = apply_rotary(slice(x, 2, t, t + 1), 2 + t);
        CHECK(testing::max_abs_diff(slice(whole, 2, t, t + 1), row) < 1e-6f);
    }
    // d = 4: features (0, 1) turn by p, features (2, 3) by p / 100.
    const float p = 3, c = std::cos(p), s = std::sin(p);
    const Tensor unit = Tensor::from_vector({1, 0, 0, 1}, {1, 4});
    const Tensor turned = apply_rotary(unit, 3);
    CHECK(turned.to_vector()[0] == Approx(c).margin(1e-6));
    CHECK(turned.to_vector()[1] == Approx(s).margin(1e-6));
    CHECK(turned.to_vector()[2] == Approx(-std::sin(p / 100)).margin(1e-6));
    CHECK(turned.to_vector()[3] == Approx(std::cos(p / 100)).margin(1e-6));
}

TEST_CASE("rotary embedding passes gradcheck", "[nn][positional][gradcheck]") {
    testing::require_gradcheck([](const std::vector<Tensor>& in) { return apply_rotary(in[0], 3); },
                               {random_tensor({2, 3, 6}, 7)});
}
