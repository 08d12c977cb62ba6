// The basic layers: Linear, Embedding, LayerNorm, Dropout, FeedForward.
#include "test_nn_helpers.h"

#include "seqgrad/nn.h"

using namespace seqgrad;
using namespace seqgrad::nn;
using testing::random_tensor;
using testing::require_gradcheck_in_place;

namespace {

std::vector<std::string> names_of(const Module& m) {
    std::vector<std::string> names;
    for (const auto& [name, t] : m.named_parameters()) names.push_back(name);
    return names;
}

}  // namespace

TEST_CASE("Linear computes x W^T + b with PyTorch's names, shapes and initial range", "[nn][layers]") {
    Generator gen(7);
    Linear lin(3, 2, gen);
    CHECK(names_of(lin) == std::vector<std::string>{"weight", "bias"});
    CHECK(lin.weight.shape() == Shape{2, 3});
    CHECK(lin.bias.shape() == Shape{2});
    const float bound = 1.0f / std::sqrt(3.0f);
    for (const Tensor& p : lin.parameters())
        for (float v : p.to_vector()) CHECK(std::fabs(v) <= bound);

    lin.load_state_dict({{"weight", Tensor::from_vector({1, 2, 3, -1, 0, 2}, {2, 3})},
                         {"bias", Tensor::from_vector({0.5f, -1}, {2})}});
    const Tensor x = Tensor::from_vector({1, 0, -1, 2, 1, 1}, {2, 3});
    CHECK(lin.forward(x).to_vector() ==
          std::vector<float>{1 + 0 - 3 + 0.5f, -1 + 0 - 2 - 1, 2 + 2 + 3 + 0.5f, -2 + 0 + 2 - 1});

    Linear no_bias(3, 2, gen, /*bias=*/false);
    CHECK(names_of(no_bias) == std::vector<std::string>{"weight"});
    CHECK_FALSE(no_bias.bias.defined());
}

TEST_CASE("Linear's gradients pass gradcheck for input, weight and bias", "[nn][layers][gradcheck]") {
    Generator gen(8);
    Linear lin(4, 3, gen);
    const Tensor x = random_tensor({2, 5, 4}, 9);
    require_gradcheck_in_place([&] { return lin.forward(x); }, {x, lin.weight, lin.bias});
}

TEST_CASE("Embedding looks up rows of its weight and sends gradients back to them", "[nn][layers]") {
    Generator gen(10);
    Embedding emb(5, 3, gen);
    CHECK(names_of(emb) == std::vector<std::string>{"weight"});
    const IntTensor ids = IntTensor::from_vector({4, 0, 4}, {1, 3});
    const Tensor out = emb.forward(ids);
    REQUIRE(out.shape() == Shape{1, 3, 3});
    const auto w = emb.weight.to_vector();
    for (int j = 0; j < 3; ++j) {
        CHECK(out.to_vector()[static_cast<size_t>(j)] == w[static_cast<size_t>(12 + j)]);
        CHECK(out.to_vector()[static_cast<size_t>(3 + j)] == w[static_cast<size_t>(j)]);
    }
    out.sum().backward();
    const auto g = emb.weight.grad().to_vector();
    CHECK(g[0] == 1.0f);   // id 0 once
    CHECK(g[12] == 2.0f);  // id 4 twice
    CHECK(g[3] == 0.0f);   // id 1 unused
}

TEST_CASE("LayerNorm has gamma and beta, biased variance inside the square root, eps 1e-6", "[nn][layers]") {
    LayerNorm norm(4);
    CHECK(names_of(norm) == std::vector<std::string>{"gamma", "beta"});
    CHECK(norm.eps == 1e-6f);
    norm.load_state_dict({{"gamma", Tensor::from_vector({1, 2, 0.5f, -1}, {4})},
                          {"beta", Tensor::from_vector({0, 0.1f, 0.2f, 0.3f}, {4})}});
    const std::vector<float> row{0.001f, 0.0025f, 0.004f, -0.003f};  // tiny variance: eps matters
    const Tensor y = norm.forward(Tensor::from_vector(row, {1, 4}));
    double mean = 0, var = 0;
    for (float v : row) mean += v / 4.0;
    for (float v : row) var += (v - mean) * (v - mean) / 4.0;  // biased
    const double gamma[] = {1, 2, 0.5, -1}, beta[] = {0, 0.1, 0.2, 0.3};
    for (size_t i = 0; i < 4; ++i) {
        const double expected = gamma[i] * (row[i] - mean) / std::sqrt(var + 1e-6) + beta[i];
        CHECK(y.to_vector()[i] == Approx(expected).epsilon(1e-4).margin(1e-5));
    }
}

TEST_CASE("LayerNorm without bias has gamma only and adds nothing", "[nn][layers]") {
    LayerNorm plain(4, 1e-5f, false), with_beta(4, 1e-5f);
    CHECK(names_of(plain) == std::vector<std::string>{"gamma"});
    const Tensor gamma = random_tensor({4}, 3, 0.5f, 1.5f, false);
    plain.load_state_dict({{"gamma", gamma}});
    with_beta.load_state_dict({{"gamma", gamma}, {"beta", Tensor::zeros({4})}});
    const Tensor x = random_tensor({3, 4}, 4);
    CHECK(testing::max_abs_diff(plain.forward(x), with_beta.forward(x)) == 0);
    require_gradcheck_in_place([&] { return plain.forward(x); }, {x, plain.gamma});
}

