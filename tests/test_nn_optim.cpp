// Optimizers against their update formulas computed here in double, state save/load, gradient
// clipping and the Noam schedule.
#include "helpers.h"

#include <functional>
#include <memory>
#include <sstream>
#include <string>

#include "seqgrad/nn.h"

using namespace seqgrad;
using namespace seqgrad::nn;
using Catch::Matchers::Contains;

namespace {

// A tiny problem: loss = sum((p - target)^2 * scale), so grad = 2 (p - target) * scale.
struct Problem {
    Tensor p = Tensor::from_vector({0.5f, -1.0f, 2.0f}, {3}, true);
    Tensor q = Tensor::from_vector({1.0f, 0.25f}, {2}, true);
    const std::vector<double> target{1.0, 0.5, -1.0}, scale{1.0, 3.0, 0.1};

    NamedTensors named() const { return {{"layer.p", p}, {"q", q}}; }
    // Gradients for p only (q keeps an undefined gradient, to be skipped).
    void backward() {
        p.zero_grad();
        const Tensor t = Tensor::from_vector({1.0f, 0.5f, -1.0f}, {3});
        const Tensor s = Tensor::from_vector({1.0f, 3.0f, 0.1f}, {3});
        sum(mul(mul(sub(p, t), sub(p, t)), s)).backward();
    }
    std::vector<double> grad_of(const std::vector<double>& values) const {
        std::vector<double> g;
        for (size_t i = 0; i < values.size(); ++i) g.push_back(2 * (values[i] - target[i]) * scale[i]);
        return g;
    }
};

std::vector<double> as_double(const Tensor& t) {
    std::vector<double> out;
    for (float v : t.to_vector()) out.push_back(v);
    return out;
}

void check_close(const Tensor& got, const std::vector<double>& expected, double tolerance = 1e-6) {
    REQUIRE(got.numel() == static_cast<int64_t>(expected.size()));
    for (size_t i = 0; i < expected.size(); ++i) CHECK(got.to_vector()[i] == Approx(expected[i]).margin(tolerance));
}

// Runs `steps` steps of the formula `update(values, grads, t)` in double from p's values.
std::vector<double> reference(
    Problem& problem, int steps,
    const std::function<void(std::vector<double>&, const std::vector<double>&, int)>& update) {
    std::vector<double> values = as_double(problem.p);
    for (int t = 1; t <= steps; ++t) update(values, problem.grad_of(values), t);
    return values;
}

}  // namespace

TEST_CASE("Adam follows PyTorch's update for three steps and skips parameters without a gradient", "[nn][optim]") {
    Problem problem;
    AdamOptions options;
    options.lr = 0.1;
    options.beta1 = 0.9;
    options.beta2 = 0.98;
    options.eps = 1e-9;
    const double b1 = 0.9, b2 = 0.98, lr = 0.1, eps = 1e-9;
    std::vector<double> m(3, 0.0), v(3, 0.0);
    const auto expected = reference(problem, 3, [&](std::vector<double>& p, const std::vector<double>& g, int t) {
        for (size_t i = 0; i < p.size(); ++i) {
            m[i] = b1 * m[i] + (1 - b1) * g[i];
            v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
            p[i] -= lr / (1 - std::pow(b1, t)) * m[i] / (std::sqrt(v[i]) / std::sqrt(1 - std::pow(b2, t)) + eps);
        }
    });
    Adam adam(problem.named(), options);
    const auto q_before = problem.q.to_vector();
    for (int step = 0; step < 3; ++step) {
        problem.backward();
        adam.step();
    }
    check_close(problem.p, expected);
    CHECK(problem.q.to_vector() == q_before);
    const auto state = adam.state();
    CHECK(state.at("step.layer.p").item() == 3.0f);
    CHECK(state.count("exp_avg.q") == 0);  // never updated, no state
    check_close(state.at("exp_avg.layer.p"), m);
    check_close(state.at("exp_avg_sq.layer.p"), v);
}

