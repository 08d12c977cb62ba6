// The operation profile: which operations a pass ran, how often, and that the times add up.
#include "helpers.h"

using namespace seqgrad;

namespace {

// A small pass: two products, a relu, a sum; `x` is used twice, so two gradients meet at it.
Tensor small_pass(const Tensor& x, const Tensor& w) {
    Tensor h = relu(matmul(x, w));
    return sum(add(matmul(h, w), x));
}

}  // namespace

TEST_CASE("a profile names every forward and backward operation with its calls", "[profile]") {
    Generator gen(3);
    Tensor x = Tensor::uniform({64, 64}, -1.0f, 1.0f, gen, true);
    Tensor w = Tensor::uniform({64, 64}, -1.0f, 1.0f, gen, true);
    OpProfile profile;
    {
        const OpProfileGuard guard(profile);
        small_pass(x, w).backward();
    }
    const auto forward = profile.forward(), backward = profile.backward();
    REQUIRE(forward.count("matmul") == 1);
    CHECK(forward.at("matmul").calls == 2);
    CHECK(forward.at("relu").calls == 1);
    CHECK(forward.at("add").calls == 1);
    CHECK(forward.at("sum").calls == 1);
    CHECK(forward.size() == 4);
    REQUIRE(backward.count("matmul") == 1);
    CHECK(backward.at("matmul").calls == 2);
    CHECK(backward.at("relu").calls == 1);
    CHECK(backward.at("add").calls == 1);
    CHECK(backward.at("sum").calls == 1);
    CHECK(backward.size() == 4);
    CHECK(profile.accumulate().calls == 5);  // once after each node's backward
    for (const auto& [name, timing] : forward) CHECK(timing.seconds >= 0);
    for (const auto& [name, timing] : backward) CHECK(timing.seconds >= 0);
}

TEST_CASE("a profile's times are the pass's: large products dominate, nothing outside counts", "[profile]") {
    Generator gen(5);
    Tensor a = Tensor::uniform({384, 384}, -1.0f, 1.0f, gen, true);
    Tensor small = Tensor::uniform({4}, -1.0f, 1.0f, gen, true);
    OpProfile profile;
    double inside = 0;
    {
        const OpProfileGuard guard(profile);
        const double start = profile_clock();
        Tensor big = matmul(matmul(a, a), a);  // two 384^3 products
        Tensor tiny = mul(small, small);       // four multiplications
        inside = profile_clock() - start;
        (sum(big) + sum(tiny)).backward();
    }
    // Work done with no profile installed is not noted.
    Tensor outside = matmul(a, a);
    const auto forward = profile.forward();
    CHECK(forward.at("matmul").calls == 2);
    CHECK(forward.at("matmul").seconds > 10 * forward.at("mul").seconds);
    CHECK(forward.at("matmul").seconds + forward.at("mul").seconds <= inside);
    CHECK(profile.backward().at("matmul").seconds > profile.backward().at("mul").seconds);

    profile.clear();
    CHECK(profile.forward().empty());
    CHECK(profile.backward().empty());
    CHECK(profile.accumulate().calls == 0);
}

TEST_CASE("profile guards nest and restore the one before", "[profile]") {
    Generator gen(7);
    Tensor x = Tensor::uniform({8}, -1.0f, 1.0f, gen, true);
    OpProfile outer, inner;
    {
        const OpProfileGuard a(outer);
        Tensor y = relu(x);
        {
            const OpProfileGuard b(inner);
            Tensor z = exp(y);
        }
        Tensor t = tanh(y);
    }
    CHECK(outer.forward().count("relu") == 1);
    CHECK(outer.forward().count("tanh") == 1);
    CHECK(outer.forward().count("exp") == 0);
    CHECK(inner.forward().size() == 1);
    CHECK(inner.forward().count("exp") == 1);
}

TEST_CASE("op_kind sorts the operations a training step records", "[profile]") {
    CHECK(std::string(op_kind("linear")) == "products");
    CHECK(std::string(op_kind("matmul")) == "products");
    CHECK(std::string(op_kind("attention")) == "attention");
    CHECK(std::string(op_kind("layer_norm")) == "layer_norm");
    CHECK(std::string(op_kind("dropout")) == "dropout");
    CHECK(std::string(op_kind("relu")) == "elementwise");
    CHECK(std::string(op_kind("mul_scalar")) == "elementwise");
    CHECK(std::string(op_kind("cross_entropy")) == "softmax_loss");
    CHECK(std::string(op_kind("embedding")) == "embedding");
    CHECK(std::string(op_kind("reshape")) == "shape");
    CHECK(std::string(op_kind("sum")) == "reduce");
    CHECK(std::string(op_kind("lstm_sequence")) == "lstm");
    CHECK(std::string(op_kind("no such operation")) == "other");
}
