// Optimizers (the shared state bookkeeping, SGD, Adam, AdamW), gradient-norm clipping and the
// Noam schedule. The updates follow PyTorch 1.13's single-tensor code paths line by line, in
// float32 with the scalar coefficients computed in double.
#include "seqgrad/nn/optim.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <set>
#include <sstream>

#include "seqgrad/core/autograd.h"
#include "seqgrad/core/isa_dispatch.h"
#include "seqgrad/core/ops.h"
#include "seqgrad/core/threads.h"

namespace seqgrad::nn {
namespace {

constexpr int64_t kUpdateGrain = 1 << 15;  // elements per thread before an update goes parallel

// Elements [begin, end) of a sequence of arrays laid end to end: body(array, first, last) for each
// array's part, in order. `ends` holds each array's end in the joint numbering.
template <typename Body>
void for_each_part(const std::vector<int64_t>& ends, int64_t begin, int64_t end, const Body& body) {
    size_t i = static_cast<size_t>(std::upper_bound(ends.begin(), ends.end(), begin) - ends.begin());
    for (; i < ends.size() && begin < end; ++i) {
        const int64_t start = i == 0 ? 0 : ends[i - 1];
        const int64_t stop = std::min(end, ends[i]);
        if (begin < stop) body(i, begin - start, stop - start);
        begin = stop;
    }
}

// Each tensor's end when they are laid end to end, for for_each_part.
std::vector<int64_t> part_ends(const NamedTensors& tensors) {
    std::vector<int64_t> ends;
    int64_t total = 0;
    for (const auto& [name, t] : tensors) ends.push_back(total += t.numel());
    return ends;
}

// Names once each, and no tensor under two of them (or sharing its storage): the updates run as one
// pass over all the tensors' elements on the pool, where a tensor listed twice would have two
// stretches updated by two threads at once.
void check_distinct(const NamedTensors& tensors, const char* who) {
    std::set<std::string> names;
    std::map<const float*, std::string> storage;
    for (const auto& [name, t] : tensors) {
        check(names.insert(name).second, who, "parameter name '", name, "' appears twice");
        if (!t.defined() || t.numel() == 0) continue;
        const auto [other, inserted] = storage.emplace(t.data(), name);
        check(inserted, who, "parameters '", other->second, "' and '", name, "' are the same tensor");
    }
}

// The sum of squares of x[0, n) in double, in eight fixed lanes (element j in lane j % 8) added
// together at the end: the same order at every level and for any number of threads.
double sum_of_squares(const float* __restrict x, int64_t n) {
    double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int l = 0; l < 8; ++l) lane[l] += static_cast<double>(x[j + l]) * static_cast<double>(x[j + l]);
    for (int l = 0; j < n; ++j, ++l) lane[l] += static_cast<double>(x[j]) * static_cast<double>(x[j]);
    return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

Tensor copy_of(const Tensor& t) { return Tensor::from_vector(t.to_vector(), t.shape()); }

// The float constants of one Adam update of one parameter.
struct AdamScalars {
    float beta1, beta2, one_minus_beta1, one_minus_beta2, eps;
    float weight_decay;           // Adam's L2 term
    float decay;                  // AdamW's factor 1 - lr * weight_decay
    float minus_step_size;        // -lr / (1 - beta1^t)
    float bias_correction2_sqrt;  // sqrt(1 - beta2^t)
};

// Adam's update of elements [begin, end). The weight-decay variants are template arguments and
// the arrays restrict pointers (distinct tensors), so that the loop has no branch and no possible
// aliasing, and vectorises.
template <bool kL2, bool kDecoupled>
void adam_update(float* __restrict p, float* __restrict m, float* __restrict v, const float* __restrict g,
                 int64_t begin, int64_t end, const AdamScalars c) {
    for (int64_t j = begin; j < end; ++j) {
        float gj = g[j];
        if constexpr (kDecoupled) p[j] *= c.decay;
        if constexpr (kL2) gj += c.weight_decay * p[j];
        m[j] = m[j] * c.beta1 + c.one_minus_beta1 * gj;
        v[j] = v[j] * c.beta2 + c.one_minus_beta2 * gj * gj;
        const float denom = std::sqrt(v[j]) / c.bias_correction2_sqrt + c.eps;
        p[j] += c.minus_step_size * (m[j] / denom);
    }
}

// The float constants of one SGD update.
struct SgdScalars {
    float weight_decay, momentum, damped;  // damped: 1 - dampening
    float minus_lr;
};

// SGD's update of elements [begin, end): d = g (+ weight_decay p); with momentum the buffer b is d
// on its first step, else b momentum + damped d, and d becomes d + momentum b (Nesterov) or b; then
// p -= lr d. The variants are template arguments, for a loop without branches that vectorises.
template <bool kDecay, bool kMomentum, bool kFirst, bool kNesterov>
void sgd_update(float* __restrict p, float* __restrict buf, const float* __restrict g, int64_t begin, int64_t end,
                const SgdScalars c) {
    for (int64_t j = begin; j < end; ++j) {
        float d = g[j];
        if constexpr (kDecay) d += c.weight_decay * p[j];
        if constexpr (kMomentum) {
            buf[j] = kFirst ? d : buf[j] * c.momentum + c.damped * d;
            d = kNesterov ? d + c.momentum * buf[j] : buf[j];
        }
        p[j] += c.minus_lr * d;
    }
}

template <bool kDecay>
void sgd_update_of(float* p, float* buf, const float* g, int64_t begin, int64_t end, const SgdScalars& c,
                   bool first_step, bool nesterov) {
    if (buf == nullptr) return sgd_update<kDecay, false, false, false>(p, buf, g, begin, end, c);
    if (first_step) {
        if (nesterov) return sgd_update<kDecay, true, true, true>(p, buf, g, begin, end, c);
        return sgd_update<kDecay, true, true, false>(p, buf, g, begin, end, c);
    }
    if (nesterov) return sgd_update<kDecay, true, false, true>(p, buf, g, begin, end, c);
    sgd_update<kDecay, true, false, false>(p, buf, g, begin, end, c);
}

}  // namespace

// ---- Optimizer: parameters and state ----

Optimizer::Optimizer(NamedTensors params, double lr, std::vector<std::string> kinds)
    : params_(std::move(params)), lr_(lr), kinds_(std::move(kinds)), state_(params_.size()) {
    for (const auto& [name, p] : params_)
        check(p.defined() && p.is_leaf(), "Optimizer", "parameter '", name, "' is undefined or not a leaf");
    check_distinct(params_, "Optimizer");
    set_lr(lr);
}

void Optimizer::set_lr(double lr) {
    check(lr >= 0 && std::isfinite(lr), "Optimizer", "learning rate must be finite and >= 0, got ", lr);
    lr_ = lr;
}

void Optimizer::zero_grad() {
    for (auto& [name, p] : params_) p.zero_grad();
}

std::vector<Tensor>& Optimizer::state_of(size_t i) {
    std::vector<Tensor>& s = state_[i];
    if (s.empty())
        for (const std::string& kind : kinds_)
            s.push_back(kind == "step" ? Tensor::scalar(0.0f) : Tensor::zeros(params_[i].second.shape()));
    return s;
}

std::map<std::string, Tensor> Optimizer::state() const {
    std::map<std::string, Tensor> out;
    for (size_t i = 0; i < params_.size(); ++i)
        for (size_t k = 0; k < state_[i].size(); ++k)
            out.emplace(kinds_[k] + "." + params_[i].first, copy_of(state_[i][k]));
    return out;
}

void Optimizer::load_state(const std::map<std::string, Tensor>& state) {
    std::vector<std::string> problems;
    std::map<std::string, size_t> param_index;
    for (size_t i = 0; i < params_.size(); ++i) param_index.emplace(params_[i].first, i);
    std::vector<std::map<std::string, Tensor>> incoming(params_.size());  // per parameter: kind -> value
    for (const auto& [key, value] : state) {
        const size_t dot = key.find('.');
        const std::string kind = key.substr(0, dot);
        const auto param = dot == std::string::npos ? param_index.end() : param_index.find(key.substr(dot + 1));
        if (param == param_index.end() || std::find(kinds_.begin(), kinds_.end(), kind) == kinds_.end()) {
            problems.push_back("unexpected: " + key);
            continue;
        }
        const Shape expected = kind == "step" ? Shape{} : params_[param->second].second.shape();
        if (!value.defined() || value.shape() != expected) {
            std::ostringstream line;
            line << "wrong shape: " << key << " expects " << expected << ", got "
                 << (value.defined() ? value.shape() : Shape{});
            problems.push_back(line.str());
            continue;
        }
        incoming[param->second].emplace(kind, value);
    }
    for (size_t i = 0; i < params_.size(); ++i)
        if (!incoming[i].empty())
            for (const std::string& kind : kinds_)
                if (!incoming[i].count(kind)) problems.push_back("missing: " + kind + "." + params_[i].first);
    if (!problems.empty()) {
        std::ostringstream message;
        message << "Optimizer::load_state: the state does not fit this optimizer (" << problems.size() << " problems)";
        for (const std::string& p : problems) message << "\n  " << p;
        throw Error(message.str());
    }
    for (size_t i = 0; i < params_.size(); ++i) {
        state_[i].clear();
        if (!incoming[i].empty())
            for (const std::string& kind : kinds_) state_[i].push_back(copy_of(incoming[i].at(kind)));
    }
}

// ---- SGD ----

SGD::SGD(NamedTensors params, const SGDOptions& options)
    : Optimizer(std::move(params), options.lr,
                options.momentum != 0 ? std::vector<std::string>{"momentum_buffer"} : std::vector<std::string>{}),
      options_(options) {
    check(options.momentum >= 0 && options.weight_decay >= 0, "SGD", "momentum and weight decay must be >= 0");
    check(!options.nesterov || (options.momentum > 0 && options.dampening == 0), "SGD",
          "Nesterov momentum needs a momentum and zero dampening");
}

void SGD::step() {
    NoGradGuard no_grad;
    const SgdScalars c{static_cast<float>(options_.weight_decay), static_cast<float>(options_.momentum),
                       static_cast<float>(1.0 - options_.dampening), static_cast<float>(-lr_)};
    const bool nesterov = options_.nesterov;
    // As Adam: each parameter's arrays, then one pass over all their elements laid end to end.
    struct Update {
        float* p;
        float* buf;  // nullptr without momentum
        const float* g;
        bool first_step;  // the momentum buffer's first
    };
    std::vector<Update> updates;
    std::vector<int64_t> ends;
    int64_t total = 0;
    for (size_t i = 0; i < params_.size(); ++i) {
        Tensor param = params_[i].second;
        const Tensor grad = param.grad();
        if (!grad.defined()) continue;
        const bool first_step = !has_state(i);
        updates.push_back({param.data(), c.momentum != 0 ? state_of(i)[0].data() : nullptr, grad.data(), first_step});
        total += param.numel();
        ends.push_back(total);
    }
    parallel_for(total, kUpdateGrain, [&](int64_t begin, int64_t end) {
        with_isa_level([&](auto) {
            for_each_part(ends, begin, end, [&](size_t i, int64_t first, int64_t last) {
                const Update& u = updates[i];
                if (c.weight_decay != 0) sgd_update_of<true>(u.p, u.buf, u.g, first, last, c, u.first_step, nesterov);
                else sgd_update_of<false>(u.p, u.buf, u.g, first, last, c, u.first_step, nesterov);
            });
        });
    });
}

// ---- Adam and AdamW ----

Adam::Adam(NamedTensors params, const AdamOptions& options) : Adam(std::move(params), options, false) {}

Adam::Adam(NamedTensors params, const AdamOptions& options, bool decoupled_weight_decay)
    : Optimizer(std::move(params), options.lr, {"step", "exp_avg", "exp_avg_sq"}),
      options_(options),
      decoupled_weight_decay_(decoupled_weight_decay) {
    check(options.beta1 >= 0 && options.beta1 < 1 && options.beta2 >= 0 && options.beta2 < 1, "Adam",
          "betas must be in [0, 1), got ", options.beta1, " and ", options.beta2);
    check(options.eps >= 0 && options.weight_decay >= 0, "Adam", "eps and weight decay must be >= 0");
}

AdamW::AdamW(NamedTensors params, const AdamOptions& options) : Adam(std::move(params), options, true) {}

void Adam::step() {
    NoGradGuard no_grad;
    const double b1 = options_.beta1, b2 = options_.beta2;
    const float beta1 = static_cast<float>(b1), beta2 = static_cast<float>(b2);
    const float one_minus_beta1 = static_cast<float>(1.0 - b1), one_minus_beta2 = static_cast<float>(1.0 - b2);
    const float eps = static_cast<float>(options_.eps);
    const float weight_decay = static_cast<float>(options_.weight_decay);
    const float decay = static_cast<float>(1.0 - lr_ * options_.weight_decay);  // AdamW's p *= 1 - lr wd
    // Each parameter's arrays and constants; then one pass over all their elements laid end to end,
    // so that a model of many small tensors wakes the threads once, not once a tensor. Each
    // element's update reads only that element, so the split across threads changes nothing.
    struct Update {
        float *p, *m, *v;
        const float* g;
        AdamScalars c;
        bool l2, decoupled;
    };
    std::vector<Update> updates;
    std::vector<int64_t> ends;
    int64_t total = 0;
    for (size_t i = 0; i < params_.size(); ++i) {
        Tensor param = params_[i].second;
        const Tensor grad = param.grad();
        if (!grad.defined()) continue;
        std::vector<Tensor>& s = state_of(i);
        float& step = s[0].data()[0];
        step += 1;
        const double t = step;
        const float minus_step_size = static_cast<float>(-(lr_ / (1.0 - std::pow(b1, t))));
        const float bias_correction2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(b2, t)));
        const bool decays = weight_decay != 0 && (!options_.decay_matrices_only || param.dim() >= 2);
        updates.push_back({param.data(),
                           s[1].data(),
                           s[2].data(),
                           grad.data(),
                           {beta1, beta2, one_minus_beta1, one_minus_beta2, eps, weight_decay, decay, minus_step_size,
                            bias_correction2_sqrt},
                           decays && !decoupled_weight_decay_,
                           decays && decoupled_weight_decay_});
        total += param.numel();
        ends.push_back(total);
    }
    parallel_for(total, kUpdateGrain, [&](int64_t begin, int64_t end) {
        with_isa_level([&](auto) {  // at the CPU's level (isa_dispatch.h)
            for_each_part(ends, begin, end, [&](size_t i, int64_t first, int64_t last) {
                const Update& u = updates[i];
                if (u.l2) adam_update<true, false>(u.p, u.m, u.v, u.g, first, last, u.c);
                else if (u.decoupled) adam_update<false, true>(u.p, u.m, u.v, u.g, first, last, u.c);
                else adam_update<false, false>(u.p, u.m, u.v, u.g, first, last, u.c);
            });
        });
    });
}