TEST_CASE("Adam's update of a large parameter is the same on one thread and on two", "[nn][optim][threads]") {
    // Large enough for the update to be split across the pool.
    auto run = [](int threads) {
        set_num_threads(threads);
        Tensor w = testing::random_tensor({300, 700}, 21);
        AdamOptions options;
        options.weight_decay = 0.01;
        AdamW adam({{"w", w}}, options);
        for (int step = 0; step < 3; ++step) {
            adam.zero_grad();
            (w * w * 0.5f).sum().backward();
            adam.step();
        }
        return w.to_vector();
    };
    std::vector<float> one, two;
    {
        const testing::ThreadCountScope restore;
        one = run(1);
        two = run(2);
    }
    CHECK(one == two);
}

namespace {

// Parameters of `shapes` (sizes that put the threads' chunk boundaries inside parameters and next
// to tiny ones), three steps of random gradients (none for parameter 2: skipped, its state never
// made), on 1, 2 and 3 threads: make(params) over all of them in one optimizer and over each alone
// must leave every parameter the same bits. `also(joint, each)` checks the state after.
template <typename Make, typename Also>
void one_pass_equals_each(const std::vector<Shape>& shapes, uint64_t seed, const std::string& what, const Make& make,
                          const Also& also) {
    const testing::ThreadCountScope restore;
    auto parameters = [&] {
        NamedTensors params;
        for (size_t i = 0; i < shapes.size(); ++i)
            params.emplace_back("p" + std::to_string(i), testing::random_tensor(shapes[i], seed + i));
        return params;
    };
    auto gradients = [&](const NamedTensors& params, int step) {
        for (size_t i = 0; i < params.size(); ++i) {
            Tensor p = params[i].second;
            if (i != 2) p.set_grad(testing::random_tensor(shapes[i], 100 * step + i));
        }
    };
    for (int threads : {1, 2, 3}) {
        set_num_threads(threads);
        const NamedTensors together = parameters(), alone = parameters();
        auto joint = make(together);
        std::vector<decltype(make(together))> each;
        for (const auto& named : alone) each.push_back(make(NamedTensors{named}));
        for (int step = 1; step <= 3; ++step) {
            gradients(together, step);
            gradients(alone, step);
            joint->step();
            for (auto& optimizer : each) optimizer->step();
        }
        for (size_t i = 0; i < shapes.size(); ++i) {
            INFO(what << ", " << threads << " threads, parameter " << i);
            CHECK(together[i].second.to_vector() == alone[i].second.to_vector());
        }
        also(*joint, each);
    }
}

}  // namespace

TEST_CASE("Adam updates many parameters in one pass exactly as it updates each alone", "[nn][optim][threads]") {
    // Matrices and vectors: decay_matrices_only decays some and not others.
    AdamOptions options;
    options.lr = 0.01;
    options.weight_decay = 0.1;
    options.decay_matrices_only = true;
    one_pass_equals_each(
        {{1}, {200, 201}, {7}, {150, 220}, {3}, {5, 5}, {40000}}, 40, "AdamW",
        [&](const NamedTensors& params) { return std::make_unique<AdamW>(params, options); },
        [](const AdamW& joint, const std::vector<std::unique_ptr<AdamW>>& each) {
        CHECK(joint.state().at("exp_avg_sq.p6").to_vector() == each[6]->state().at("exp_avg_sq.p6").to_vector());
        CHECK(joint.state().count("exp_avg.p2") == 0);
        });
}

TEST_CASE("SGD updates many parameters in one pass exactly as it updates each alone", "[nn][optim][threads]") {
    // Every variant: with and without momentum (its buffer's first step and the later ones),
    // Nesterov, dampening, weight decay.
    for (double momentum : {0.0, 0.9})
        for (bool nesterov : {false, true})
            for (double weight_decay : {0.0, 0.01}) {
                if (nesterov && momentum == 0) continue;
                SGDOptions options;
                options.lr = 0.05;
                options.momentum = momentum;
                options.dampening = nesterov ? 0.0 : 0.1;
                options.nesterov = nesterov;
                options.weight_decay = weight_decay;
                std::ostringstream what;
                what << "SGD momentum " << momentum << " nesterov " << nesterov << " weight decay " << weight_decay;
                one_pass_equals_each(
                    {{1}, {200, 201}, {7}, {150, 220}, {3}, {40000}}, 60, what.str(),
                    [&](const NamedTensors& params) { return std::make_unique<SGD>(params, options); },
                    [](const SGD& joint, const std::vector<std::unique_ptr<SGD>>&) {
                    CHECK(joint.state().count("momentum_buffer.p2") == 0);
                    });
            }
}

