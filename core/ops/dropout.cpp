// Inverted dropout: in training, each element is kept with probability 1 - p and scaled by
// 1 / (1 - p), so evaluation needs no rescaling. The mask is counter-based (kernels.h,
// DropoutMask): one draw from the Generator per call, and backward recomputes it.
#include <algorithm>

#include "kernels.h"
#include "seqgrad/core/autograd.h"
#include "seqgrad/core/ops.h"
#include "seqgrad/core/random.h"
#include "vector_math.h"

namespace seqgrad {
namespace {

Tensor apply_mask(const Tensor& in, const detail::DropoutMask& mask) {
    Tensor out = Tensor::empty(in.shape());
    const float* pi = in.data();
    float* po = out.data();
    detail::parallel_for(in.numel(), detail::kElementwiseGrain, [&](int64_t begin, int64_t end) {
        with_isa_level([&](auto) { mask.apply(pi + begin, po + begin, end - begin, begin); });
    });
    return out;
}

}  // namespace

Tensor dropout(const Tensor& x, float p, bool training, Generator& gen) {
    check(x.defined(), "dropout", "the operand is undefined");
    check(p >= 0 && p <= 1, "dropout", "probability must be in [0, 1], got ", p);
    if (!training || p == 0) return x;
    if (p == 1) {
        return record("dropout", Tensor::zeros(x.shape()), {x},
                      [](const Tensor& g) { return std::vector<Tensor>{Tensor::zeros(g.shape())}; });
    }
    const detail::DropoutMask mask(p, gen);
    return record("dropout", apply_mask(x, mask), {x},
                  [mask](const Tensor& g) { return std::vector<Tensor>{apply_mask(g, mask)}; });
}

Tensor add_dropout(const Tensor& x, const Tensor& y, float p, bool training, Generator& gen) {
    check(x.defined() && y.defined(), "add_dropout", "an operand is undefined");
    check(p >= 0 && p <= 1, "add_dropout", "probability must be in [0, 1], got ", p);
    if (!training || p == 0) return add(x, y);
    if (p == 1 || x.shape() != y.shape()) return add(x, dropout(y, p, training, gen));
    const detail::DropoutMask mask(p, gen);
    Tensor out = Tensor::empty(x.shape());
    const float* px = x.data();
    const float* py = y.data();
    float* po = out.data();
    // A block at a time, y dropped into a small buffer and then added: dropout's product rounded
    // before the sum, as the two operations round it (one expression would let the compiler fuse
    // them into a multiply-add, which rounds once).
    detail::parallel_for(out.numel(), detail::kElementwiseGrain, [&](int64_t begin, int64_t end) {
        with_isa_level([&](auto) {
            constexpr int64_t kBlock = 1024;
            alignas(64) float dropped[kBlock];
            for (int64_t first = begin; first < end; first += kBlock) {
                const int64_t n = std::min(kBlock, end - first);
                mask.apply(py + first, dropped, n, first);
                const float* __restrict xb = px + first;
                float* __restrict ob = po + first;
                for (int64_t j = 0; j < n; ++j) ob[j] = xb[j] + dropped[j];
            }
        });
    });
    const bool y_needs = y.requires_grad();  // not y itself: held for backward, it would outlive its use
    return record("add_dropout", out, {x, y}, [mask, y_needs](const Tensor& g) {
        return std::vector<Tensor>{g, y_needs ? apply_mask(g, mask) : Tensor()};
    });
}

Tensor activation_dropout(const Tensor& x, bool gelu_activation, float p, bool training, Generator& gen) {
    const char* op = gelu_activation ? "gelu_dropout" : "relu_dropout";
    check(x.defined(), op, "the operand is undefined");
    check(p >= 0 && p <= 1, op, "probability must be in [0, 1], got ", p);
    const auto activated = [&] { return gelu_activation ? gelu(x) : relu(x); };
    if (!training || p == 0) return activated();
    if (p == 1) return dropout(activated(), p, training, gen);
    const detail::DropoutMask mask(p, gen);
    Tensor out = Tensor::empty(x.shape());
    // gelu's slope at x, written beside the value where backward will need it (as gelu() does).
    Tensor slope = gelu_activation && needs_grad({x}) ? Tensor::empty(x.shape()) : Tensor();
    const float* px = x.data();
    float* po = out.data();
    float* ps = slope.defined() ? slope.data() : nullptr;
    detail::parallel_for(out.numel(), detail::kElementwiseGrain, [&](int64_t begin, int64_t end) {
        const float* xb = px + begin;
        with_isa_level([&](auto isa) {
            if (gelu_activation) {
                // gelu_values' stretch of values (and slopes) in a buffer that stays in the core's
                // first cache, then dropped into out: at avx2 its kernel takes four vectors a step.
                constexpr int64_t kStretch = 1024;
                alignas(32) float values[kStretch];
                for (int64_t c = begin; c < end; c += kStretch) {
                    const int64_t count = std::min(kStretch, end - c);
                    detail::gelu_values<decltype(isa)::value>(px + c, values, ps ? ps + c : nullptr, count);
                    mask.apply(values, po + c, count, c);
                }
            } else {
                mask.map(po + begin, end - begin, begin,
                         [=](int64_t j, float factor) { return (xb[j] > 0 ? xb[j] : 0.0f) * factor; });
            }
        });
    });
    if (!gelu_activation) {
        // Backward: an element passed g times the factor 1 / (1 - p) exactly where its output is
        // above zero (x above zero and kept; the factor is at least 1, so no such product rounds
        // to zero). Reading the output, which the next layer holds anyway, rather than x lets x go
        // after the forward pass, and no mask is drawn again.
        return record(op, out, {x}, [out, scale = mask.scale](const Tensor& g) {
            Tensor dx = Tensor::empty(out.shape());
            const float* pg = g.data();
            const float* py = out.data();
            float* pd = dx.data();
            detail::parallel_for(dx.numel(), detail::kElementwiseGrain, [=](int64_t begin, int64_t end) {
                with_isa_level([&](auto) {
                    const float s = scale;
                    const float* __restrict gb = pg + begin;
                    const float* __restrict yb = py + begin;
                    float* __restrict db = pd + begin;
                    for (int64_t j = 0; j < end - begin; ++j) {
                        const float passed = gb[j] * s;
                        db[j] = yb[j] > 0 ? passed : 0.0f;
                    }
                });
            });
            return std::vector<Tensor>{dx};
        });
    }
    if (!slope.defined()) return out;  // no gradient will be asked for
    // Backward: g times the mask's factor, then gelu's slope at x, in the order the two
    // operations' backward passes take.
    return record(op, out, {x}, [mask, slope](const Tensor& g) {
        Tensor dx = Tensor::empty(slope.shape());
        const float* pg = g.data();
        const float* ps = slope.data();
        float* pd = dx.data();
        detail::parallel_for(dx.numel(), detail::kElementwiseGrain, [&](int64_t begin, int64_t end) {
            const float* gb = pg + begin;
            const float* sb = ps + begin;
            with_isa_level([&](auto) {
                mask.map(pd + begin, end - begin, begin,
                         [=](int64_t j, float factor) { return (gb[j] * factor) * sb[j]; });
            });
        });
        return std::vector<Tensor>{dx};
    });
}

}  // namespace seqgrad
