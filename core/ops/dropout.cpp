// Inverted dropout: in training, each element is kept with probability 1 - p and scaled by
// 1 / (1 - p), so evaluation needs no rescaling. The mask is counter-based (kernels.h,
// DropoutMask): one draw from the Generator per call, and backward recomputes it.
#include "kernels.h"
#include "seqgrad/core/autograd.h"
#include "seqgrad/core/ops.h"
#include "seqgrad/core/random.h"

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

}  // namespace seqgrad