// ---- weight averaging ----

WeightAverage::WeightAverage(NamedTensors params, double decay) : params_(std::move(params)), decay_(decay) {
    check(decay > 0 && decay < 1, "WeightAverage", "decay must be in (0, 1), got ", decay);
    check_distinct(params_, "WeightAverage");
    for (const auto& [name, p] : params_) averages_.push_back(copy_of(p));
}

void WeightAverage::update() {
    const double n = static_cast<double>(updates_);
    const float d = static_cast<float>(std::min(decay_, (1 + n) / (10 + n)));
    const float one_minus_d = 1 - d;
    const std::vector<int64_t> ends = part_ends(params_);
    parallel_for(ends.empty() ? 0 : ends.back(), kUpdateGrain, [&](int64_t begin, int64_t end) {
        with_isa_level([&](auto) {
            for_each_part(ends, begin, end, [&](size_t i, int64_t first, int64_t last) {
                const float* __restrict p = params_[i].second.data();  // restrict: vectorises
                float* __restrict a = averages_[i].data();
                for (int64_t j = first; j < last; ++j) a[j] = d * a[j] + one_minus_d * p[j];
            });
        });
    });
    ++updates_;
}

void WeightAverage::swap() {
    const std::vector<int64_t> ends = part_ends(params_);
    parallel_for(ends.empty() ? 0 : ends.back(), kUpdateGrain, [&](int64_t begin, int64_t end) {
        for_each_part(ends, begin, end, [&](size_t i, int64_t first, int64_t last) {
            float* __restrict p = params_[i].second.data();
            float* __restrict a = averages_[i].data();
            for (int64_t j = first; j < last; ++j) std::swap(p[j], a[j]);
        });
    });
}

