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

// seqgrad::gradcheck takes the checked tensors as function arguments, but a module reads the
// parameter tensors it owns. This runs the same check (gradcheck.h: a fixed random projection r,
// analytic d(sum(r * f()))/dx from backward() against central differences, same step and
// tolerances) on tensors that f() reads directly, perturbing them in place and restoring them.
inline void require_gradcheck_in_place(const std::function<Tensor()>& f, const std::vector<Tensor>& tensors,
                                       const GradcheckOptions& options = {}) {
    for (Tensor t : tensors) {
        REQUIRE(t.requires_grad());
        t.zero_grad();
    }
    const Tensor y = f();
    Generator gen(options.seed);
    const Tensor r = Tensor::normal(y.shape(), 0.0f, 1.0f, gen);
    y.backward(r);
    auto projected = [&] {
        const Tensor out = f();
        double total = 0;
        for (int64_t i = 0; i < out.numel(); ++i) total += static_cast<double>(out.data()[i]) * r.data()[i];
        return total;
    };
    NoGradGuard no_grad;
    for (size_t k = 0; k < tensors.size(); ++k) {
        Tensor x = tensors[k];
        const Tensor analytic = x.grad();
        float* px = x.data();
        for (int64_t j = 0; j < x.numel(); ++j) {
            const float v = px[j];
            const double h = options.step * std::max(1.0, std::fabs(static_cast<double>(v)));
            const float up = static_cast<float>(v + h), down = static_cast<float>(v - h);
            px[j] = up;
            const double loss_up = projected();
            px[j] = down;
            const double loss_down = projected();
            px[j] = v;
            const double numeric = (loss_up - loss_down) / (static_cast<double>(up) - static_cast<double>(down));
            const double got = analytic.defined() ? analytic.data()[j] : 0.0;
            INFO("tensor " << k << " " << x.shape() << " element " << j << ": analytic " << got << ", numeric "
                           << numeric);
            REQUIRE(std::fabs(got - numeric) <= options.atol + options.rtol * std::fabs(numeric));
        }
    }
}

// |got - expected| <= atol + rtol * |expected| elementwise (PARITY.md's tolerance by default).
inline void require_close(const Tensor& got, const Tensor& expected, const std::string& what,
                          float atol = 1e-4f, float rtol = 1e-3f) {
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

}  // namespace seqgrad::testing