TEST_CASE("an optimizer refuses a name twice and a tensor under two names", "[nn][optim][errors]") {
    Tensor w = Tensor::zeros({2, 2}, true), b = Tensor::zeros({2}, true);
    CHECK_THROWS_WITH(Adam({{"w", w}, {"w", b}}, AdamOptions{}), Contains("parameter name 'w' appears twice"));
    CHECK_THROWS_WITH(AdamW({{"w", w}, {"b", b}, {"tied", w}}, AdamOptions{}),
                      Contains("parameters 'w' and 'tied' are the same tensor"));
    CHECK_THROWS_WITH(SGD({{"w", w}, {"alias", w.detach()}}, SGDOptions{}),
                      Contains("parameters 'w' and 'alias' are the same tensor"));
    const Adam fine({{"w", w}, {"b", b}, {"empty", Tensor::zeros({0}, true)}, {"also_empty", Tensor::zeros({0}, true)}},
                    AdamOptions{});
    CHECK(fine.params().size() == 4);
}

TEST_CASE("Adam's weight decay is L2 on the gradient and AdamW's is decoupled", "[nn][optim]") {
    const double lr = 0.05, wd = 0.2, b1 = 0.9, b2 = 0.999, eps = 1e-8;
    AdamOptions options;
    options.lr = lr;
    options.weight_decay = wd;
    for (bool decoupled : {false, true}) {
        INFO("decoupled " << decoupled);
        Problem problem;
        std::vector<double> m(3, 0.0), v(3, 0.0);
        const auto expected = reference(problem, 3,
                                        [&](std::vector<double>& p, const std::vector<double>& grad, int t) {
            for (size_t i = 0; i < p.size(); ++i) {
                double g = grad[i];
                if (decoupled) p[i] *= 1 - lr * wd;
                else g += wd * p[i];
                m[i] = b1 * m[i] + (1 - b1) * g;
                v[i] = b2 * v[i] + (1 - b2) * g * g;
                p[i] -= lr / (1 - std::pow(b1, t)) * m[i] / (std::sqrt(v[i]) / std::sqrt(1 - std::pow(b2, t)) + eps);
            }
        });
        std::unique_ptr<Optimizer> opt;
        if (decoupled) opt = std::make_unique<AdamW>(problem.named(), options);
        else opt = std::make_unique<Adam>(problem.named(), options);
        for (int step = 0; step < 3; ++step) {
            problem.backward();
            opt->step();
        }
        check_close(problem.p, expected);
    }
}

TEST_CASE("SGD with momentum follows PyTorch: the buffer starts as the first gradient", "[nn][optim]") {
    for (bool nesterov : {false, true})
        for (double dampening : {0.0, 0.25}) {
            if (nesterov && dampening != 0) continue;  // Nesterov momentum takes no dampening
            INFO("nesterov " << nesterov << " dampening " << dampening);
            Problem problem;
            SGDOptions options;
            options.lr = 0.05;
            options.momentum = 0.9;
            options.weight_decay = 0.01;
            options.dampening = dampening;
            options.nesterov = nesterov;
            std::vector<double> buf(3, 0.0);
            const auto expected = reference(problem, 3,
                                            [&](std::vector<double>& p, const std::vector<double>& grad, int t) {
                for (size_t i = 0; i < p.size(); ++i) {
                    const double g = grad[i] + 0.01 * p[i];
                    buf[i] = t == 1 ? g : 0.9 * buf[i] + (1 - dampening) * g;
                    p[i] -= 0.05 * (nesterov ? g + 0.9 * buf[i] : buf[i]);
                }
            });
            SGD sgd(problem.named(), options);
            for (int step = 0; step < 3; ++step) {
                problem.backward();
                sgd.step();
            }
            check_close(problem.p, expected);
            check_close(sgd.state().at("momentum_buffer.layer.p"), buf);
        }
    Problem plain;
    SGDOptions options;
    options.lr = 0.5;
    SGD sgd(plain.named(), options);
    plain.backward();
    const auto before = as_double(plain.p);
    const auto grad = plain.grad_of(before);
    sgd.step();
    check_close(plain.p, {before[0] - 0.5 * grad[0], before[1] - 0.5 * grad[1], before[2] - 0.5 * grad[2]});
    CHECK(sgd.state().empty());
}

