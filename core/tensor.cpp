// Tensor and IntTensor: storage, factories and accessors. Autograd's side of Tensor is in
// autograd.cpp, and the operations in ops/.
#include "seqgrad/core/tensor.h"

#include <algorithm>
#include <cstring>

#include "parallel.h"
#include "seqgrad/core/allocator.h"
#include "seqgrad/core/ops.h"
#include "seqgrad/core/random.h"

namespace seqgrad {

Storage::Storage(int64_t n) : numel(n) {
    const detail::Block block = detail::allocate_floats(n);
    data = block.data;
    block_bytes = block.bytes;
}

Storage::~Storage() { detail::free_floats({data, block_bytes}); }

int64_t normalize_axis(int64_t axis, int64_t rank, const char* op) {
    check(axis >= -rank && axis < rank, op, "axis ", axis, " is out of range for a tensor of rank ", rank);
    return axis < 0 ? axis + rank : axis;
}

namespace {

void check_shape(const Shape& shape, const char* op) {
    int64_t numel = 1;
    for (int64_t d : shape) {
        check(d >= 0, op, "negative extent in shape ", shape);
        check(!__builtin_mul_overflow(numel, d, &numel), op, "shape ", shape,
              " has more elements than an int64 counts");
    }
}

}  // namespace

// ---- Tensor factories ----

Tensor Tensor::empty(const Shape& shape) {
    check_shape(shape, "Tensor::empty");
    auto impl = std::make_shared<TensorImpl>();
    impl->storage = std::make_shared<Storage>(shape.numel());
    impl->shape = shape;
    return Tensor(std::move(impl));
}

Tensor Tensor::full(const Shape& shape, float value, bool requires_grad) {
    Tensor t = empty(shape);
    // Split across the pool from 4 MB: a backward's dense zeros (an embedding table's gradient, a
    // slice's) are written at the memory's rate of one core otherwise.
    float* p = t.data();
    detail::parallel_for(t.numel(), int64_t{1} << 19,
                         [=](int64_t begin, int64_t end) { std::fill(p + begin, p + end, value); });
    return t.set_requires_grad(requires_grad);
}

Tensor Tensor::zeros(const Shape& shape, bool requires_grad) { return full(shape, 0.0f, requires_grad); }

Tensor Tensor::ones(const Shape& shape, bool requires_grad) { return full(shape, 1.0f, requires_grad); }

Tensor Tensor::scalar(float value, bool requires_grad) { return full({}, value, requires_grad); }

Tensor Tensor::from_vector(const std::vector<float>& values, const Shape& shape, bool requires_grad) {
    check_shape(shape, "Tensor::from_vector");
    check(static_cast<int64_t>(values.size()) == shape.numel(), "Tensor::from_vector", values.size(),
          " values do not fill shape ", shape, " (", shape.numel(), " elements)");
    Tensor t = empty(shape);
    std::copy(values.begin(), values.end(), t.data());
    return t.set_requires_grad(requires_grad);
}

Tensor Tensor::uniform(const Shape& shape, float low, float high, Generator& gen, bool requires_grad) {
    check(low <= high, "Tensor::uniform", "low ", low, " exceeds high ", high);
    Tensor t = empty(shape);
    float* p = t.data();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = gen.uniform(low, high);
    return t.set_requires_grad(requires_grad);
}

Tensor Tensor::normal(const Shape& shape, float mean, float stddev, Generator& gen, bool requires_grad) {
    check(stddev >= 0, "Tensor::normal", "negative standard deviation ", stddev);
    Tensor t = empty(shape);
    float* p = t.data();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = gen.normal(mean, stddev);
    return t.set_requires_grad(requires_grad);
}

// ---- Tensor accessors ----

namespace {

const TensorImpl& defined_impl(const TensorImpl* impl, const char* what) {
    check(impl != nullptr, what, "the tensor is undefined");
    return *impl;
}

}  // namespace

const Shape& Tensor::shape() const { return defined_impl(impl_.get(), "Tensor::shape").shape; }

int64_t Tensor::size(int64_t axis) const {
    const Shape& s = shape();
    return s[static_cast<size_t>(normalize_axis(axis, s.rank(), "Tensor::size"))];
}

int64_t Tensor::numel() const { return shape().numel(); }

float* Tensor::data() { return defined_impl(impl_.get(), "Tensor::data").storage->data; }

const float* Tensor::data() const { return defined_impl(impl_.get(), "Tensor::data").storage->data; }

std::vector<float> Tensor::to_vector() const {
    const float* p = data();
    return std::vector<float>(p, p + numel());
}

float Tensor::item() const {
    check(numel() == 1, "Tensor::item", "needs a tensor with one element, got shape ", shape());
    return data()[0];
}

// ---- method forms ----

Tensor Tensor::reshape(const Shape& s) const { return seqgrad::reshape(*this, s); }
Tensor Tensor::transpose(int64_t a, int64_t b) const { return seqgrad::transpose(*this, a, b); }
Tensor Tensor::permute(const std::vector<int64_t>& order) const { return seqgrad::permute(*this, order); }
Tensor Tensor::sum() const { return seqgrad::sum(*this); }
Tensor Tensor::sum(const std::vector<int64_t>& axes, bool keepdim) const { return seqgrad::sum(*this, axes, keepdim); }
Tensor Tensor::mean() const { return seqgrad::mean(*this); }
Tensor Tensor::mean(const std::vector<int64_t>& axes, bool keepdim) const {
    return seqgrad::mean(*this, axes, keepdim);
}
Tensor Tensor::max(int64_t axis, bool keepdim) const { return seqgrad::max(*this, axis, keepdim); }

// ---- IntTensor ----

IntTensor IntTensor::full(const Shape& shape, int64_t value) {
    check_shape(shape, "IntTensor::full");
    IntTensor t;
    t.shape_ = shape;
    t.values_.assign(static_cast<size_t>(shape.numel()), value);
    return t;
}

IntTensor IntTensor::zeros(const Shape& shape) { return full(shape, 0); }

IntTensor IntTensor::from_vector(std::vector<int64_t> values, const Shape& shape) {
    check_shape(shape, "IntTensor::from_vector");
    check(static_cast<int64_t>(values.size()) == shape.numel(), "IntTensor::from_vector", values.size(),
          " values do not fill shape ", shape);
    IntTensor t;
    t.shape_ = shape;
    t.values_ = std::move(values);
    return t;
}

int64_t IntTensor::size(int64_t axis) const {
    return shape_[static_cast<size_t>(normalize_axis(axis, shape_.rank(), "IntTensor::size"))];
}

IntTensor IntTensor::reshape(const Shape& shape) const {
    check(shape.numel() == numel(), "IntTensor::reshape", "cannot view shape ", shape_, " as ", shape);
    IntTensor t = *this;
    t.shape_ = shape;
    return t;
}

IntTensor IntTensor::slice_last(int64_t start, int64_t stop) const {
    check(dim() >= 1, "IntTensor::slice_last", "needs rank >= 1, got shape ", shape_);
    const int64_t n = shape_.back();
    check(0 <= start && start <= stop && stop <= n, "IntTensor::slice_last", "range [", start, ", ", stop,
          ") is outside the last axis of shape ", shape_);
    Shape out_shape = shape_;
    out_shape[out_shape.size() - 1] = stop - start;
    std::vector<int64_t> out;
    out.reserve(static_cast<size_t>(out_shape.numel()));
    for (int64_t row = 0; row < numel() / std::max<int64_t>(n, 1); ++row) {
        const int64_t* p = values_.data() + row * n;
        out.insert(out.end(), p + start, p + stop);
    }
    return from_vector(std::move(out), out_shape);
}

}  // namespace seqgrad
