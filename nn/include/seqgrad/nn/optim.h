// Optimizers (SGD with momentum, Adam, AdamW, each PyTorch's update exactly), gradient-norm
// clipping, and the Noam learning-rate schedule of "Attention Is All You Need".
//
// An optimizer holds the parameters by name (Module::named_parameters()), updates them in place
// (models and other handles see the new values), skips parameters whose gradient is undefined,
// and keeps per-parameter state that state() / load_state() expose as named tensors, so a
// checkpoint can store it beside the model and training resumes exactly.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "seqgrad/nn/module.h"

namespace seqgrad::nn {

class Optimizer {
public:
    virtual ~Optimizer() = default;
    Optimizer(const Optimizer&) = delete;
    Optimizer& operator=(const Optimizer&) = delete;

    // One update of every parameter that has a gradient. Records nothing (runs without grad).
    virtual void step() = 0;
    void zero_grad();  // drops the parameters' gradients

    double lr() const { return lr_; }
    void set_lr(double lr);  // e.g. from a schedule, before step()
    const NamedTensors& params() const { return params_; }

    // Copies of the state, keyed "<kind>.<parameter name>" (e.g. "exp_avg.output.weight"); a
    // parameter appears once it has been updated.
    std::map<std::string, Tensor> state() const;
    // Replaces the state with copies of `state`. Every key must name a kind of this optimizer and
    // one of its parameters, with the right shape, and a parameter's kinds come all together;
    // otherwise nothing changes and one Error lists every problem.
    void load_state(const std::map<std::string, Tensor>& state);

protected:
    // `kinds`: the names of the per-parameter state tensors; the kind "step" is a scalar, every
    // other kind has its parameter's shape.
    Optimizer(NamedTensors params, double lr, std::vector<std::string> kinds);
    // The state of parameter i, created (zeros) on first use; in the order of `kinds`.
    std::vector<Tensor>& state_of(size_t i);
    bool has_state(size_t i) const { return !state_[i].empty(); }

    NamedTensors params_;
    double lr_;

private:
    std::vector<std::string> kinds_;
    std::vector<std::vector<Tensor>> state_;  // per parameter: empty, or one tensor per kind
};

// Hyperparameters are doubles, as PyTorch's Python floats: the update casts each derived scalar
// (1 - beta1, lr / (1 - beta1^t), ...) to float once, as PyTorch's kernels do.
struct SGDOptions {
    double lr = 0.01;
    double momentum = 0.0;
    double dampening = 0.0;
    double weight_decay = 0.0;  // L2: added to the gradient
    bool nesterov = false;
};

// torch.optim.SGD: g += wd * p; buf = g at the first step, then momentum * buf + (1 - dampening) * g;
// g = nesterov ? g + momentum * buf : buf; p -= lr * g. State: "momentum_buffer" (with momentum).
class SGD : public Optimizer {
public:
    SGD(NamedTensors params, const SGDOptions& options);
    void step() override;

private:
    SGDOptions options_;
};

struct AdamOptions {
    double lr = 1e-3;
    double beta1 = 0.9;
    double beta2 = 0.999;  // the Transformer paper uses 0.98
    double eps = 1e-8;     // the paper uses 1e-9
    double weight_decay = 0.0;
    // Weight decay on the parameters of rank >= 2 only (the weight matrices and embeddings), not on
    // biases and norms: the two groups GPT-2 and nanoGPT train with.
    bool decay_matrices_only = false;
};

// torch.optim.Adam, step t = 1, 2, ... per parameter:
//   g += wd * p (Adam) or p *= 1 - lr * wd (AdamW, decoupled)
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// State: "step" (scalar), "exp_avg" (m), "exp_avg_sq" (v).
class Adam : public Optimizer {
public:
    Adam(NamedTensors params, const AdamOptions& options);
    void step() override;

protected:
    Adam(NamedTensors params, const AdamOptions& options, bool decoupled_weight_decay);

private:
    AdamOptions options_;
    bool decoupled_weight_decay_;
};

// torch.optim.AdamW: Adam with decoupled weight decay (PyTorch's default weight_decay is 0.01;
// AdamOptions' is 0, so set it).
class AdamW : public Adam {
public:
    AdamW(NamedTensors params, const AdamOptions& options);
};

// Scales the gradients of `params` so that their joint L2 norm is at most max_norm, as
// torch.nn.utils.clip_grad_norm_: by max_norm / (norm + 1e-6) when that is below 1. Returns the
// norm before clipping. Parameters without a gradient are skipped.
float clip_grad_norm(const std::vector<Tensor>& params, float max_norm);

// An exponential moving average of the parameters (Polyak averaging), a cheaper relative of
// averaging the last checkpoints: after each optimizer step, update() sets
//   average = d * average + (1 - d) * parameter,   d = min(decay, (1 + n) / (10 + n)),
// at the n-th update (n = 0, 1, ...), so that the first averages follow the weights closely instead
// of the initialisation. swap() exchanges the averages with the parameters' values in place: swap,
// evaluate or save the averaged model, swap back. The averages start as copies of the parameters.
class WeightAverage {
public:
    WeightAverage(NamedTensors params, double decay);
    void update();
    void swap();
    int64_t updates() const { return updates_; }
    // "average.<parameter name>" for each parameter, and "average_updates" (a scalar), as copies.
    std::map<std::string, Tensor> state() const;
    // Takes exactly the keys state() gives (an Error names what is missing, extra or misshapen).
    void load_state(const std::map<std::string, Tensor>& state);

private:
    NamedTensors params_;
    std::vector<Tensor> averages_;
    double decay_;
    int64_t updates_ = 0;
};

// The Noam schedule: lr(step) = factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5) for
// step >= 1, rising linearly for `warmup` steps and then decaying as 1 / sqrt(step).
struct NoamSchedule {
    int64_t d_model;
    int64_t warmup;
    double factor = 1.0;
    double rate(int64_t step) const;
};

// GPT-2's and nanoGPT's schedule: for step s = 1, 2, ... (i = s - 1), a linear warm-up
// lr * (i + 1) / (warmup + 1) while i < warmup, then a cosine from lr down to min_lr at
// i = decay_steps, and min_lr from there on.
struct CosineSchedule {
    double lr;
    double min_lr;
    int64_t warmup;
    int64_t decay_steps;
    double rate(int64_t step) const;
    // The same warm-up, then the cosine at `position`, 0 (lr) to 1 (min_lr), clamped to that range,
    // instead of by decay_steps: a cosine spread over a budget of time whose last step is unknown.
    double rate(int64_t step, double position) const;
};

}  // namespace seqgrad::nn