TEST_CASE("an optimizer's saved state resumes training bit for bit", "[nn][optim]") {
    auto run = [](bool via_saved_state) {
        Problem problem;
        AdamOptions options;
        options.lr = 0.02;
        auto adam = std::make_unique<Adam>(problem.named(), options);
        for (int step = 0; step < 2; ++step) {
            problem.backward();
            adam->step();
        }
        if (via_saved_state) {
            const auto saved = adam->state();
            adam = std::make_unique<Adam>(problem.named(), options);
            adam->load_state(saved);
        }
        for (int step = 0; step < 3; ++step) {
            problem.backward();
            adam->step();
        }
        return problem.p.to_vector();
    };
    const auto continued = run(false), resumed = run(true);
    CHECK(continued == resumed);
    // ... and a fresh optimizer without the state does not resume the same way.
    Problem problem;
    AdamOptions options;
    options.lr = 0.02;
    Adam first(problem.named(), options);
    for (int step = 0; step < 2; ++step) {
        problem.backward();
        first.step();
    }
    Adam fresh(problem.named(), options);
    for (int step = 0; step < 3; ++step) {
        problem.backward();
        fresh.step();
    }
    CHECK(problem.p.to_vector() != continued);
}

TEST_CASE("the state returned is a copy: later steps do not change it", "[nn][optim]") {
    Problem problem;
    Adam adam(problem.named(), AdamOptions{});
    problem.backward();
    adam.step();
    const auto saved = adam.state();
    const auto exp_avg = saved.at("exp_avg.layer.p").to_vector();
    problem.backward();
    adam.step();
    CHECK(saved.at("exp_avg.layer.p").to_vector() == exp_avg);
    CHECK(saved.at("step.layer.p").item() == 1.0f);
}

TEST_CASE("load_state reports every unknown, misshaped and incomplete entry and changes nothing", "[nn][optim]") {
    Problem problem;
    Adam adam(problem.named(), AdamOptions{});
    problem.backward();
    adam.step();
    const auto good = adam.state();
    auto bad = good;
    bad.erase("exp_avg_sq.layer.p");
    bad["exp_avg.q"] = Tensor::zeros({3});  // q is [2]
    bad["momentum_buffer.layer.p"] = Tensor::zeros({3});
    bad["exp_avg.nope"] = Tensor::zeros({3});
    bad["nodot"] = Tensor::zeros({1});
    try {
        adam.load_state(bad);
        FAIL("no error");
    } catch (const Error& e) {
        const std::string message = e.what();
        INFO(message);
        CHECK_THAT(message, Contains("5 problems"));
        CHECK_THAT(message, Contains("missing: exp_avg_sq.layer.p"));
        CHECK_THAT(message, Contains("wrong shape: exp_avg.q expects [2], got [3]"));
        CHECK_THAT(message, Contains("unexpected: momentum_buffer.layer.p"));
        CHECK_THAT(message, Contains("unexpected: exp_avg.nope"));
        CHECK_THAT(message, Contains("unexpected: nodot"));
    }
    const auto after = adam.state();
    REQUIRE(after.size() == good.size());
    for (const auto& [name, t] : good) CHECK(after.at(name).to_vector() == t.to_vector());
}

TEST_CASE("clip_grad_norm returns the total norm and scales only when it exceeds max_norm", "[nn][optim]") {
    Tensor a = Tensor::zeros({2}, true), b = Tensor::zeros({1}, true), none = Tensor::zeros({3}, true);
    a.set_grad(Tensor::from_vector({3, 0}, {2}));
    b.set_grad(Tensor::from_vector({4}, {1}));
    CHECK(clip_grad_norm({a, b, none}, 10.0f) == Approx(5.0f));
    CHECK(a.grad().to_vector() == std::vector<float>{3, 0});  // below max_norm: untouched
    CHECK(clip_grad_norm({a, b, none}, 1.0f) == Approx(5.0f));
    const float coefficient = 1.0f / (5.0f + 1e-6f);
    CHECK(a.grad().to_vector()[0] == Approx(3 * coefficient));
    CHECK(b.grad().to_vector()[0] == Approx(4 * coefficient));
    CHECK_FALSE(none.grad().defined());
    CHECK(clip_grad_norm({a, b}, 1.0f) == Approx(1.0f).epsilon(1e-5));
}

