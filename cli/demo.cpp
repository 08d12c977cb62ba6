// `seqgrad demo`: a one-minute look at the engine. A small network learns to add two digits
// (embeddings, a GELU layer, cross-entropy, plain gradient descent), and shows what it learned.
#include <cstdio>

#include "commands.h"
#include "seqgrad/core.h"

namespace seqgrad::cli {
namespace {

struct DemoOptions {
    int steps = 300;
    float learning_rate = 0.3f;
    uint64_t seed = 1;
};

void run_demo(const DemoOptions& options) {
    check(options.steps > 0, "demo", "--steps must be positive, got ", options.steps);
    check(options.learning_rate > 0, "demo", "--lr must be positive, got ", options.learning_rate);
    Generator gen(options.seed);
    // Every pair (a, b) of digits; the answer a + b is one of 19 classes.
    std::vector<int64_t> pairs, sums;
    for (int64_t a = 0; a < 10; ++a)
        for (int64_t b = 0; b < 10; ++b) {
            pairs.insert(pairs.end(), {a, b});
            sums.push_back(a + b);
        }
    const IntTensor inputs = IntTensor::from_vector(pairs, {100, 2});
    const IntTensor targets = IntTensor::from_vector(sums, {100});

    const float s1 = std::sqrt(6.0f / (32 + 64)), s2 = std::sqrt(6.0f / (64 + 19));
    std::vector<Tensor> params = {Tensor::normal({10, 16}, 0.0f, 1.0f, gen, true),  // digit embeddings
                                  Tensor::uniform({64, 32}, -s1, s1, gen, true), Tensor::zeros({64}, true),
                                  Tensor::uniform({19, 64}, -s2, s2, gen, true), Tensor::zeros({19}, true)};
    auto forward = [&] {
        auto pair_vectors = reshape(embedding(params[0], inputs), {100, 32});  // [pairs, 2 * 16]
        auto hidden = gelu(linear(pair_vectors, params[1], params[2]));
        return linear(hidden, params[3], params[4]);  // [pairs, 19]
    };

    std::printf("Learning a + b for every pair of digits (%d steps of gradient descent)\n", options.steps);
    for (int step = 1; step <= options.steps; ++step) {
        auto loss = cross_entropy(forward(), targets);
        loss.backward();
        {
            NoGradGuard no_grad;
            for (Tensor& p : params) {
                float* w = p.data();
                const float* g = p.grad().data();
                for (int64_t i = 0; i < p.numel(); ++i) w[i] -= options.learning_rate * g[i];
                p.zero_grad();
            }
        }
        if (step == 1 || step % 50 == 0) std::printf("  step %4d  loss %.4f\n", step, loss.item());
    }

    NoGradGuard no_grad;
    const IntTensor predicted = argmax(forward(), -1);
    int correct = 0;
    for (int64_t i = 0; i < 100; ++i) correct += predicted.data()[i] == sums[static_cast<size_t>(i)];
    std::printf("It now adds %d of the 100 pairs correctly. Some answers:\n", correct);
    for (int64_t i : {7, 23, 38, 56, 64, 99})
        std::printf("  %lld + %lld = %lld\n", static_cast<long long>(pairs[static_cast<size_t>(2 * i)]),
                    static_cast<long long>(pairs[static_cast<size_t>(2 * i + 1)]),
                    static_cast<long long>(predicted.data()[i]));
}

}  // namespace

void add_demo_command(CLI::App& app) {
    auto options = std::make_shared<DemoOptions>();
    CLI::App* demo = app.add_subcommand("demo", "Train a tiny network with the engine and show what it learned");
    demo->add_option("--steps", options->steps, "Gradient-descent steps")->capture_default_str();
    demo->add_option("--lr", options->learning_rate, "Learning rate")->capture_default_str();
    demo->add_option("--seed", options->seed, "Random seed")->capture_default_str();
    demo->callback([options] { run_demo(*options); });
}

}  // namespace seqgrad::cli
