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

}  // namespace seqgrad::testing
