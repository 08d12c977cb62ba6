// A weight matrix laid out once in panels for a product met many times with the weight unchanged:
// an LSTM's recurrent weight, multiplied by the state at every step of a sequence. sgemm copies
// the weight into its panels at every call (and the rows too); at 32 to 64 rows a step that copy
// is a large share of the product. Here the weight is laid out once per sequence, each thread of
// the pool keeps its own columns' panels across the steps, and the rows are read where they lie.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>

#include "seqgrad/core/allocator.h"
#include "seqgrad/core/tensor.h"

namespace seqgrad::detail {

class WeightPanels {
public:
    // Products of up to this many rows split the panels between the threads (each keeping its
    // own columns' panels across the products); products of more split the rows, each thread
    // reading every panel.
    static constexpr int64_t kColumnSplitRows = 64;

    // B [k, n] of C = A B: the weight stored [k, n] (transposed false), or its transpose, the
    // weight stored [n, k] (a linear layer's W for x W^T), for `products` products of `rows` rows
    // each. The weight must outlive this object and stay unchanged. Where the panels would not run
    // or would not be faster (the portable level, products of weights on oneDNN or in bf16, more
    // than 512 rows, fewer than 4 products to share the copy: active() false) nothing is copied,
    // and multiply() calls gemm_weights.
    WeightPanels(const float* weight, int64_t n, int64_t k, bool transposed, int64_t rows, int64_t products);
    ~WeightPanels();
    WeightPanels(const WeightPanels&) = delete;
    WeightPanels& operator=(const WeightPanels&) = delete;

    bool active() const { return block_.data != nullptr; }

    // C [m, n] = A [m, k] B, or C += A B when accumulate; A and C row-major and dense. Each of C's
    // sums runs over k in order, in single-precision multiply-adds, whatever the threads.
    void multiply(int64_t m, const float* a, float* c, bool accumulate) const;
    // The same on the calling thread alone, every panel, for callers whose threads each take
    // their own rows (an LSTM layer's rows through all of its steps).
    void multiply_here(int64_t m, const float* a, float* c, bool accumulate) const;

private:
    const float* weight_;
    int64_t n_, k_;
    bool transposed_;
    // Panel q: columns [16 q, 16 q + 16) as [k][16], zeros past n, cut into stretches of inputs laid
    // out one stretch of every panel after another (panels.cpp). From the caching allocator, so
    // that each sequence's layout takes the last one's memory back rather than fresh pages.
    Block block_;
};

// Whether WeightPanels run at this moment (see the constructor); tests compare both sides.
bool weight_panels_run();

// The backward pass under way on this thread, numbered from 1 across the process; 0 outside one.
// (Defined in autograd.cpp.)
uint64_t backward_pass_number();

// A weight's panels for the products of one backward pass (an LSTM's dY W at every step): laid
// out at the pass's first product and kept for the rest of it. A later pass lays the weight out
// again, since an optimizer may have changed it in between; outside a pass, every call does.
class PassPanels {
public:
    // As WeightPanels; holds the weight's tensor.
    PassPanels(Tensor weight, int64_t n, int64_t k, bool transposed, int64_t rows, int64_t products);

    // C [m, n] = A [m, k] B, or C += A B when accumulate.
    void multiply(int64_t m, const float* a, float* c, bool accumulate);
    // The layout of the pass under way (made here at its first call), for products the pool's
    // threads make themselves (WeightPanels::multiply_here): a pool's thread sees no pass under
    // way and would lay the weight out again. Inactive panels where they would not run.
    std::shared_ptr<const WeightPanels> laid_out();

private:
    Tensor weight_;
    int64_t n_, k_, rows_, products_;
    bool transposed_;
    std::mutex mutex_;
    uint64_t pass_ = 0;
    std::shared_ptr<const WeightPanels> panels_;
};

}  // namespace seqgrad::detail
