// The basic layers: Linear, Embedding, LayerNorm, Dropout, FeedForward.
#include "seqgrad/nn/layers.h"

#include <cmath>

#include "seqgrad/core/autograd.h"
#include "seqgrad/core/ops.h"
#include "seqgrad/nn/trace.h"

namespace seqgrad::nn {

namespace {

// The activation as linear_packed applies it in the product's own pass.
PackedActivation packed(Activation then) {
    return then == Activation::gelu ? PackedActivation::gelu : PackedActivation::relu;
}

}  // namespace

Linear::Linear(int64_t in_features, int64_t out_features, Generator& gen, bool with_bias) {
    check(in_features > 0 && out_features > 0, "Linear", "sizes must be positive, got in ", in_features, " and out ",
          out_features);
    // PyTorch's reset_parameters: kaiming_uniform(a = sqrt(5)) reduces to this bound for both.
    const float bound = 1.0f / std::sqrt(static_cast<float>(in_features));
    weight = register_parameter("weight", Tensor::uniform({out_features, in_features}, -bound, bound, gen));
    if (with_bias) bias = register_parameter("bias", Tensor::uniform({out_features}, -bound, bound, gen));
}

Tensor Linear::forward(const Tensor& x) const {
    Tensor y = packed_weight_ && !grad_enabled() ? linear_packed(x, *packed_weight_, bias) : linear(x, weight, bias);
    trace(*this, y);
    return y;
}

Tensor Linear::forward(const Tensor& x, const RepeatedWeight& laid_out) const {
    check(laid_out.tensor().impl() == weight.impl(), "Linear", "the laid-out weight is another layer's");
    Tensor y = linear(x, laid_out, bias);
    trace(*this, y);
    return y;
}

Tensor Linear::forward(const Tensor& x, Activation then) const {
    if (packed_weight_ && !grad_enabled() && !tracing()) return linear_packed(x, *packed_weight_, bias, packed(then));
    const Tensor y = forward(x);
    return then == Activation::gelu ? gelu(y) : relu(y);
}

std::vector<Tensor> Linear::forward_each(const Tensor& x, const std::vector<const Linear*>& layers) {
    bool shared = !layers.empty() && !grad_enabled() && !tracing();
    for (const Linear* layer : layers)
        shared = shared && layer->packed_weight_ &&
                 layer->packed_weight_->precision() == layers.front()->packed_weight_->precision();
    std::vector<Tensor> ys;
    if (!shared) {
        for (const Linear* layer : layers) ys.push_back(layer->forward(x));
        return ys;
    }
    std::vector<const PackedMatrix*> weights;
    std::vector<Tensor> biases;
    for (const Linear* layer : layers) {
        weights.push_back(layer->packed_weight_.get());
        biases.push_back(layer->bias);
    }
    return linear_packed(x, weights, biases);
}

Tensor Linear::forward_pair(const Tensor& x, const Linear& first, Activation then, const Linear& second) {
    if (!first.packed_weight_ || !second.packed_weight_ || grad_enabled() || tracing() ||
        first.packed_weight_->precision() != second.packed_weight_->precision())
        return second.forward(first.forward(x, then));
    return linear_packed(x, *first.packed_weight_, first.bias, packed(then), *second.packed_weight_, second.bias);
}

void Linear::set_packed(std::optional<Precision> precision) {
    packed_weight_ = precision ? std::make_shared<const PackedMatrix>(weight, *precision) : nullptr;
}

Embedding::Embedding(int64_t num_embeddings, int64_t dim, Generator& gen) {
    check(num_embeddings > 0 && dim > 0, "Embedding", "sizes must be positive, got ", num_embeddings, " and ", dim);
    weight = register_parameter("weight", Tensor::normal({num_embeddings, dim}, 0.0f, 1.0f, gen));
}

Tensor Embedding::forward(const IntTensor& ids) const {
    Tensor y = embedding(weight, ids);
    trace(*this, y);
    return y;
}

LayerNorm::LayerNorm(int64_t dim, float eps_, bool bias) : eps(eps_) {
    check(dim > 0, "LayerNorm", "dim must be positive, got ", dim);
    gamma = register_parameter("gamma", Tensor::ones({dim}));
    beta = bias ? register_parameter("beta", Tensor::zeros({dim})) : Tensor::zeros({dim});
}

Tensor LayerNorm::forward(const Tensor& x) const {
    Tensor y = layer_norm(x, gamma, beta, eps);
    trace(*this, y);
    return y;
}

Dropout::Dropout(float p, std::shared_ptr<Generator> generator)
    : p_(p), generator_(generator ? std::move(generator) : std::make_shared<Generator>(0)) {
    check(p >= 0 && p < 1, "Dropout", "probability must be in [0, 1), got ", p);
}

// Not traced: at inference it is the identity, and a summary reads better without it.
Tensor Dropout::forward(const Tensor& x) const { return dropout(x, p_, is_training(), *generator_); }

Tensor Dropout::add_to(const Tensor& to, const Tensor& x) const {
    return add_dropout(to, x, p_, is_training(), *generator_);
}

Tensor Dropout::after(Activation activation, const Tensor& x) const {
    return activation_dropout(x, activation == Activation::gelu, p_, is_training(), *generator_);
}

FeedForward::FeedForward(int64_t dim, int64_t hidden_dim, Generator& gen, Activation activation_, float dropout_p,
                         std::shared_ptr<Generator> dropout_generator, bool bias)
    : activation(activation_) {
    w1 = register_module("w1", std::make_shared<Linear>(dim, hidden_dim, gen, bias));
    w2 = register_module("w2", std::make_shared<Linear>(hidden_dim, dim, gen, bias));
    dropout = register_module("dropout", std::make_shared<Dropout>(dropout_p, std::move(dropout_generator)));
}

Tensor FeedForward::forward(const Tensor& x) const {
    // Dropout that changes nothing (evaluation, or p = 0: dropout() returns x as it is) lets packed
    // layers run as one pair; a trace records the activation's output on its own, below.
    if ((!dropout->is_training() || dropout->p() == 0) && !tracing())
        return Linear::forward_pair(x, *w1, activation, *w2);
    if (!tracing()) return w2->forward(dropout->after(activation, w1->forward(x)));  // one pass after w1
    const Tensor activated = w1->forward(x, activation);                             // [..., hidden_dim]
    trace(*this, activation == Activation::gelu ? "gelu" : "relu", activated);
    return w2->forward(dropout->forward(activated));
}

}  // namespace seqgrad::nn