TEST_CASE("clip_grad_norm over many gradients: the norm in double, the same on any number of threads",
          "[nn][optim][threads]") {
    const std::vector<Shape> shapes{{3}, {100, 170}, {1}, {40000}, {9, 9}};
    std::vector<std::vector<float>> scaled;
    std::vector<float> norms;
    {
        const testing::ThreadCountScope restore;
        for (int threads : {1, 2, 3}) {
            set_num_threads(threads);
            std::vector<Tensor> params;
            double sum = 0;
            for (size_t i = 0; i < shapes.size(); ++i) {
                Tensor p = Tensor::zeros(shapes[i], true);
                p.set_grad(testing::random_tensor(shapes[i], 70 + i));
                for (float g : p.grad().to_vector()) sum += static_cast<double>(g) * g;
                params.push_back(p);
            }
            params.push_back(Tensor::zeros({4}, true));  // no gradient: left out, left undefined
            const std::vector<std::vector<float>> before_clip = [&] {
                std::vector<std::vector<float>> out;
                for (size_t i = 0; i < shapes.size(); ++i) out.push_back(params[i].grad().to_vector());
                return out;
            }();
            const float norm = clip_grad_norm(params, 1.0f);
            CHECK(norm == Approx(std::sqrt(sum)).epsilon(1e-7));
            const float coefficient = 1.0f / (norm + 1e-6f);
            std::vector<float> all;
            for (size_t i = 0; i < shapes.size(); ++i) {
                const auto after = params[i].grad().to_vector();
                REQUIRE(after.size() == before_clip[i].size());
                for (size_t j = 0; j < after.size(); ++j) REQUIRE(after[j] == before_clip[i][j] * coefficient);
                all.insert(all.end(), after.begin(), after.end());
            }
            CHECK_FALSE(params.back().grad().defined());
            scaled.push_back(all);
            norms.push_back(norm);
        }
    }
    CHECK(norms[0] == norms[1]);
    CHECK(norms[0] == norms[2]);
    CHECK(scaled[0] == scaled[1]);
    CHECK(scaled[0] == scaled[2]);
}

TEST_CASE("clip_grad_norm scales each gradient once even when backward made them share storage", "[nn][optim]") {
    Tensor a = Tensor::from_vector({1, 2}, {2}, true), b = Tensor::from_vector({3, 4}, {2}, true);
    add(a, b).backward(Tensor::from_vector({3, 4}, {2}));  // both gradients are [3, 4]
    CHECK(clip_grad_norm({a, b}, 1.0f) == Approx(std::sqrt(50.0f)));
    const float coefficient = 1.0f / (std::sqrt(50.0f) + 1e-6f);
    CHECK(a.grad().to_vector()[1] == Approx(4 * coefficient));
    CHECK(b.grad().to_vector()[1] == Approx(4 * coefficient));
}

TEST_CASE("the Noam schedule warms up linearly, peaks at warmup, then decays as 1/sqrt(step)", "[nn][optim]") {
    const NoamSchedule noam{512, 4000, 1.0};
    // 512^-0.5 * 4000^-1.5 * step while warming up, 512^-0.5 * step^-0.5 after.
    CHECK(noam.rate(1) == Approx(1.746928107421711e-7).epsilon(1e-12));
    CHECK(noam.rate(2000) == Approx(2000 * 1.746928107421711e-7).epsilon(1e-12));
    CHECK(noam.rate(4000) == Approx(6.987712429686844e-4).epsilon(1e-12));
    CHECK(noam.rate(16000) == Approx(3.493856214843422e-4).epsilon(1e-12));
    const NoamSchedule scaled{512, 4000, 2.0};
    CHECK(scaled.rate(16000) == Approx(2 * 3.493856214843422e-4).epsilon(1e-12));
    CHECK_THROWS_AS(noam.rate(0), Error);
}