std::map<std::string, Tensor> WeightAverage::state() const {
    std::map<std::string, Tensor> out;
    for (size_t i = 0; i < params_.size(); ++i) out.emplace("average." + params_[i].first, copy_of(averages_[i]));
    out.emplace("average_updates", Tensor::scalar(static_cast<float>(updates_)));
    return out;
}

void WeightAverage::load_state(const std::map<std::string, Tensor>& state) {
    std::vector<std::string> problems;
    std::vector<Tensor> incoming(params_.size());
    std::set<std::string> expected{"average_updates"};
    for (size_t i = 0; i < params_.size(); ++i) {
        const std::string key = "average." + params_[i].first;
        expected.insert(key);
        const auto it = state.find(key);
        if (it == state.end()) {
            problems.push_back("missing: " + key);
        } else if (!it->second.defined() || it->second.shape() != params_[i].second.shape()) {
            std::ostringstream line;
            line << "wrong shape: " << key << " expects " << params_[i].second.shape() << ", got "
                 << (it->second.defined() ? it->second.shape() : Shape{});
            problems.push_back(line.str());
        } else {
            incoming[i] = it->second;
        }
    }
    const auto count = state.find("average_updates");
    if (count == state.end()) problems.push_back("missing: average_updates");
    else if (!count->second.defined() || count->second.numel() != 1 || count->second.item() < 0)
        problems.push_back("average_updates must be a non-negative scalar");
    for (const auto& [key, value] : state)
        if (!expected.count(key)) problems.push_back("unexpected: " + key);
    if (!problems.empty()) {
        std::ostringstream message;
        message << "WeightAverage::load_state: the state does not fit these parameters (" << problems.size()
                << " problems)";
        for (const std::string& p : problems) message << "\n  " << p;
        throw Error(message.str());
    }
    for (size_t i = 0; i < params_.size(); ++i) averages_[i] = copy_of(incoming[i]);
    updates_ = static_cast<int64_t>(count->second.item());
}

