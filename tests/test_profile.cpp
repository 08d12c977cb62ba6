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
    // On the machine's clock, each time a duration: a start and an end read in order.
    for (const auto& [name, timing] : forward) CHECK(timing.seconds >= 0);
    for (const auto& [name, timing] : backward) CHECK(timing.seconds >= 0);
}

namespace {

// A clock of the test's own: it reads `fake_now`, then moves it on by `fake_tick`, so the times a
// profile notes are the test's and not the machine's (load, the sanitizers).
double fake_now = 0, fake_tick = 0;
double fake_clock() {
    const double t = fake_now;
    fake_now += fake_tick;
    return t;
}

}  // namespace

TEST_CASE("a forward operation's time runs from the one before to it, and nothing outside counts", "[profile]") {
    Generator gen(5);
    Tensor a = Tensor::uniform({8, 8}, -1.0f, 1.0f, gen, true);
    Tensor small = Tensor::uniform({4}, -1.0f, 1.0f, gen, true);
    fake_now = 100, fake_tick = 0;
    OpProfile profile(fake_clock);
    {
        const OpProfileGuard guard(profile);  // marks: 100
        fake_now += 2;
        Tensor m = matmul(a, a);  // 2 s
        fake_now += 0.25;
        Tensor tiny = mul(small, small);  // 0.25 s
        fake_now += 3;
        Tensor m2 = matmul(m, a);  // 3 s more
    }
    fake_now += 50;
    Tensor outside = matmul(a, a);  // no profile installed: not noted
    const auto forward = profile.forward();
    REQUIRE(forward.size() == 2);
    CHECK(forward.at("matmul").calls == 2);
    CHECK(forward.at("matmul").seconds == 5.0);
    CHECK(forward.at("mul").calls == 1);
    CHECK(forward.at("mul").seconds == 0.25);

    profile.clear();
    CHECK(profile.forward().empty());
    CHECK(profile.backward().empty());
    CHECK(profile.accumulate().calls == 0);
}

TEST_CASE("each node's backward is timed once, and the sums of gradients apart", "[profile]") {
    Generator gen(6);
    Tensor x = Tensor::uniform({8, 8}, -1.0f, 1.0f, gen, true);
    Tensor w = Tensor::uniform({8, 8}, -1.0f, 1.0f, gen, true);
    Tensor loss = small_pass(x, w);
    fake_now = 0, fake_tick = 1;  // every reading of the clock one second after the one before
    OpProfile profile(fake_clock);
    {
        const OpProfileGuard guard(profile);
        loss.backward();
    }
    // A node's time is one reading before its backward and one after: one second each; each sum
    // of gradients, read after the node's second reading and once more, another.
    const auto backward = profile.backward();
    REQUIRE(backward.size() == 4);
    for (const auto& [name, timing] : backward) {
        INFO(name);
        CHECK(timing.seconds == static_cast<double>(timing.calls));
    }
    CHECK(backward.at("matmul").calls == 2);
    CHECK(profile.accumulate().calls == 5);
    CHECK(profile.accumulate().seconds == 5.0);
    CHECK(profile.forward().empty());  // nothing was recorded while it was installed
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
