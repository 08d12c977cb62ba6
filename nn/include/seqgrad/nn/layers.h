// The basic layers: Linear, Embedding, LayerNorm (with gamma and beta), Dropout, and the Transformer's
// position-wise FeedForward. Each is a thin Module over one or two core operations.
//
// Constructors that create weights take the Generator for their default initialisation, which is
// PyTorch's (so an untouched layer starts as its PyTorch counterpart would, in distribution).
// Layers with dropout take a shared Generator for the dropout masks, which must live as long as
// the layer; without one, the layer makes its own, seeded with 0.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "seqgrad/core/ops.h"
#include "seqgrad/core/random.h"
#include "seqgrad/nn/module.h"

namespace seqgrad::nn {

enum class Activation { relu, gelu };  // gelu is the exact (erf) form, PyTorch's default

// y = x W^T + b, as nn.Linear: weight [out, in], bias [out], both initialised
// uniform(-1/sqrt(in), 1/sqrt(in)).
class Linear : public Module {
public:
    Linear(int64_t in_features, int64_t out_features, Generator& gen, bool bias = true);
    Tensor forward(const Tensor& x) const;  // [..., in] -> [..., out]; packed weights when no grad
    // relu or gelu of forward(x); with packed weights and no grad, in the product's own pass over
    // its results (linear_packed's activation), unless a trace records the layer's own output.
    Tensor forward(const Tensor& x, Activation then) const;
    // forward(x) through this layer's weight laid out for many calls (a RepeatedWeight of `weight`:
    // an output layer a decoder runs once a step).
    Tensor forward(const Tensor& x, const RepeatedWeight& laid_out) const;
    // forward(x) of each layer, on one x: where all their weights are packed in one precision, without
    // grad and untraced, x is rounded or quantized once for all of them (a self-attention's queries,
    // keys and values), else each layer runs on its own.
    static std::vector<Tensor> forward_each(const Tensor& x, const std::vector<const Linear*>& layers);
    // second.forward(first.forward(x, then)): with both layers' weights packed in one precision,
    // without grad and untraced, as one linear_packed of the two (many rows go through both a
    // chunk at a time, the rows between them never leaving the core's cache).
    static Tensor forward_pair(const Tensor& x, const Linear& first, Activation then, const Linear& second);

    Tensor weight;  // [out, in]
    Tensor bias;    // [out], or undefined without bias

protected:
    void set_packed(std::optional<Precision> precision) override;

private:
    std::shared_ptr<const PackedMatrix> packed_weight_;  // pack_weights()'s snapshot of weight
};

// Rows of a table by id, as nn.Embedding: weight [num_embeddings, dim], initialised N(0, 1).
class Embedding : public Module {
public:
    Embedding(int64_t num_embeddings, int64_t dim, Generator& gen);
    Tensor forward(const IntTensor& ids) const;  // [...] -> [..., dim]

    Tensor weight;
};

// The Transformer's LayerNorm: y = gamma * (x - mean) / sqrt(var + eps) + beta over the last
// axis, with the biased variance and eps = 1e-6 (the GPT's: 1e-5). Parameters gamma (ones) and
// beta (zeros); without `bias`, beta is not a parameter but zeros.
class LayerNorm : public Module {
public:
    explicit LayerNorm(int64_t dim, float eps = 1e-6f, bool bias = true);
    Tensor forward(const Tensor& x) const;

    Tensor gamma;
    Tensor beta;
    float eps;
};

// Inverted dropout with probability p in training mode; the identity in evaluation mode.
class Dropout : public Module {
public:
    explicit Dropout(float p, std::shared_ptr<Generator> generator = nullptr);
    Tensor forward(const Tensor& x) const;
    // to + forward(x), and forward(activation(x)), each as one operation (add_dropout,
    // activation_dropout): the same values and masks.
    Tensor add_to(const Tensor& to, const Tensor& x) const;
    Tensor after(Activation activation, const Tensor& x) const;
    float p() const { return p_; }
    Generator& generator() const { return *generator_; }  // where its masks come from

private:
    float p_;
    std::shared_ptr<Generator> generator_;
};

// The Transformer's FeedForward: w2(dropout(activation(w1(x)))), w1 [hidden, dim], w2 [dim, hidden].
class FeedForward : public Module {
public:
    FeedForward(int64_t dim, int64_t hidden_dim, Generator& gen, Activation activation = Activation::relu,
                float dropout = 0.0f, std::shared_ptr<Generator> dropout_generator = nullptr, bool bias = true);
    Tensor forward(const Tensor& x) const;

    std::shared_ptr<Linear> w1;
    std::shared_ptr<Linear> w2;
    std::shared_ptr<Dropout> dropout;
    Activation activation;
};

}  // namespace seqgrad::nn