TEST_CASE("the cosine schedule warms up linearly, then falls as a half cosine to min_lr and stays", "[nn][optim]") {
    const CosineSchedule cosine{1e-3, 1e-4, 100, 2000};
    // Step s is iteration i = s - 1: lr (i + 1) / (warmup + 1) while i < warmup.
    CHECK(cosine.rate(1) == Approx(1e-3 / 101).epsilon(1e-12));
    CHECK(cosine.rate(100) == Approx(1e-3 * 100 / 101).epsilon(1e-12));
    CHECK(cosine.rate(101) == Approx(1e-3).epsilon(1e-12));                         // i = warmup: the peak
    CHECK(cosine.rate(1051) == Approx(1e-4 + 0.5 * (1e-3 - 1e-4)).epsilon(1e-12));  // halfway down
    CHECK(cosine.rate(2001) == Approx(1e-4).epsilon(1e-12));
    CHECK(cosine.rate(5000) == 1e-4);
    for (int64_t s = 102; s <= 2001; ++s) CHECK(cosine.rate(s) <= cosine.rate(s - 1));
    const CosineSchedule no_warmup{2.0, 0.0, 0, 4};
    CHECK(no_warmup.rate(1) == 2.0);
    CHECK(no_warmup.rate(3) == Approx(1.0).epsilon(1e-12));
    CHECK_THROWS_AS(cosine.rate(0), Error);
    CHECK_THROWS_AS((CosineSchedule{1e-4, 1e-3, 10, 100}.rate(1)), Error);  // min_lr above lr

    // By a position instead of steps: the same warm-up, then the cosine at that position.
    CHECK(cosine.rate(50, 0.7) == cosine.rate(50));
    CHECK(cosine.rate(1051, 0.5) == cosine.rate(1051));
    CHECK(cosine.rate(300, 0.5) == cosine.rate(1051));
    CHECK(cosine.rate(300, 1.0) == 1e-4);
    CHECK(cosine.rate(300, 1.5) == 1e-4);  // clamped
    CHECK(cosine.rate(300, -1.0) == 1e-3);
}

TEST_CASE("decay_matrices_only decays the matrices and leaves vectors (biases, norms) alone", "[nn][optim]") {
    Tensor matrix = Tensor::from_vector({1.0f, -2.0f, 0.5f, 3.0f}, {2, 2}, true);
    Tensor vector = Tensor::from_vector({1.0f, -2.0f}, {2}, true);
    AdamOptions options;
    options.lr = 0.1;
    options.weight_decay = 0.5;
    options.decay_matrices_only = true;
    AdamW only(NamedTensors{{"w", matrix}, {"b", vector}}, options);
    options.decay_matrices_only = false;
    Tensor matrix2 = Tensor::from_vector(matrix.to_vector(), {2, 2}, true);
    Tensor vector2 = Tensor::from_vector(vector.to_vector(), {2}, true);
    AdamW all(NamedTensors{{"w", matrix2}, {"b", vector2}}, options);
    // Zero gradients: the only change is the decay, p <- p (1 - lr wd).
    for (Tensor t : {matrix, vector, matrix2, vector2}) t.set_grad(Tensor::zeros(t.shape()));
    only.step();
    all.step();
    const std::vector<float> decayed{0.95f, -1.9f, 0.475f, 2.85f};
    for (size_t i = 0; i < decayed.size(); ++i) CHECK(matrix.to_vector()[i] == Approx(decayed[i]).epsilon(1e-6));
    CHECK(vector.to_vector() == std::vector<float>{1.0f, -2.0f});
    CHECK(matrix2.to_vector() == matrix.to_vector());
    CHECK(vector2.to_vector()[0] == Approx(0.95f).epsilon(1e-6));
    CHECK(vector2.to_vector()[1] == Approx(-1.9f).epsilon(1e-6));
}

