// Tensor (float32, row-major, contiguous, any rank; a cheap handle that shares its storage) and
// IntTensor (integer token ids and masks, which never pretend to be floats).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "seqgrad/core/error.h"
#include "seqgrad/core/shape.h"

namespace seqgrad {

class Generator;
struct Node;
struct TensorImpl;

// A float buffer from the caching allocator (core/allocator.cpp): returned to the cache, not to
// the system, when the last tensor that uses it goes away.
struct Storage {
    explicit Storage(int64_t numel);
    ~Storage();
    Storage(const Storage&) = delete;
    Storage& operator=(const Storage&) = delete;

    float* data = nullptr;
    int64_t numel = 0;
    size_t block_bytes = 0;  // the allocator's block, which may be larger than numel floats
};

class Tensor {
public:
    Tensor() = default;  // an undefined tensor (no storage): what grad() is before any backward

    // Factories. The result is a leaf; it records nothing until requires_grad is set.
    static Tensor empty(const Shape& shape);  // uninitialised
    static Tensor zeros(const Shape& shape, bool requires_grad = false);
    static Tensor ones(const Shape& shape, bool requires_grad = false);
    static Tensor full(const Shape& shape, float value, bool requires_grad = false);
    static Tensor scalar(float value, bool requires_grad = false);  // shape []
    static Tensor from_vector(const std::vector<float>& values, const Shape& shape, bool requires_grad = false);
    static Tensor uniform(const Shape& shape, float low, float high, Generator& gen, bool requires_grad = false);
    static Tensor normal(const Shape& shape, float mean, float stddev, Generator& gen, bool requires_grad = false);

    bool defined() const { return impl_ != nullptr; }
    const Shape& shape() const;
    int64_t dim() const { return shape().rank(); }
    int64_t size(int64_t axis) const;  // negative axes count from the end
    int64_t numel() const;
    float* data();
    const float* data() const;
    std::vector<float> to_vector() const;
    float item() const;  // the value of a one-element tensor

    // Autograd (core/autograd.cpp).
    bool requires_grad() const;
    Tensor& set_requires_grad(bool requires_grad);  // leaves only
    bool is_leaf() const;                           // made by the user, not by an operation
    Tensor grad() const;                            // undefined until a backward reaches it
    void set_grad(const Tensor& grad);
    void zero_grad();  // drops the gradient (grad() is undefined)
    // From a one-element output, with gradient 1.
    void backward(bool retain_graph = false) const;
    // With the given gradient of this tensor (same shape).
    void backward(const Tensor& grad_output, bool retain_graph = false) const;
    Tensor detach() const;  // the same storage, outside the graph
    Tensor clone() const;   // a copy of the data, recorded (its gradient flows back)

    // Method forms of common operations (core/ops.h has them all as free functions).
    Tensor reshape(const Shape& shape) const;
    Tensor transpose(int64_t axis0, int64_t axis1) const;
    Tensor permute(const std::vector<int64_t>& order) const;
    Tensor sum() const;
    Tensor sum(const std::vector<int64_t>& axes, bool keepdim = false) const;
    Tensor mean() const;
    Tensor mean(const std::vector<int64_t>& axes, bool keepdim = false) const;
    Tensor max(int64_t axis, bool keepdim = false) const;

    // Internals, for operations and the engine.
    explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}
    TensorImpl* impl() const { return impl_.get(); }
    const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

private:
    std::shared_ptr<TensorImpl> impl_;
};

struct TensorImpl {
    std::shared_ptr<Storage> storage;
    Shape shape;
    bool requires_grad = false;
    Tensor grad;                    // leaves: accumulated by backward()
    std::shared_ptr<Node> grad_fn;  // the operation that made this tensor, if recorded
    int output_nr = 0;              // which of grad_fn's outputs this is
};

// Integer tensor for token ids and masks: row-major int64 (PyTorch's `long`), no autograd.
class IntTensor {
public:
    IntTensor() = default;
    static IntTensor zeros(const Shape& shape);
    static IntTensor full(const Shape& shape, int64_t value);
    static IntTensor from_vector(std::vector<int64_t> values, const Shape& shape);

    const Shape& shape() const { return shape_; }
    int64_t dim() const { return shape_.rank(); }
    int64_t size(int64_t axis) const;
    int64_t numel() const { return static_cast<int64_t>(values_.size()); }
    int64_t* data() { return values_.data(); }
    const int64_t* data() const { return values_.data(); }
    const std::vector<int64_t>& to_vector() const { return values_; }
    IntTensor reshape(const Shape& shape) const;
    // Columns [start, stop) of the last axis, as tgt[:, :-1] and tgt[:, 1:].
    IntTensor slice_last(int64_t start, int64_t stop) const;

private:
    Shape shape_;
    std::vector<int64_t> values_;
};

// Resolves a possibly negative axis against a rank; throws Error naming `op` if out of range.
int64_t normalize_axis(int64_t axis, int64_t rank, const char* op);

}  // namespace seqgrad
