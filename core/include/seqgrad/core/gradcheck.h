// gradcheck: compares the gradient that backward() computes with central finite differences.
//
// For a function f of some input tensors, it draws a fixed random projection r of f's output
// (so every output element matters) and checks d(sum(r * f))/dx for every element x of every
// input that requires grad:
//   numeric  = (L(x + h) - L(x - h)) / 2h, evaluated in double from float32 outputs
//   analytic = what backward() accumulated
//   pass when |analytic - numeric| <= atol + rtol * |numeric|
// float32 rounding makes the numeric side noisy: with h = 1e-2 (relative to max(1, |x|)) the
// truncation error is O(h^2) and the rounding error about 1e-7 * |L| / h, so the defaults
// atol = 1e-3, rtol = 1e-2 catch any real mistake (a wrong factor, a missed term, a transposed
// product) while passing correct operations. Functions with kinks (relu, max) should be checked
// at points away from them.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "seqgrad/core/tensor.h"

namespace seqgrad {

struct GradcheckOptions {
    double step = 1e-2;  // h, scaled by max(1, |x|)
    double atol = 1e-3;
    double rtol = 1e-2;
    uint64_t seed = 1234;  // for the output projection
};

struct GradcheckResult {
    bool ok = true;
    double max_abs_error = 0;
    // The first failure, e.g. "input 1 element 5: analytic 0.25, numeric 0.5"; empty when ok.
    std::string message;
};

using GradcheckFn = std::function<Tensor(const std::vector<Tensor>&)>;

// Inputs that do not require grad are passed through unchanged and not checked.
GradcheckResult gradcheck(const GradcheckFn& f, const std::vector<Tensor>& inputs,
                          const GradcheckOptions& options = {});

// The same check for a function that reads the tensors itself (a module and its parameters):
// every tensor must require grad; each is perturbed in place and restored exactly, and afterwards
// their gradients hold what f's backward accumulated (zeroed first).
GradcheckResult gradcheck_in_place(const std::function<Tensor()>& f, const std::vector<Tensor>& tensors,
                                   const GradcheckOptions& options = {});

}  // namespace seqgrad