TEST_CASE("LayerNorm's gradients pass gradcheck for input, gamma and beta", "[nn][layers][gradcheck]") {
    LayerNorm norm(5);
    norm.load_state_dict({{"gamma", random_tensor({5}, 11, 0.5f, 1.5f, false)},
                          {"beta", random_tensor({5}, 12, -0.5f, 0.5f, false)}});
    const Tensor x = random_tensor({3, 5}, 13);
    require_gradcheck_in_place([&] { return norm.forward(x); }, {x, norm.gamma, norm.beta});
}

TEST_CASE("Dropout zeroes and rescales in training, is the identity in evaluation, and is "
          "reproducible from its generator",
          "[nn][layers]") {
    const Tensor x = Tensor::ones({1000});
    Dropout a(0.25f, std::make_shared<Generator>(3)), b(0.25f, std::make_shared<Generator>(3));
    const auto ya = a.forward(x).to_vector();
    CHECK(ya == b.forward(x).to_vector());
    int zeros = 0;
    for (float v : ya) {
        CHECK((v == 0.0f || v == Approx(1 / 0.75f)));
        zeros += v == 0.0f;
    }
    CHECK(zeros > 200);
    CHECK(zeros < 300);
    // A shared generator advances: two draws differ.
    auto shared = std::make_shared<Generator>(5);
    Dropout c(0.5f, shared);
    CHECK(c.forward(x).to_vector() != c.forward(x).to_vector());
    c.eval();
    CHECK(c.forward(x).to_vector() == x.to_vector());
    CHECK_THROWS_AS(Dropout(1.5f), Error);
}

TEST_CASE("FeedForward is w2(activation(w1(x))) with relu or exact gelu", "[nn][layers]") {
    Generator gen(14);
    for (Activation act : {Activation::relu, Activation::gelu}) {
        FeedForward ff(4, 6, gen, act);
        CHECK(names_of(ff) == std::vector<std::string>{"w1.weight", "w1.bias", "w2.weight", "w2.bias"});
        CHECK(ff.w1->weight.shape() == Shape{6, 4});
        CHECK(ff.w2->weight.shape() == Shape{4, 6});
        const Tensor x = random_tensor({2, 3, 4}, 15, -2, 2, false);
        const Tensor hidden = linear(x, ff.w1->weight, ff.w1->bias);
        // relu and erf-gelu written out per element
        std::vector<float> activated = hidden.to_vector();
        for (float& v : activated)
            v = act == Activation::relu ? std::max(v, 0.0f)
                                        : static_cast<float>(0.5 * v * (1 + std::erf(v / std::sqrt(2.0))));
        const Tensor expected = linear(Tensor::from_vector(activated, hidden.shape()), ff.w2->weight, ff.w2->bias);
        CHECK(testing::max_abs_diff(ff.forward(x), expected) < 1e-5f);
    }
}

TEST_CASE("FeedForward and MultiHeadAttention without bias have weights only", "[nn][layers]") {
    Generator gen(5);
    FeedForward ffn(4, 8, gen, Activation::gelu, 0.0f, nullptr, false);
    CHECK(names_of(ffn) == std::vector<std::string>{"w1.weight", "w2.weight"});
    MultiHeadAttention mha(4, 2, gen, 0.0f, nullptr, false, false);
    CHECK(names_of(mha) == std::vector<std::string>{"wq.weight", "wk.weight", "wv.weight", "wo.weight"});
    const Tensor x = random_tensor({2, 3, 4}, 6);
    require_gradcheck_in_place([&] { return ffn.forward(x); }, {x, ffn.w1->weight, ffn.w2->weight});
}

TEST_CASE("FeedForward's gradients pass gradcheck", "[nn][layers][gradcheck]") {
    Generator gen(16);
    FeedForward ff(3, 5, gen, Activation::gelu);
    const Tensor x = random_tensor({2, 3}, 17);
    std::vector<Tensor> checked{x};
    for (const Tensor& p : ff.parameters()) checked.push_back(p);
    require_gradcheck_in_place([&] { return ff.forward(x); }, checked);
}

TEST_CASE("FeedForward applies dropout between the activation and w2 only in training", "[nn][layers]") {
    Generator gen(18);
    FeedForward ff(4, 8, gen, Activation::relu, 0.5f, std::make_shared<Generator>(1));
    const Tensor x = random_tensor({3, 4}, 19, -1, 1, false);
    const auto train_out = ff.forward(x).to_vector();
    ff.eval();
    const auto eval_out = ff.forward(x).to_vector();
    const Tensor expected = linear(relu(linear(x, ff.w1->weight, ff.w1->bias)), ff.w2->weight, ff.w2->bias);
    CHECK(eval_out == expected.to_vector());
    CHECK(train_out != eval_out);
}