// ---- clipping and schedule ----

float clip_grad_norm(const std::vector<Tensor>& params, float max_norm) {
    check(max_norm > 0, "clip_grad_norm", "max_norm must be positive, got ", max_norm);
    std::vector<Tensor> grads;
    std::vector<int64_t> ends;
    int64_t total = 0;
    for (const Tensor& p : params) {
        Tensor g = p.grad();
        if (!g.defined()) continue;
        total += g.numel();
        ends.push_back(total);
        grads.push_back(std::move(g));
    }
    // The sum of squares over fixed blocks of each gradient, the blocks' sums added in order: the
    // same result for any number of threads. One pass over all gradients, not one per tensor.
    constexpr int64_t kBlock = 1 << 14;
    struct Block {
        const float* x;
        int64_t n;
    };
    std::vector<Block> blocks;
    for (const Tensor& g : grads)
        for (int64_t start = 0; start < g.numel(); start += kBlock)
            blocks.push_back({g.data() + start, std::min(kBlock, g.numel() - start)});
    std::vector<double> partial(blocks.size());
    parallel_for(static_cast<int64_t>(blocks.size()), 4, [&](int64_t begin, int64_t end) {
        with_isa_level([&](auto) {
            for (int64_t b = begin; b < end; ++b)
                partial[static_cast<size_t>(b)] =
                    sum_of_squares(blocks[static_cast<size_t>(b)].x, blocks[static_cast<size_t>(b)].n);
        });
    });
    double sum = 0;
    for (double p : partial) sum += p;
    const float total_norm = static_cast<float>(std::sqrt(sum));
    const float coefficient = max_norm / (total_norm + 1e-6f);
    if (coefficient < 1) {
        // New gradient tensors rather than scaling in place: two parameters' gradients may share
        // storage (backward can hand the same tensor to both inputs of an addition).
        std::vector<Tensor> scaled;
        for (const Tensor& g : grads) scaled.push_back(Tensor::empty(g.shape()));
        parallel_for(total, kUpdateGrain, [&](int64_t begin, int64_t end) {
            with_isa_level([&](auto) {
                for_each_part(ends, begin, end, [&](size_t i, int64_t first, int64_t last) {
                    const float* __restrict from = grads[i].data();
                    float* __restrict to = scaled[i].data();
                    for (int64_t j = first; j < last; ++j) to[j] = from[j] * coefficient;
                });
            });
        });
        size_t next = 0;
        for (Tensor p : params)
            if (p.grad().defined()) p.set_grad(scaled[next++]);
    }
    return total_norm;
}