TEST_CASE("WeightAverage follows its formula, swaps in place and restores its state", "[nn][optim]") {
    Tensor p = Tensor::from_vector({1.0f, -2.0f}, {2}, true);
    const NamedTensors named{{"p", p}};
    WeightAverage average(named, 0.5);
    // Values of p before each update, and the average computed here in double.
    const std::vector<std::vector<double>> values{{3.0, 0.0}, {-1.0, 4.0}, {2.0, 2.0}, {0.5, -0.5}};
    std::vector<double> expected{1.0, -2.0};  // the average starts as a copy
    for (size_t n = 0; n < values.size(); ++n) {
        p.data()[0] = static_cast<float>(values[n][0]);
        p.data()[1] = static_cast<float>(values[n][1]);
        average.update();
        const double d = std::min(0.5, (1.0 + static_cast<double>(n)) / (10.0 + static_cast<double>(n)));
        for (size_t j = 0; j < 2; ++j) expected[j] = d * expected[j] + (1 - d) * values[n][j];
    }
    CHECK(average.updates() == 4);
    const std::map<std::string, Tensor> state = average.state();
    REQUIRE(state.count("average.p") == 1);
    CHECK_THAT(as_double(state.at("average.p")), Catch::Matchers::Approx(expected).epsilon(1e-6));
    CHECK(state.at("average_updates").item() == 4.0f);

    // swap() exchanges the values in place: p holds the average, and swapping back restores p.
    const float* storage = p.data();
    average.swap();
    CHECK(p.data() == storage);
    CHECK_THAT(as_double(p), Catch::Matchers::Approx(expected).epsilon(1e-6));
    average.swap();
    CHECK(p.to_vector() == std::vector<float>{0.5f, -0.5f});

    // A fresh average given the saved state continues exactly as this one does.
    WeightAverage restored(named, 0.5);
    restored.load_state(state);
    CHECK(restored.updates() == 4);
    average.update();
    restored.update();
    CHECK(average.state().at("average.p").to_vector() == restored.state().at("average.p").to_vector());
}

TEST_CASE("WeightAverage over many parameters in one pass equals each parameter's own", "[nn][optim][threads]") {
    const std::vector<Shape> shapes{{1}, {200, 201}, {7}, {150, 220}, {0}, {40000}};
    const testing::ThreadCountScope restore;
    for (int threads : {1, 2, 3}) {
        set_num_threads(threads);
        NamedTensors together, alone;
        for (size_t i = 0; i < shapes.size(); ++i) {
            together.emplace_back("p" + std::to_string(i), testing::random_tensor(shapes[i], 60 + i));
            alone.emplace_back("p" + std::to_string(i), testing::random_tensor(shapes[i], 60 + i));
        }
        WeightAverage joint(together, 0.9);
        std::vector<std::unique_ptr<WeightAverage>> each;
        for (const auto& named : alone) each.push_back(std::make_unique<WeightAverage>(NamedTensors{named}, 0.9));
        for (int step = 1; step <= 3; ++step) {
            for (size_t i = 0; i < shapes.size(); ++i) {  // the same new values on both sides
                const Tensor next = testing::random_tensor(shapes[i], 1000 * step + i);
                std::copy_n(next.data(), next.numel(), together[i].second.data());
                std::copy_n(next.data(), next.numel(), alone[i].second.data());
            }
            joint.update();
            for (auto& average : each) average->update();
        }
        joint.swap();
        for (auto& average : each) average->swap();
        for (size_t i = 0; i < shapes.size(); ++i) {
            INFO(threads << " threads, parameter " << i);
            CHECK(together[i].second.to_vector() == alone[i].second.to_vector());  // the averages, swapped in
            const std::string key = "average.p" + std::to_string(i);
            CHECK(joint.state().at(key).to_vector() == each[i]->state().at(key).to_vector());  // the values
        }
    }
}

TEST_CASE("WeightAverage rejects a bad decay and a state that does not fit", "[nn][optim][errors]") {
    Tensor p = Tensor::zeros({3}, true);
    CHECK_THROWS_WITH(WeightAverage({{"p", p}}, 1.0), Contains("decay"));
    CHECK_THROWS_WITH(WeightAverage({{"p", p}}, 0.0), Contains("decay"));
    WeightAverage average({{"p", p}}, 0.9);
    const std::vector<float> before = average.state().at("average.p").to_vector();
    std::map<std::string, Tensor> bad{{"average.p", Tensor::zeros({4})}, {"average.q", Tensor::zeros({3})}};
    CHECK_THROWS_WITH(average.load_state(bad), Contains("wrong shape: average.p") &&
                                                   Contains("unexpected: average.q") &&
                                                   Contains("missing: average_updates"));
    CHECK(average.state().at("average.p").to_vector() == before);  // nothing changed
    CHECK(average.updates() == 0);
    // One update pass over all tensors: a name or a tensor listed twice is refused.
    CHECK_THROWS_WITH(WeightAverage({{"p", p}, {"p", Tensor::zeros({2})}}, 0.9),
                      Contains("parameter name 'p' appears twice"));
    CHECK_THROWS_WITH(WeightAverage({{"p", p}, {"q", p}}, 0.9), Contains("parameters 'p' and 'q' are the same tensor"));
}
