// The engine: recording, accumulation, retain_graph, NoGradGuard, detach, and deep graphs.
#include <map>
#include <set>

#include "helpers.h"

using namespace seqgrad;
using seqgrad::testing::max_abs_diff;
using seqgrad::testing::random_tensor;

TEST_CASE("gradients accumulate across backward calls until zero_grad", "[autograd]") {
    auto x = Tensor::from_vector({1, 2, 3}, {3}, true);
    (x * x).sum().backward();
    CHECK(x.grad().to_vector() == std::vector<float>{2, 4, 6});
    (x * 3.0f).sum().backward();
    CHECK(x.grad().to_vector() == std::vector<float>{5, 7, 9});
    x.zero_grad();
    CHECK_FALSE(x.grad().defined());
}

TEST_CASE("a tensor used twice receives the sum of both paths", "[autograd]") {
    auto x = Tensor::from_vector({2}, {1}, true);
    auto y = x * x + x * 3.0f + exp(x);  // dy/dx = 2x + 3 + e^x
    y.sum().backward();
    CHECK(x.grad().item() == Approx(4 + 3 + std::exp(2.0f)));
}

TEST_CASE("a large tensor used twice receives the sum of both paths in every element", "[autograd]") {
    // Large enough that the sum runs in pieces on the threads.
    const int64_t n = 300001;
    auto x = Tensor::ones({n}, true);
    (x * 2.0f + x * 3.0f).sum().backward();
    const float* g = x.grad().data();
    int64_t wrong = 0;
    for (int64_t i = 0; i < n; ++i) wrong += g[i] != 5.0f;
    CHECK(wrong == 0);
}

TEST_CASE("a weight made by an operation passes its gradient on, whatever its grad() holds", "[autograd]") {
    // linear's weight gradient adds into grad() only for a leaf: a computed weight's belongs to
    // the operation that made it.
    auto w0 = Tensor::from_vector({1, 2, 3, 4}, {2, 2}, true);
    auto w = w0 * 2.0f;
    w.set_grad(Tensor::zeros({2, 2}));
    const auto x = Tensor::from_vector({1, 1}, {1, 2});
    linear(x, w, Tensor()).sum().backward();
    CHECK(w0.grad().to_vector() == std::vector<float>{2, 2, 2, 2});
    CHECK(w.grad().to_vector() == std::vector<float>{0, 0, 0, 0});
}

TEST_CASE("gradients shared between inputs are not changed under one of them", "[autograd]") {
    // add gives its incoming gradient to both inputs; accumulating into one must not touch the other.
    auto a = Tensor::from_vector({1, 1}, {2}, true);
    auto b = Tensor::from_vector({1, 1}, {2}, true);
    (a + b).sum().backward();
    (a * 5.0f).sum().backward();
    CHECK(a.grad().to_vector() == std::vector<float>{6, 6});
    CHECK(b.grad().to_vector() == std::vector<float>{1, 1});
}

TEST_CASE("operations record only when an input requires grad and grad mode is on", "[autograd]") {
    auto a = Tensor::ones({2});
    auto b = Tensor::ones({2}, true);
    CHECK_FALSE((a * a).requires_grad());
    CHECK((a * b).requires_grad());
    CHECK_FALSE((a * b).is_leaf());
    {
        NoGradGuard guard;
        CHECK_FALSE(grad_enabled());
        CHECK_FALSE((a * b).requires_grad());
    }
    CHECK(grad_enabled());
    CHECK_FALSE(b.detach().requires_grad());
    CHECK(b.detach().data() == b.data());
}

TEST_CASE("backward frees the graph unless it is retained", "[autograd]") {
    auto x = Tensor::from_vector({1, 2}, {2}, true);
    auto y = (x * x).sum();
    y.backward(/*retain_graph=*/true);
    y.backward();
    CHECK(x.grad().to_vector() == std::vector<float>{4, 8});
    CHECK_THROWS_WITH(y.backward(), Catch::Contains("retain_graph"));
}

TEST_CASE("backward checks its output and gradient", "[autograd][errors]") {
    auto x = Tensor::from_vector({1, 2}, {2}, true);
    CHECK_THROWS_WITH((x * x).backward(), Catch::Contains("one element"));
    CHECK_THROWS_AS((x * x).backward(Tensor::ones({3})), Error);
    CHECK_THROWS_AS(Tensor::ones({1}).backward(), Error);  // nothing recorded
    CHECK_THROWS_WITH(Tensor().backward(), Catch::Contains("Tensor::backward: the tensor is undefined"));
    (x * x).backward(Tensor::from_vector({1, 10}, {2}));
    CHECK(x.grad().to_vector() == std::vector<float>{2, 40});
}

TEST_CASE("an output that a multi-output operation left unused gets a zero gradient", "[autograd]") {
    auto x = Tensor::from_vector({1, 2, 3, 4}, {4}, true);
    auto parts = split(x, {1, 3}, 0);
    (parts[1] * parts[1]).sum().backward();
    CHECK(x.grad().to_vector() == std::vector<float>{0, 4, 6, 8});
}