double CosineSchedule::rate(int64_t step) const {
    check(step >= 1 && warmup >= 0 && decay_steps >= 0 && min_lr <= lr, "CosineSchedule",
          "needs step >= 1, warmup and decay_steps >= 0 and min_lr <= lr, got ", step, ", ", warmup, ", ", decay_steps,
          ", ", min_lr, ", ", lr);
    const auto i = static_cast<double>(step - 1);
    const auto w = static_cast<double>(warmup), d = static_cast<double>(decay_steps);
    return rate(step, i >= d ? 1.0 : i < w ? 0.0 : (i - w) / (d - w));  // d > i >= w in the last
}

double CosineSchedule::rate(int64_t step, double position) const {
    check(step >= 1 && warmup >= 0 && min_lr <= lr, "CosineSchedule",
          "needs step >= 1, warmup >= 0 and min_lr <= lr, got ", step, ", ", warmup, ", ", min_lr, ", ", lr);
    const auto i = static_cast<double>(step - 1), w = static_cast<double>(warmup);
    if (i < w) return lr * (i + 1) / (w + 1);
    const double p = std::clamp(position, 0.0, 1.0);
    if (p == 1.0) return min_lr;
    return min_lr + 0.5 * (1.0 + std::cos(std::numbers::pi * p)) * (lr - min_lr);
}

double NoamSchedule::rate(int64_t step) const {
    check(step >= 1 && d_model > 0 && warmup > 0, "NoamSchedule", "needs step >= 1, d_model > 0 and warmup > 0, got ",
          step, ", ", d_model, ", ", warmup);
    const double s = static_cast<double>(step);
    return factor * std::pow(static_cast<double>(d_model), -0.5) *
           std::min(std::pow(s, -0.5), s * std::pow(static_cast<double>(warmup), -1.5));
}

}  // namespace seqgrad::nn
