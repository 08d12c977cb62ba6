// Elementwise operations: broadcasting arithmetic (NumPy's rules; backward sums over the
// broadcast axes with sum_to), scalar forms, and the unary functions with their derivatives.
#include <cmath>
#include <numbers>

#include "kernels.h"
#include "seqgrad/core/autograd.h"
#include "seqgrad/core/ops.h"
#include "vector_math.h"

namespace seqgrad {

using detail::broadcast_zip;
using detail::map;
using detail::zip;

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
    const size_t rank = std::max(a.size(), b.size());
    Shape out(std::vector<int64_t>(rank, 1));
    for (size_t i = 0; i < rank; ++i) {
        const int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
        const int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
        check(da == db || da == 1 || db == 1, op, "shapes ", a, " and ", b, " do not broadcast");
        out[i] = da == 1 ? db : da;
    }
    return out;
}

namespace {

// What a backward function reads besides the gradient: the closure holds only those tensors
// (an undefined Tensor stands for the others), so that the graph keeps no activation that no
// derivative needs alive.
enum Keep : unsigned { kKeepNone = 0, kKeepA = 1, kKeepB = 2, kKeepOut = 4 };
constexpr unsigned kKeepX = kKeepA;  // a unary operation's operand

// A binary operation whose gradient for a reads the tensors kForA names, and for b those kForB
// names: only the gradients that will be asked for decide what is kept (a product by a constant
// keeps the constant, not the other operand). The backward function is told which gradients to
// give: backward(g, kept_a, kept_b, kept_out, a_grad, b_grad).
template <unsigned kForA, unsigned kForB, typename Forward, typename Backward>
Tensor binary(const char* name, const Tensor& a, const Tensor& b, Forward forward, Backward backward) {
    check(a.defined() && b.defined(), name, "an operand is undefined");
    const Shape out_shape = broadcast_shapes(a.shape(), b.shape(), name);
    Tensor out = broadcast_zip(a, b, out_shape, forward);
    const bool a_grad = a.requires_grad(), b_grad = b.requires_grad();
    const unsigned keep = (a_grad ? kForA : kKeepNone) | (b_grad ? kForB : kKeepNone);
    return record(name, out, {a, b},
                  [kept_a = keep & kKeepA ? a : Tensor(), kept_b = keep & kKeepB ? b : Tensor(),
                   kept_out = keep & kKeepOut ? out : Tensor(), a_shape = a.shape(), b_shape = b.shape(), a_grad,
                   b_grad, backward](const Tensor& g) {
        auto [ga, gb] = backward(g, kept_a, kept_b, kept_out, a_grad, b_grad);
        return std::vector<Tensor>{a_grad ? sum_to(ga, a_shape) : Tensor(), b_grad ? sum_to(gb, b_shape) : Tensor()};
    });
}

template <unsigned kKeep, typename Forward, typename Backward>
Tensor unary(const char* name, const Tensor& x, Forward forward, Backward backward) {
    check(x.defined(), name, "the operand is undefined");
    Tensor out = map(x, forward);
    return record(name, out, {x},
                  [kept_x = kKeep & kKeepX ? x : Tensor(), kept_out = kKeep & kKeepOut ? out : Tensor(),
                   backward](const Tensor& g) { return std::vector<Tensor>{backward(g, kept_x, kept_out)}; });
}

using Pair = std::pair<Tensor, Tensor>;

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
    return binary<kKeepNone, kKeepNone>("add", a, b, std::plus<float>(),
                                        [](const Tensor& g, const Tensor&, const Tensor&, const Tensor&, bool, bool) {
        return Pair{g, g};
    });
}

Tensor sub(const Tensor& a, const Tensor& b) {
    return binary<kKeepNone, kKeepNone>("sub", a, b, std::minus<float>(),
                                        [](const Tensor& g, const Tensor&, const Tensor&, const Tensor&, bool, bool) {
        return Pair{g, map(g, [](float v) { return -v; })};
    });
}

Tensor mul(const Tensor& a, const Tensor& b) {
    return binary<kKeepB, kKeepA>("mul", a, b, std::multiplies<float>(),
                                  [](const Tensor& g, const Tensor& a, const Tensor& b, const Tensor&, bool a_grad,
                                     bool b_grad) {
        return Pair{a_grad ? mul(g, b) : Tensor(), b_grad ? mul(g, a) : Tensor()};
    });
}

Tensor div(const Tensor& a, const Tensor& b) {
    return binary<kKeepB, kKeepB | kKeepOut>("div", a, b, std::divides<float>(),
                                             [](const Tensor& g, const Tensor&, const Tensor& b, const Tensor& out,
                                                bool a_grad, bool b_grad) {
        // d(a/b)/db = -a/b^2 = -out/b
        return Pair{a_grad ? div(g, b) : Tensor(), b_grad ? neg(div(mul(g, out), b)) : Tensor()};
    });
}

Tensor neg(const Tensor& x) {
    return unary<kKeepNone>(
        "neg", x, [](float v) { return -v; }, [](const Tensor& g, const Tensor&, const Tensor&) { return neg(g); });
}

Tensor add(const Tensor& a, float s) {
    return unary<kKeepNone>(
        "add_scalar", a, [s](float v) { return v + s; },
        [](const Tensor& g, const Tensor&, const Tensor&) { return g; });
}

