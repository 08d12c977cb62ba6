// gradcheck: analytic gradients against central finite differences (see gradcheck.h for the
// tolerances and why they are what they are).
#include "seqgrad/core/gradcheck.h"

#include <cmath>
#include <functional>
#include <sstream>

#include "seqgrad/core/autograd.h"
#include "seqgrad/core/ops.h"
#include "seqgrad/core/random.h"

namespace seqgrad {
namespace {

double projected(const Tensor& y, const Tensor& r) {
    double total = 0;
    for (int64_t i = 0; i < y.numel(); ++i) total += static_cast<double>(y.data()[i]) * r.data()[i];
    return total;
}

// The check itself: `eval` computes f from `leaves` (whichever way it reads them); the leaves marked
// in `checked` are perturbed one element at a time and restored.
GradcheckResult check_leaves(const std::function<Tensor()>& eval, const std::vector<Tensor>& leaves,
                             const std::vector<bool>& checked, const GradcheckOptions& options) {
    Tensor y = eval();
    check(y.defined() && y.requires_grad(), "gradcheck",
          "the function's output does not depend on any input that requires grad");
    Generator gen(options.seed);
    const Tensor r = Tensor::normal(y.shape(), 0.0f, 1.0f, gen);
    y.backward(r);

    GradcheckResult result;
    NoGradGuard no_grad;
    for (size_t i = 0; i < leaves.size(); ++i) {
        if (!checked[i]) continue;
        Tensor x = leaves[i];  // a handle: perturbing it perturbs what eval() reads
        const Tensor analytic = x.grad();
        float* px = x.data();
        for (int64_t j = 0; j < x.numel(); ++j) {
            const float v = px[j];
            const double h = options.step * std::max(1.0, std::fabs(static_cast<double>(v)));
            const float up = static_cast<float>(v + h), down = static_cast<float>(v - h);
            px[j] = up;
            const double loss_up = projected(eval(), r);
            px[j] = down;
            const double loss_down = projected(eval(), r);
            px[j] = v;
            const double numeric = (loss_up - loss_down) / (static_cast<double>(up) - static_cast<double>(down));
            const double got = analytic.defined() ? analytic.data()[j] : 0.0;
            const double err = std::fabs(got - numeric);
            result.max_abs_error = std::max(result.max_abs_error, err);
            if (!(err <= options.atol + options.rtol * std::fabs(numeric)) && result.ok) {
                result.ok = false;
                std::ostringstream msg;
                msg << "input " << i << " " << x.shape() << " element " << j << ": analytic " << got << ", numeric "
                    << numeric;
                result.message = msg.str();
            }
        }
    }
    return result;
}

}  // namespace

GradcheckResult gradcheck(const GradcheckFn& f, const std::vector<Tensor>& inputs, const GradcheckOptions& options) {
    // Fresh leaves with copies of the data, so the caller's tensors and gradients are untouched.
    std::vector<Tensor> leaves;
    std::vector<bool> checked;
    for (const Tensor& t : inputs) {
        check(t.defined(), "gradcheck", "an input is undefined");
        leaves.push_back(t.requires_grad() ? Tensor::from_vector(t.to_vector(), t.shape(), true) : t);
        checked.push_back(t.requires_grad());
    }
    return check_leaves([&] { return f(leaves); }, leaves, checked, options);
}

GradcheckResult gradcheck_in_place(const std::function<Tensor()>& f, const std::vector<Tensor>& tensors,
                                   const GradcheckOptions& options) {
    for (Tensor t : tensors) {
        check(t.defined() && t.requires_grad(), "gradcheck_in_place", "every tensor must be defined and require grad");
        t.zero_grad();
    }
    return check_leaves(f, tensors, std::vector<bool>(tensors.size(), true), options);
}

}  // namespace seqgrad
