// Parameter initialisation: Xavier uniform, for one tensor or every matrix of a module, and normal.
#include "seqgrad/nn/init.h"

#include <cmath>

namespace seqgrad::nn {

void xavier_uniform(Tensor param, Generator& gen, float gain) {
    check(param.defined() && param.dim() >= 2, "xavier_uniform", "needs a tensor of rank >= 2, got ",
          param.defined() ? param.shape() : Shape{});
    const Shape& s = param.shape();
    const int64_t receptive = s.numel(2, s.size());
    const double fan_in = static_cast<double>(s[1] * receptive);
    const double fan_out = static_cast<double>(s[0] * receptive);
    const float bound = static_cast<float>(gain * std::sqrt(6.0 / (fan_in + fan_out)));
    float* p = param.data();  // in place: the parameter's identity (and optimizers' hold on it) stays
    for (int64_t i = 0; i < param.numel(); ++i) p[i] = gen.uniform(-bound, bound);
}

void init_normal(Tensor param, Generator& gen, float stddev) {
    check(param.defined(), "init_normal", "the tensor is undefined");
    float* p = param.data();  // in place, as xavier_uniform
    for (int64_t i = 0; i < param.numel(); ++i) p[i] = gen.normal(0.0f, stddev);
}

void init_xavier_uniform(const Module& module, Generator& gen) {
    for (const auto& [name, param] : module.named_parameters())
        if (param.dim() > 1) xavier_uniform(param, gen);
}

}  // namespace seqgrad::nn
