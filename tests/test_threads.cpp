// set_num_threads governs all parallel work, and results are bit-identical run to run.
#include "helpers.h"

using namespace seqgrad;

namespace {

std::vector<float> step_gradients() {
    Generator gen(11);
    auto w = Tensor::uniform({256, 128}, -0.1f, 0.1f, gen, true);
    auto gamma = Tensor::ones({256}, true);
    auto beta = Tensor::zeros({256}, true);
    auto x = Tensor::uniform({64, 20, 128}, -1.0f, 1.0f, gen);
    std::vector<int64_t> ids(64 * 20);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(gen.below(256));
    auto h = layer_norm(tanh(linear(x, w, Tensor())), gamma, beta, 1e-6f);
    auto loss = cross_entropy(softmax(h, -1) * 10.0f, IntTensor::from_vector(ids, {64, 20}), 0, 0.1f);
    loss.backward();
    std::vector<float> out = w.grad().to_vector();
    for (float v : gamma.grad().to_vector()) out.push_back(v);
    out.push_back(loss.item());
    return out;
}

}  // namespace

TEST_CASE("set_num_threads sets the count and rejects zero", "[threads]") {
    const int before = get_num_threads();
    set_num_threads(1);
    CHECK(get_num_threads() == 1);
    CHECK_THROWS_AS(set_num_threads(0), Error);
    set_num_threads(before);
}

TEST_CASE("results are bit-identical run to run for a fixed thread count", "[threads]") {
    const int before = get_num_threads();
    for (int threads : {1, 2}) {
        set_num_threads(threads);
        const auto first = step_gradients();
        const auto second = step_gradients();
        CHECK(first == second);
    }
    set_num_threads(before);
}
