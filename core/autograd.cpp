// The reverse-mode engine. backward() sorts the graph topologically with an explicit stack,
// walks it from the output back to the leaves calling each node's backward function, sums the
// gradients that meet at a tensor, accumulates into the leaves' grad(), and frees each node's
// closure and edges as soon as it has run (unless the graph is retained). It also counts each
// leaf's uses still to run, for the leaf hook and for weight_gradient, which keeps a weight's
// per-step gradient rows until its last use and then sums them in one product.
#include "seqgrad/core/autograd.h"

#include <algorithm>
#include <atomic>
#include <functional>
#include <unordered_map>
#include <unordered_set>

#include "blas.h"
#include "ops/kernels.h"
#include "panels.h"
#include "seqgrad/core/ops.h"
#include "seqgrad/core/profile.h"

namespace seqgrad {
namespace {

thread_local bool grad_mode = true;

bool exclusively_owned(const Tensor& t) { return t.impl_ptr().use_count() == 1 && t.impl()->storage.use_count() == 1; }

// Adds g into `into`. A gradient can be handed to several places (add's backward gives the same
// tensor to both inputs; reshape's shares storage), so a shared tensor is never updated in place:
// the sum goes into a new one instead.
void accumulate(Tensor& into, const Tensor& g) {
    if (!into.defined()) {
        into = g;
    } else if (exclusively_owned(into)) {  // so g's storage is another: the pointers do not alias
        float* const p = into.data();
        const float* const q = g.data();
        detail::parallel_for(into.numel(), detail::kElementwiseGrain, [=](int64_t begin, int64_t end) {
            with_isa_level([&](auto) {
                float* __restrict to = p;
                const float* __restrict from = q;
                for (int64_t i = begin; i < end; ++i) to[i] += from[i];
            });
        });
    } else {
        NoGradGuard no_grad;
        into = add(into, g);
    }
}

// dW = dy^T x over `rows` rows, added into w's grad() itself when w is a leaf whose grad() is
// defined and held by nothing else (then an undefined tensor is returned), else written into a new
// tensor returned for the caller to hand on. (A weight made by an operation passes its gradient on
// to that operation, whatever grad() holds.)
Tensor weight_product(const Tensor& w, const float* dy, const float* x, int64_t rows) {
    const int64_t out = w.size(0), in = w.size(1);
    Tensor& grad = w.impl()->grad;
    if (!w.impl()->grad_fn && grad.defined() && exclusively_owned(grad)) {
        detail::gemm_weights(true, false, out, in, rows, dy, x, grad.data(), true);
        return Tensor();
    }
    Tensor fresh = Tensor::empty(w.shape());
    detail::gemm_weights(true, false, out, in, rows, dy, x, fresh.data(), false);
    return fresh;
}

// The rows of dW = dy^T x that weight_gradient kept for a leaf until its last use in the pass.
struct PendingRows {
    Tensor dy, x;
    int64_t rows;
};
struct PendingWeight {
    Tensor weight;
    std::vector<PendingRows> parts;
};

// The pass under way on this thread: how many edges still to run lead to each leaf, and the
// weight gradients kept for later.
struct BackwardPass {
    uint64_t number = 0;  // see detail::backward_pass_number()
    std::unordered_map<TensorImpl*, int64_t> uses_left;
    std::unordered_map<TensorImpl*, PendingWeight> pending;
};
thread_local BackwardPass* active_pass = nullptr;
std::atomic<uint64_t> passes_begun{0};

class ActivePass {
public:
    explicit ActivePass(BackwardPass& pass) : previous_(active_pass) { active_pass = &pass; }
    ~ActivePass() { active_pass = previous_; }
    ActivePass(const ActivePass&) = delete;
    ActivePass& operator=(const ActivePass&) = delete;

private:
    BackwardPass* previous_;
};

// One product over every kept part of a weight's gradient, added into its grad().
void run_pending(PendingWeight& pending) {
    const Tensor& w = pending.weight;
    const int64_t out = w.size(0), in = w.size(1);
    int64_t rows = 0;
    for (const PendingRows& part : pending.parts) rows += part.rows;
    Tensor dy = pending.parts.front().dy, x = pending.parts.front().x;
    if (pending.parts.size() > 1) {  // the parts' rows one after another
        dy = Tensor::empty({rows, out});
        x = Tensor::empty({rows, in});
        int64_t at = 0;
        for (const PendingRows& part : pending.parts) {
            std::copy_n(part.dy.data(), part.rows * out, dy.data() + at * out);
            std::copy_n(part.x.data(), part.rows * in, x.data() + at * in);
            at += part.rows;
        }
    }
    const Tensor fresh = weight_product(w, dy.data(), x.data(), rows);
    if (fresh.defined()) accumulate(w.impl()->grad, fresh);
}

// Moves the node behind `edge` onto `stack` when `edge` holds its last reference.
void take_if_last(Tensor& edge, std::vector<std::shared_ptr<Node>>& stack) {
    TensorImpl* impl = edge.impl();
    if (impl && edge.impl_ptr().use_count() == 1 && impl->grad_fn && impl->grad_fn.use_count() == 1)
        stack.push_back(std::move(impl->grad_fn));
}

}  // namespace

Node::~Node() {
    backward = nullptr;  // drop the closure's references first, so the edges below may be the last
    std::vector<std::shared_ptr<Node>> stack;
    for (Tensor& edge : inputs) take_if_last(edge, stack);
    inputs.clear();
    while (!stack.empty()) {
        std::shared_ptr<Node> node = std::move(stack.back());
        stack.pop_back();
        node->backward = nullptr;
        for (Tensor& edge : node->inputs) take_if_last(edge, stack);
        node->inputs.clear();
        // `node` is destroyed here with no edges left: nothing recurses.
    }
}

uint64_t detail::backward_pass_number() { return active_pass != nullptr ? active_pass->number : 0; }

bool grad_enabled() { return grad_mode; }

NoGradGuard::NoGradGuard() : previous_(grad_mode) { grad_mode = false; }

NoGradGuard::~NoGradGuard() { grad_mode = previous_; }

bool needs_grad(std::span<const Tensor> inputs) {
    if (!grad_mode) return false;
    for (const Tensor& t : inputs)
        if (t.defined() && t.impl()->requires_grad) return true;
    return false;
}

std::vector<Tensor> record(const char* name, std::vector<Tensor> outputs, std::vector<Tensor> inputs,
                           BackwardFn backward, UnusedGradients unused) {
    if (!needs_grad(std::span<const Tensor>(inputs))) return outputs;
    if (detail::active_op_profile != nullptr) [[unlikely]]
        detail::active_op_profile->note_forward(name);
    auto node = std::make_shared<Node>();
    node->name = name;
    // The edges keep what the walk and the gradients' checks read (the producer, the shape), not
    // an intermediate tensor's data: that stays alive only while a backward function holds it, so
    // a tensor no backward needs (an activation's input, when its backward reads the output) goes
    // when its last user handle does. Leaves that need a gradient stay themselves: it accumulates
    // there. A leaf that needs none (a mask, a constant) becomes an edge as well, which gets none.
    for (Tensor& input : inputs) {
        if (!input.defined() || (!input.impl()->grad_fn && input.impl()->requires_grad)) continue;
        auto edge = std::make_shared<TensorImpl>();
        edge->shape = input.shape();
        edge->requires_grad = input.impl()->requires_grad;
        edge->grad_fn = input.impl()->grad_fn;
        edge->output_nr = input.impl()->output_nr;
        input = Tensor(std::move(edge));
    }
    node->inputs = std::move(inputs);
    node->backward = std::move(backward);
    node->unused = unused;
    std::vector<Tensor> recorded;
    recorded.reserve(outputs.size());
    for (size_t i = 0; i < outputs.size(); ++i) {
        node->output_shapes.push_back(outputs[i].shape());
        auto impl = std::make_shared<TensorImpl>();
        impl->storage = outputs[i].impl()->storage;
        impl->shape = outputs[i].shape();
        impl->requires_grad = true;
        impl->grad_fn = node;
        impl->output_nr = static_cast<int>(i);
        recorded.emplace_back(std::move(impl));
    }
    return recorded;
}

// ---- Tensor's autograd methods ----

bool Tensor::requires_grad() const { return impl_ && impl_->requires_grad; }

Tensor& Tensor::set_requires_grad(bool requires_grad) {
    check(defined(), "Tensor::set_requires_grad", "the tensor is undefined");
    check(impl_->grad_fn == nullptr || requires_grad, "Tensor::set_requires_grad",
          "only a leaf can stop requiring grad; use detach() on the result of an operation");
    impl_->requires_grad = requires_grad;
    return *this;
}

bool Tensor::is_leaf() const { return impl_ && impl_->grad_fn == nullptr; }

Tensor Tensor::grad() const { return impl_ ? impl_->grad : Tensor(); }

void Tensor::set_grad(const Tensor& grad) {
    check(defined(), "Tensor::set_grad", "the tensor is undefined");
    check(!grad.defined() || grad.shape() == shape(), "Tensor::set_grad", "gradient of shape ",
          grad.defined() ? grad.shape() : Shape{}, " for a tensor of shape ", shape());
    impl_->grad = grad;
}

void Tensor::zero_grad() {
    if (impl_) impl_->grad = Tensor();
}

Tensor Tensor::detach() const {
    check(defined(), "Tensor::detach", "the tensor is undefined");
    auto impl = std::make_shared<TensorImpl>();
    impl->storage = impl_->storage;
    impl->shape = impl_->shape;
    return Tensor(std::move(impl));
}

namespace {
void run_backward(const Tensor& self, const Tensor& grad_output, bool retain_graph,
                  const std::function<void(const Tensor& leaf)>* leaf_ready);
}  // namespace

Tensor weight_gradient(const Tensor& w, const Tensor& dy, const Tensor& x, int64_t rows) {
    const int64_t out = w.size(0), in = w.size(1);
    check(dy.numel() >= rows * out && x.numel() >= rows * in, "weight_gradient", "internal error: ", rows,
          " rows of dy ", dy.shape(), " and x ", x.shape(), " for a weight ", w.shape());
    TensorImpl* const impl = w.impl();
    if (active_pass != nullptr && !impl->grad_fn && w.requires_grad()) {
        auto kept = active_pass->pending.find(impl);
        const auto uses = active_pass->uses_left.find(impl);
        const bool used_again = uses != active_pass->uses_left.end() && uses->second > 1;
        if (kept == active_pass->pending.end() && used_again && rows * (out + in) < out * in)
            kept = active_pass->pending.emplace(impl, PendingWeight{w, {}}).first;
        if (kept != active_pass->pending.end()) {
            kept->second.parts.push_back({dy, x, rows});
            return Tensor();
        }
    }
    return weight_product(w, dy.data(), x.data(), rows);
}

void Tensor::backward(bool retain_graph) const {
    check(defined(), "Tensor::backward", "the tensor is undefined");
    check(numel() == 1, "Tensor::backward", "without a gradient argument the output must have one element, got shape ",
          shape());
    backward(Tensor::ones(shape()), retain_graph);
}

void Tensor::backward(const Tensor& grad_output, bool retain_graph) const {
    run_backward(*this, grad_output, retain_graph, nullptr);
}

void backward_with_leaf_hook(const Tensor& output, const std::function<void(const Tensor& leaf)>& leaf_ready) {
    check(output.defined() && output.numel() == 1, "backward_with_leaf_hook",
          "the output must be a tensor of one element");
    run_backward(output, Tensor::ones(output.shape()), false, &leaf_ready);
}

namespace {

void run_backward(const Tensor& self, const Tensor& grad_output, bool retain_graph,
                  const std::function<void(const Tensor& leaf)>* leaf_ready) {
    check(self.defined(), "Tensor::backward", "the tensor is undefined");
    check(self.requires_grad(), "Tensor::backward", "the tensor does not require grad (no graph recorded)");
    check(grad_output.defined() && grad_output.shape() == self.shape(), "Tensor::backward", "gradient of shape ",
          grad_output.defined() ? grad_output.shape() : Shape{}, " for an output of shape ", self.shape());
    TensorImpl* const root = self.impl();
    NoGradGuard no_grad;   // backward functions compute plain tensors
    if (!root->grad_fn) {  // a leaf: its gradient is the given one
        accumulate(root->grad, grad_output.clone());
        if (leaf_ready) (*leaf_ready)(self);
        return;
    }

    // Post-order depth-first search with an explicit stack: a node comes after every node that
    // made one of its inputs, so walking `order` backwards visits each node after all its users.
    std::vector<std::shared_ptr<Node>> order;
    std::unordered_set<Node*> seen{root->grad_fn.get()};
    std::vector<std::pair<std::shared_ptr<Node>, size_t>> stack;  // (node, next input to visit)
    stack.emplace_back(root->grad_fn, 0);
    while (!stack.empty()) {
        auto& [node, next] = stack.back();
        check(!node->released, "Tensor::backward", "the graph through '", node->name,
              "' was freed by an earlier backward(); pass retain_graph = true to go through it twice");
        if (next < node->inputs.size()) {
            const Tensor& edge = node->inputs[next++];
            const auto& producer = edge.defined() ? edge.impl()->grad_fn : nullptr;
            if (producer && seen.insert(producer.get()).second) stack.emplace_back(producer, 0);
        } else {
            order.push_back(std::move(node));
            stack.pop_back();
        }
    }

    // How many edges of the graph still lead to each leaf. A leaf's gradient is final once the last
    // node that uses it has run (and the weight gradients kept for it are summed).
    BackwardPass pass;
    pass.number = ++passes_begun;
    const ActivePass active(pass);
    for (const auto& node : order)
        for (const Tensor& input : node->inputs)
            if (input.defined() && input.requires_grad() && !input.impl()->grad_fn) ++pass.uses_left[input.impl()];

    root->grad_fn->grad_outputs.resize(root->grad_fn->output_shapes.size());
    accumulate(root->grad_fn->grad_outputs[static_cast<size_t>(root->output_nr)], grad_output.detach());
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
        Node& node = **it;
        node.grad_outputs.resize(node.output_shapes.size());
        if (node.unused == UnusedGradients::zeros)
            for (size_t i = 0; i < node.grad_outputs.size(); ++i)  // an output no path used
                if (!node.grad_outputs[i].defined()) node.grad_outputs[i] = Tensor::zeros(node.output_shapes[i]);
        OpProfile* const profile = detail::active_op_profile;
        const double started = profile != nullptr ? profile->now() : 0.0;
        std::vector<Tensor> grads = node.backward(node.grad_outputs);
        const double accumulating = profile != nullptr ? profile->now() : 0.0;
        if (profile != nullptr) profile->note_backward(node.name, accumulating - started);
        check(grads.size() == node.inputs.size(), node.name, "internal error: backward returned ", grads.size(),
              " gradients for ", node.inputs.size(), " inputs");
        node.grad_outputs.clear();
        for (size_t i = 0; i < grads.size(); ++i) {
            const Tensor& input = node.inputs[i];
            if (!grads[i].defined() || !input.requires_grad()) continue;
            check(grads[i].shape() == input.shape(), node.name, "internal error: gradient of shape ", grads[i].shape(),
                  " for input ", i, " of shape ", input.shape());
            TensorImpl* target = input.impl();
            if (target->grad_fn) {
                Node& producer = *target->grad_fn;
                producer.grad_outputs.resize(producer.output_shapes.size());
                accumulate(producer.grad_outputs[static_cast<size_t>(target->output_nr)], grads[i]);
            } else {
                // A leaf's grad() belongs to the user, who may change it in place: it must not
                // share storage with any other tensor.
                if (!target->grad.defined() && !exclusively_owned(grads[i])) grads[i] = grads[i].clone();
                accumulate(target->grad, grads[i]);
            }
        }
        if (profile != nullptr) profile->note_accumulate(profile->now() - accumulating);
        for (const Tensor& input : node.inputs) {
            if (!input.defined() || !input.requires_grad() || input.impl()->grad_fn ||
                --pass.uses_left[input.impl()] != 0)
                continue;
            if (const auto kept = pass.pending.find(input.impl()); kept != pass.pending.end()) {
                const double summing = profile != nullptr ? profile->now() : 0.0;
                run_pending(kept->second);
                pass.pending.erase(kept);
                if (profile != nullptr) profile->note_backward("weight_gradients", profile->now() - summing);
            }
            if (leaf_ready) (*leaf_ready)(input);
        }
        if (!retain_graph) {
            node.backward = nullptr;
            node.inputs.clear();
            node.released = true;
        }
    }
}

}  // namespace

}  // namespace seqgrad
