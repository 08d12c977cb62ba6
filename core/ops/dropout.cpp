// Inverted dropout: in training, each element is kept with probability 1 - p and scaled by
// 1 / (1 - p), so evaluation needs no rescaling. The mask comes from an explicit Generator.
#include "kernels.h"
#include "seqgrad/core/autograd.h"
#include "seqgrad/core/ops.h"
#include "seqgrad/core/random.h"

namespace seqgrad {

Tensor dropout(const Tensor& x, float p, bool training, Generator& gen) {
    check(x.defined(), "dropout", "the operand is undefined");
    check(p >= 0 && p <= 1, "dropout", "probability must be in [0, 1], got ", p);
    if (!training || p == 0) return x;
    Tensor keep = Tensor::empty(x.shape());  // 0 or 1 / (1 - p)
    const float scale = p < 1 ? 1.0f / (1.0f - p) : 0.0f;
    float* pk = keep.data();
    for (int64_t i = 0; i < keep.numel(); ++i) pk[i] = gen.uniform() >= p ? scale : 0.0f;
    Tensor out = detail::zip(x, keep, [](float v, float k) { return v * k; });
    return record("dropout", out, {x}, [keep](const Tensor& g) {
        return std::vector<Tensor>{detail::zip(g, keep, [](float gv, float k) { return gv * k; })};
    });
}

}  // namespace seqgrad