TEST_CASE("an operation may ask for no gradient of an unused output instead of zeros", "[autograd]") {
    // Two outputs, x * 2 and x * 3; backward reports what it was handed for each.
    auto x = Tensor::from_vector({1, 2}, {2}, true);
    for (const UnusedGradients unused : {UnusedGradients::zeros, UnusedGradients::undefined}) {
        std::vector<bool> defined;
        auto outputs = record(
            "pair", {x.detach() * Tensor::scalar(2), x.detach() * Tensor::scalar(3)}, {x},
            [&defined](std::span<const Tensor> grads) {
            defined = {grads[0].defined(), grads[1].defined()};
            const Tensor g0 = grads[0].defined() ? grads[0] * Tensor::scalar(2) : Tensor::zeros({2});
            const Tensor g1 = grads[1].defined() ? grads[1] * Tensor::scalar(3) : Tensor::zeros({2});
            return std::vector<Tensor>{g0 + g1};
            },
            unused);
        x.zero_grad();
        outputs[1].sum().backward();
        CHECK(defined == std::vector<bool>{unused == UnusedGradients::zeros, true});
        CHECK(x.grad().to_vector() == std::vector<float>{3, 3});
    }
}

TEST_CASE("the graph keeps an operation's output alive only while a backward function holds it", "[autograd]") {
    // Three doublings of 1 MB each, recorded by hand: the first two backward functions hold
    // nothing, the last holds its input. Of the two intermediates only the held one may stay.
    const Tensor x = random_tensor({512, 512}, 7);
    const auto doubled = [](const Tensor& input, bool hold) {
        return record("double", input.detach() * 2.0f, {input},
                      [input = hold ? input.detach() : Tensor()](const Tensor& g) {
            return std::vector<Tensor>{g * 2.0f};
        });
    };
    empty_cache();  // blocks of every size are fresh: the counts below are exact
    const int64_t before = allocator_stats().bytes_in_use;
    const int64_t one = 512 * 512 * static_cast<int64_t>(sizeof(float));
    Tensor y;
    {
        const Tensor a = doubled(x, false);
        const Tensor b = doubled(a, false);
        y = doubled(b, true);
    }
    CHECK(allocator_stats().bytes_in_use - before == 2 * one);  // y and b, not a
    y.sum().backward();
    CHECK(max_abs_diff(x.grad(), Tensor::full({512, 512}, 8.0f)) == 0.0f);
}

TEST_CASE("a chain of 100,000 operations neither overflows in backward nor when freed", "[autograd]") {
    auto x = Tensor::from_vector({1.0f}, {1}, true);
    {
        Tensor y = x;
        for (int i = 0; i < 100000; ++i) y = y * 1.0f + 0.0f;
        y.sum().backward();
        CHECK(x.grad().item() == 1.0f);
    }
    {
        // Never backpropagated: the whole graph is freed when y goes out of scope.
        Tensor y = x;
        for (int i = 0; i < 100000; ++i) y = tanh(y);
    }
    {
        Tensor y = x;
        for (int i = 0; i < 100000; ++i) y = y + 1.0f;
        y.sum().backward(/*retain_graph=*/true);  // retained graph, freed afterwards
    }
    SUCCEED();
}

TEST_CASE("a leaf can be told to require grad and an operation result cannot stop", "[autograd]") {
    auto x = Tensor::ones({2});
    x.set_requires_grad(true);
    auto y = x * 2.0f;
    CHECK_THROWS_AS(y.set_requires_grad(false), Error);
    x.set_requires_grad(false);
    CHECK_FALSE((x * 2.0f).requires_grad());
}

TEST_CASE("leaf gradients never share storage with each other or with the given gradient", "[autograd]") {
    auto a = Tensor::from_vector({1, 2}, {2}, true);
    auto b = Tensor::from_vector({3, 4}, {2}, true);
    add(a, b).sum().backward();
    a.grad().data()[0] = 100;
    CHECK(b.grad().to_vector() == std::vector<float>{1, 1});
    auto c = Tensor::from_vector({1, 2}, {2}, true);
    auto given = Tensor::from_vector({5, 6}, {2});
    reshape(c, {2, 1}).backward(Tensor::from_vector({5, 6}, {2, 1}));
    c.backward(given);
    given.data()[0] = 0;
    CHECK(c.grad().to_vector() == std::vector<float>{10, 12});
}

TEST_CASE("clone copies the data and passes the gradient through", "[autograd]") {
    auto x = Tensor::from_vector({1, 2}, {2}, true);
    auto y = x.clone();
    CHECK(y.data() != x.data());
    (y * 3.0f).sum().backward();
    CHECK(x.grad().to_vector() == std::vector<float>{3, 3});
}

