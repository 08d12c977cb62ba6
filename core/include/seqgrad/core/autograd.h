// The reverse-mode engine: a Node per recorded operation, record() to attach one to an
// operation's outputs, NoGradGuard, and the rules backward() follows (core/autograd.cpp).
//
// An operation computes its outputs as plain tensors, then calls record() with its inputs and a
// backward function. backward receives the gradients of the outputs and returns one gradient per
// input (an undefined Tensor for an input that needs none). A backward function may keep plain
// data tensors (an input, or an output's data) but never an output itself: record() hands out new
// handles sharing the outputs' storage, so what the closure holds is outside the graph and no
// reference cycle can form.
#pragma once

#include <functional>
#include <span>
#include <utility>
#include <vector>

#include "seqgrad/core/tensor.h"

namespace seqgrad {

using BackwardFn = std::function<std::vector<Tensor>(std::span<const Tensor> grad_outputs)>;

// What a node's backward receives for an output that no path to the loss used: zeros of the
// output's shape (the default), or an undefined Tensor, for a backward that would only add the
// zeros (attention's weights, [batch, heads, tq, tk], which few losses use).
enum class UnusedGradients { zeros, undefined };

struct Node {
    const char* name = "";  // the operation, for error messages
    // The edges of the graph: leaves that need a gradient as themselves; an operation's output, or
    // a leaf that needs none, as a handle with its producer and shape but no data, so that the
    // graph alone keeps no activation or constant alive (only the backward functions that hold one
    // do).
    std::vector<Tensor> inputs;
    std::vector<Shape> output_shapes;
    BackwardFn backward;
    std::vector<Tensor> grad_outputs;  // filled while backward() runs
    UnusedGradients unused = UnusedGradients::zeros;
    bool released = false;  // backward() has run and freed what it held

    Node() = default;
    Node(const Node&) = delete;
    Node& operator=(const Node&) = delete;
    // Frees the graph behind this node with a loop, not recursion: a chain of 100,000 operations
    // must not overflow the stack when its last tensor goes away.
    ~Node();
};

// Whether operations record themselves (true unless a NoGradGuard is alive on this thread).
bool grad_enabled();

class NoGradGuard {
public:
    NoGradGuard();
    ~NoGradGuard();
    NoGradGuard(const NoGradGuard&) = delete;
    NoGradGuard& operator=(const NoGradGuard&) = delete;

private:
    bool previous_;
};

// True when an operation on these inputs must be recorded.
bool needs_grad(std::span<const Tensor> inputs);
inline bool needs_grad(std::initializer_list<Tensor> inputs) {
    return needs_grad(std::span<const Tensor>(inputs.begin(), inputs.size()));
}

// Attaches a node to the outputs when needs_grad(inputs); returns handles to the outputs that
// carry it (or the outputs unchanged).
std::vector<Tensor> record(const char* name, std::vector<Tensor> outputs, std::vector<Tensor> inputs,
                           BackwardFn backward, UnusedGradients unused = UnusedGradients::zeros);

// The single-output form: `backward` takes the output's gradient `const Tensor&`.
template <typename F>
Tensor record(const char* name, Tensor output, std::vector<Tensor> inputs, F&& backward) {
    if (!needs_grad(std::span<const Tensor>(inputs))) return output;
    std::vector<Tensor> outputs{std::move(output)};
    BackwardFn single = [fn = std::forward<F>(backward)](std::span<const Tensor> grads) { return fn(grads[0]); };
    return record(name, std::move(outputs), std::move(inputs), std::move(single))[0];
}

// A backward function's gradient of the weight w [out, in] of a product y = x w^T: dW = dy^T x
// over `rows` rows of dy [rows, out] and x [rows, in] (contiguous, row-major). Returns the
// gradient to hand back for w, or an undefined tensor when the engine has taken the sum over:
//   - w is a leaf that nodes still to run in this pass use too (a weight at every step of a
//     recurrence), and dy's and x's rows hold fewer numbers than dW: the engine keeps the rows,
//     and after w's last use one product over all of them adds into grad(), so dW is written
//     once rather than once a step;
//   - w's grad() is already defined and held by nothing else (the second of two micro-batches):
//     the product adds straight into it, with no tensor of dW's size to write and add in.
// Otherwise a new tensor holding the product.
Tensor weight_gradient(const Tensor& w, const Tensor& dy, const Tensor& x, int64_t rows);

// backward() of a one-element output that also calls `leaf_ready(leaf)` for each leaf requiring
// grad as soon as its gradient is final: right after the last node that uses the leaf has run, so
// while the rest of the graph is still to go. (Data-parallel training starts summing a bucket of
// gradients over the network then, overlapping it with the rest of the backward pass.) Leaves the
// pass never reaches are not named. The graph is freed as by backward().
void backward_with_leaf_hook(const Tensor& output, const std::function<void(const Tensor& leaf)>& leaf_ready);

}  // namespace seqgrad
