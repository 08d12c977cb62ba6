// Helpers for the nn tests: a finite-difference check of a module's own parameters, and reading
// the PyTorch parity fixtures (tests/fixtures/*.safetensors, format in make_fixtures.py).
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <sstream>
#include <string>

#include "helpers.h"
#include "seqgrad/core/safetensors.h"

namespace seqgrad::testing {

// A module reads the parameter tensors it owns, so its gradients are checked in place
// (gradcheck_in_place: the same check as gradcheck, perturbing the tensors themselves).
// gradcheck_in_place, and then a check that it could have failed: a backward that returned zeros
// for a tensor passes when its largest gradient is below atol / (1 - rtol), so each tensor's
// largest gradient must be at least twice atol. Small gradients call for a smaller atol, down to
// the floor that float32 rounding sets (gradcheck.h; about 2e-5 for the models' losses here).
inline void require_gradcheck_in_place(const std::function<Tensor()>& f, const std::vector<Tensor>& tensors,
                                       const GradcheckOptions& options = {}) {
    const GradcheckResult result = gradcheck_in_place(f, tensors, options);
    INFO(result.message);
    REQUIRE(result.ok);
    for (size_t i = 0; i < tensors.size(); ++i) {
        float largest = 0;
        for (float g : tensors[i].grad().to_vector()) largest = std::max(largest, std::fabs(g));
        INFO("tensor " << i << " of shape " << tensors[i].shape() << ": largest gradient " << largest << ", atol "
                       << options.atol);
        CHECK(largest >= 2 * options.atol);
    }
}

// |got - expected| <= atol + rtol * |expected| elementwise (by default the parity bound of docs/parity.md).
inline void require_close(const Tensor& got, const Tensor& expected, const std::string& what, float atol = 1e-4f,
                          float rtol = 1e-3f) {
    INFO(what);
    REQUIRE(got.defined());
    REQUIRE(got.shape() == expected.shape());
    for (int64_t i = 0; i < got.numel(); ++i) {
        const float g = got.data()[i], e = expected.data()[i];
        INFO("element " << i << ": got " << g << ", expected " << e);
        REQUIRE(std::fabs(g - e) <= atol + rtol * std::fabs(e));
    }
}

// A parity fixture: the file, its config, and its parameters (every tensor that is neither
// "input.*" nor "expect.*").
struct Fixture {
    SafetensorsFile file;
    nlohmann::json config;
    std::map<std::string, Tensor> parameters;
};

inline Fixture load_fixture(const std::string& name) {
    Fixture fx;
    fx.file = SafetensorsFile::load(std::string(SEQGRAD_FIXTURES_DIR) + "/" + name);
    fx.config = nlohmann::json::parse(fx.file.metadata("config"));
    for (const std::string& n : fx.file.names())
        if (n.rfind("input.", 0) != 0 && n.rfind("expect.", 0) != 0) fx.parameters.emplace(n, fx.file.tensor(n));
    return fx;
}

// A float leaf with the same values, requiring grad (fixture inputs whose gradients are checked).
inline Tensor leaf_copy(const Tensor& t) { return Tensor::from_vector(t.to_vector(), t.shape(), true); }

// A recurrent model's decoding (start_decoding, decode_step: its decoder's weights laid out once for
// the steps) against step() from encode(): the same logits at every step, the next token each
// step's argmax, with rows reordered midway as a beam search does.
template <class Model>
void check_decode_steps(Model& model, const IntTensor& src, int64_t steps) {
    NoGradGuard no_grad;
    const int64_t batch = src.size(0);
    auto decoding = model.start_decoding(src);
    auto state = model.encode(src);
    IntTensor tokens = IntTensor::full({batch}, 1);  // <s>
    for (int64_t t = 0; t < steps; ++t) {
        INFO("step " << t);
        const Tensor logits = model.decode_step(*decoding, tokens);
        const auto next = model.step(tokens, state);
        CHECK(max_abs_diff(logits, next.logits) <= 1e-5f);
        state = next.state;
        tokens = argmax(next.logits, -1);
        if (t == 1) {  // the rows in reverse, as a beam search reorders hypotheses
            std::vector<int64_t> rows, reordered;
            for (int64_t b = batch - 1; b >= 0; --b) {
                rows.push_back(b);
                reordered.push_back(tokens.data()[b]);
            }
            decoding->select_rows(rows);
            state = state.select(rows);
            tokens = IntTensor::from_vector(reordered, {batch});
        }
    }
}

// A recurrent model's training forward with teacher forcing `ratio` < 1 (its decoder's weights
// laid out once for every step) against the same steps by hand through step(): each next input
// the true token or the step's own prediction, by the model's draws. Logits and every parameter's
// gradient agree; the draws (from a generator seeded `seed`) must have taken both branches.
template <class Model>
void check_teacher_forcing(Model& model, const IntTensor& src, const IntTensor& tgt_in, float ratio, uint64_t seed) {
    const int64_t batch = tgt_in.size(0), steps = tgt_in.size(1);
    model.train();
    model.set_teacher_forcing_ratio(ratio);
    const Generator::State draws = Generator(seed).state();
    model.random().set_state(draws);
    const Tensor logits = model.forward(src, tgt_in);  // [B, T, V]
    const Tensor r = random_tensor(logits.shape(), 17, -1, 1, false);
    (logits * r).sum().backward();
    std::vector<Tensor> grads;
    for (auto& [name, p] : model.named_parameters()) {
        grads.push_back(p.grad().clone());
        Tensor(p).zero_grad();
    }

    Generator coin(0);
    coin.set_state(draws);
    auto state = model.encode(src);
    IntTensor tokens = tgt_in.slice_last(0, 1).reshape({batch});
    std::vector<Tensor> by_hand;
    bool read_true = false, read_predicted = false;
    for (int64_t t = 0; t < steps; ++t) {
        const auto next = model.step(tokens, state);
        state = next.state;
        by_hand.push_back(next.logits);
        if (t + 1 == steps) break;
        const bool true_token = coin.uniform() < ratio;
        (true_token ? read_true : read_predicted) = true;
        tokens = true_token ? tgt_in.slice_last(t + 1, t + 2).reshape({batch}) : argmax(next.logits.detach(), -1);
    }
    CHECK((read_true && read_predicted));
    const Tensor expected = stack(by_hand, 1);
    CHECK(max_abs_diff(logits.detach(), expected.detach()) <= 1e-5f);
    (expected * r).sum().backward();
    size_t i = 0;
    for (const auto& [name, p] : model.named_parameters()) {
        INFO(name);
        CHECK(max_abs_diff(p.grad(), grads[i++]) <= 1e-5f);
    }
}

}  // namespace seqgrad::testing