TEST_CASE("the leaf hook names each reached leaf once, when its gradient is final", "[autograd]") {
    // w1 is used early in the graph (its gradient is final last), w2 twice and late, w3 never.
    auto x = Tensor::from_vector({1, 2, 3}, {3}, true);
    auto w1 = Tensor::from_vector({0.5f, -1, 2}, {3}, true);
    auto w2 = Tensor::from_vector({3}, {1}, true);
    auto w3 = Tensor::from_vector({7}, {1}, true);
    const auto build = [&] {
        Tensor h = tanh(x * w1);
        return (h * w2 + h * h * w2).sum();
    };
    build().backward();
    std::map<const TensorImpl*, std::vector<float>> expected;
    for (Tensor* t : {&x, &w1, &w2}) {
        expected[t->impl()] = t->grad().to_vector();
        t->zero_grad();
    }
    std::vector<const TensorImpl*> named;
    backward_with_leaf_hook(build(), [&](const Tensor& leaf) {
        named.push_back(leaf.impl());
        // Final when named: equal to what the whole pass gives.
        CHECK(leaf.grad().to_vector() == expected.at(leaf.impl()));
    });
    CHECK(named.size() == 3);
    CHECK(std::set<const TensorImpl*>(named.begin(), named.end()).size() == 3);  // each once
    CHECK(named.front() == w2.impl());  // the last operations' leaf comes first
    CHECK_FALSE(w3.grad().defined());
    CHECK(std::find(named.begin(), named.end(), w3.impl()) == named.end());
}

TEST_CASE("a weight used at several steps gets the sum of every step's gradient", "[autograd]") {
    // The decoder's shape of use: the same weights at each step of a recurrence (lstm_cell, linear,
    // a one-step lstm_sequence). w and w_hh have more numbers than a step's rows, so their
    // gradients are kept and summed in one product after their last use; w_out's are added into
    // grad() as each step comes. Each is compared with a graph where every step has its own copy.
    const int64_t batch = 3, in = 5, hidden = 4, steps = 3;
    const Tensor w = random_tensor({4 * hidden, in}, 1);
    const Tensor w_hh = random_tensor({4 * hidden, hidden}, 2);
    const Tensor w_out = random_tensor({2, hidden}, 3);
    std::vector<Tensor> xs;
    for (int64_t t = 0; t < steps; ++t) xs.push_back(random_tensor({batch, in}, 10 + t, -1, 1, false));
    const auto copy = [](const Tensor& t) { return Tensor::from_vector(t.to_vector(), t.shape(), true); };
    const auto loss_of = [&](std::vector<Tensor> weights) {  // w, w_hh, w_out for each step
        LstmState state{Tensor::zeros({batch, hidden}), Tensor::zeros({batch, hidden})};
        Tensor loss = Tensor::zeros({});
        for (int64_t t = 0; t < steps; ++t) {
            const Tensor* mine = &weights[static_cast<size_t>(3 * t)];
            const Tensor& x = xs[static_cast<size_t>(t)];
            state = lstm_cell(x, state, mine[0], mine[1], Tensor(), Tensor());
            const Tensor gates = reshape(linear(x, mine[0], Tensor()), {batch, 1, 4 * hidden});
            const LstmSequence layer = lstm_sequence(gates, state.h, state.c, mine[1], {}, false);
            state = {layer.h, layer.c};
            loss = loss + (linear(layer.h, mine[2], Tensor()) * static_cast<float>(t + 1)).sum();
        }
        return loss;
    };
    const std::vector<Tensor> shared{w, w_hh, w_out, w, w_hh, w_out, w, w_hh, w_out};
    std::vector<Tensor> copies;
    for (int64_t t = 0; t < steps; ++t)
        for (const Tensor* one : {&w, &w_hh, &w_out}) copies.push_back(copy(*one));
    loss_of(copies).backward();
    std::map<const TensorImpl*, Tensor> expected;
    for (int k = 0; k < 3; ++k) {
        Tensor sum = Tensor::zeros(shared[static_cast<size_t>(k)].shape());
        for (int64_t t = 0; t < steps; ++t) sum = sum + copies[static_cast<size_t>(3 * t + k)].grad();
        expected[shared[static_cast<size_t>(k)].impl()] = sum;
    }

    loss_of(shared).backward();
    for (int k = 0; k < 3; ++k) {
        const Tensor& weight = shared[static_cast<size_t>(k)];
        INFO("weight " << k);
        REQUIRE(weight.grad().defined());
        CHECK(max_abs_diff(weight.grad(), expected.at(weight.impl())) < 1e-5f);
    }

    // A grad() the caller holds is a value: the next backward's sum goes into a new tensor.
    const Tensor held = w.grad();
    const std::vector<float> before = held.to_vector();
    loss_of(shared).backward();
    CHECK(held.to_vector() == before);
    for (size_t i = 0; i < before.size(); ++i) CHECK(w.grad().data()[i] == Approx(2 * before[i]).margin(1e-5));

    // With the leaf hook, a weight is named once its kept rows have been summed into grad().
    for (Tensor weight : {w, w_hh, w_out}) weight.zero_grad();
    int named = 0;
    backward_with_leaf_hook(loss_of(shared), [&](const Tensor& leaf) {
        ++named;
        REQUIRE(leaf.grad().defined());
        CHECK(max_abs_diff(leaf.grad(), expected.at(leaf.impl())) < 1e-5f);
    });
    CHECK(named == 3);
}
