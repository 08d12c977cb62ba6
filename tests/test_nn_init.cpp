// Initialisation: Xavier uniform, and init_xavier_uniform over every matrix of a model.
#include "helpers.h"

#include "seqgrad/nn.h"

using namespace seqgrad;
using namespace seqgrad::nn;

TEST_CASE("xavier_uniform fills in place within gain * sqrt(6 / (fan_in + fan_out))", "[nn][init]") {
    Tensor w = Tensor::zeros({30, 20}, true);
    const float* storage = w.data();
    Generator gen(1);
    xavier_uniform(w, gen, 2.0f);
    CHECK(w.data() == storage);
    const float bound = 2.0f * std::sqrt(6.0f / 50.0f);
    float largest = 0;
    double mean = 0;
    for (float v : w.to_vector()) {
        CHECK(std::fabs(v) <= bound);
        largest = std::max(largest, std::fabs(v));
        mean += v / 600.0;
    }
    CHECK(largest > 0.95f * bound);  // uses the whole range
    CHECK(std::fabs(mean) < 0.1 * bound);
    // Extents beyond the second multiply both fans.
    Tensor k = Tensor::zeros({4, 3, 5});
    xavier_uniform(k, gen);
    for (float v : k.to_vector()) CHECK(std::fabs(v) <= std::sqrt(6.0f / (15 + 20)));
    CHECK_THROWS_AS(xavier_uniform(Tensor::zeros({4}), gen), Error);
}

TEST_CASE("init_xavier_uniform re-draws every matrix and leaves vectors alone, reproducibly", "[nn][init]") {
    auto make = [] {
        Generator gen(2);
        return std::make_shared<FeedForward>(4, 6, gen);
    };
    auto a = make(), b = make();
    const auto bias_before = a->w1->bias.to_vector();
    const auto weight_before = a->w1->weight.to_vector();
    Generator gen_a(3), gen_b(3);
    init_xavier_uniform(*a, gen_a);
    init_xavier_uniform(*b, gen_b);
    CHECK(a->w1->bias.to_vector() == bias_before);
    CHECK(a->w1->weight.to_vector() != weight_before);
    for (float v : a->w2->weight.to_vector()) CHECK(std::fabs(v) <= std::sqrt(6.0f / 10.0f));
    const auto pa = a->parameters(), pb = b->parameters();
    for (size_t i = 0; i < pa.size(); ++i) CHECK(pa[i].to_vector() == pb[i].to_vector());
}