Tensor mul(const Tensor& a, float s) {
    return unary<kKeepNone>(
        "mul_scalar", a, [s](float v) { return v * s; },
        [s](const Tensor& g, const Tensor&, const Tensor&) { return mul(g, s); });
}

Tensor exp(const Tensor& x) {
    return unary<kKeepOut>(
        "exp", x, [](float v) { return detail::fast_exp(v); },
        [](const Tensor& g, const Tensor&, const Tensor& y) { return mul(g, y); });
}

Tensor log(const Tensor& x) {
    return unary<kKeepX>(
        "log", x, [](float v) { return std::log(v); },
        [](const Tensor& g, const Tensor& x, const Tensor&) { return div(g, x); });
}

Tensor sqrt(const Tensor& x) {
    return unary<kKeepOut>(
        "sqrt", x, [](float v) { return std::sqrt(v); },
        [](const Tensor& g, const Tensor&, const Tensor& y) {
        return zip(g, y, [](float gv, float yv) { return 0.5f * gv / yv; });
        });
}

Tensor pow(const Tensor& x, float p) {
    return unary<kKeepX>(
        "pow", x, [p](float v) { return std::pow(v, p); },
        [p](const Tensor& g, const Tensor& x, const Tensor&) {
        return zip(g, x, [p](float gv, float xv) { return gv * p * std::pow(xv, p - 1); });
        });
}

Tensor tanh(const Tensor& x) {
    return unary<kKeepOut>(
        "tanh", x, [](float v) { return detail::fast_tanh(v); },
        [](const Tensor& g, const Tensor&, const Tensor& y) {
        return zip(g, y, [](float gv, float yv) { return gv * (1 - yv * yv); });
        });
}

Tensor sigmoid(const Tensor& x) {
    return unary<kKeepOut>(
        "sigmoid", x, [](float v) { return detail::fast_sigmoid(v); },
        [](const Tensor& g, const Tensor&, const Tensor& y) {
        return zip(g, y, [](float gv, float yv) { return gv * yv * (1 - yv); });
        });
}

Tensor relu(const Tensor& x) {
    // The output is above zero exactly where x is (NaN gives 0), so backward reads the output, which
    // the next layer holds anyway, and x may go after the forward pass.
    return unary<kKeepOut>(
        "relu", x, [](float v) { return v > 0 ? v : 0.0f; },
        [](const Tensor& g, const Tensor&, const Tensor& y) {
        return zip(g, y, [](float gv, float yv) { return yv > 0 ? gv : 0.0f; });
        });
}

Tensor gelu(const Tensor& x) {
    // The exact (erf) gelu. Its value and slope come from one exp and one division together
    // (vector_math.h's gelu_with_slope), so where a gradient will be needed the forward pass writes
    // the slope beside the value, and backward is a product: the erf, exp and division are not
    // computed twice, and backward holds the slope in place of x (the same size).
    check(x.defined(), "gelu", "the operand is undefined");
    const bool with_slope = needs_grad({x});
    Tensor out = Tensor::empty(x.shape()), slope = with_slope ? Tensor::empty(x.shape()) : Tensor();
    const float* px = x.data();
    float* po = out.data();
    float* ps = with_slope ? slope.data() : nullptr;
    detail::parallel_for(x.numel(), detail::kElementwiseGrain, [&](int64_t begin, int64_t end) {
        with_isa_level([&](auto isa) {
            detail::gelu_values<decltype(isa)::value>(px + begin, po + begin, ps ? ps + begin : nullptr, end - begin);
        });
    });
    if (!with_slope) return out;
    return record("gelu", out, {x}, [slope](const Tensor& g) {
        return std::vector<Tensor>{detail::zip(g, slope, std::multiplies<float>())};
    });
}

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator-(const Tensor& x) { return neg(x); }
Tensor operator+(const Tensor& a, float b) { return add(a, b); }
Tensor operator+(float a, const Tensor& b) { return add(b, a); }
Tensor operator-(const Tensor& a, float b) { return add(a, -b); }
Tensor operator-(float a, const Tensor& b) { return add(neg(b), a); }
Tensor operator*(const Tensor& a, float b) { return mul(a, b); }
Tensor operator*(float a, const Tensor& b) { return mul(b, a); }
Tensor operator/(const Tensor& a, float b) { return mul(a, 1.0f / b); }
Tensor operator/(float a, const Tensor& b) { return mul(pow(b, -1.0f), a); }

Tensor sum_to(const Tensor& grad, const Shape& shape) {
    if (grad.shape() == shape) return grad;
    const Shape& gs = grad.shape();
    check(gs.size() >= shape.size(), "sum_to", "cannot reduce shape ", gs, " to ", shape);
    const size_t lead = gs.size() - shape.size();
    std::vector<int64_t> axes;
    for (size_t i = 0; i < gs.size(); ++i)
        if (i < lead || (shape[i - lead] == 1 && gs[i] != 1)) axes.push_back(static_cast<int64_t>(i));
    return reshape(sum(grad, axes, /*keepdim=*/true), shape);
}

}  // namespace seqgrad

namespace seqgrad {

Tensor Tensor::clone() const {
    return unary<kKeepNone>(
        "clone", *this, [](float v) { return v; }, [](const Tensor& g, const Tensor&, const Tensor&) { return g; });
}

}  // namespace seqgrad
