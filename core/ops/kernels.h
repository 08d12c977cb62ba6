// Small building blocks shared by the operation files: elementwise maps over contiguous tensors,
// run in parallel over fixed chunks. Internal to core/.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "../parallel.h"
#include "seqgrad/core/hash.h"
#include "seqgrad/core/random.h"
#include "seqgrad/core/tensor.h"
#include "vector_math.h"

namespace seqgrad::detail {

constexpr int64_t kElementwiseGrain = 1 << 15;  // elements per thread before going parallel

// The elementwise maps below run their loop at the level isa_level() chose (isa_dispatch.h): f is
// inlined into the level's copy of the loop and vectorised there (gelu's exp and erf included).

// out[i] = f(x[i])
template <typename F>
Tensor map(const Tensor& x, F f) {
    Tensor out = Tensor::empty(x.shape());
    const float* px = x.data();
    float* po = out.data();
    parallel_for(x.numel(), kElementwiseGrain, [&](int64_t begin, int64_t end) {
        with_isa_level([&](auto) {
            for (int64_t i = begin; i < end; ++i) po[i] = f(px[i]);
        });
    });
    return out;
}

// out[i] = f(a[i], b[i]) for tensors of the same number of elements.
template <typename F>
Tensor zip(const Tensor& a, const Tensor& b, F f) {
    Tensor out = Tensor::empty(a.shape());
    const float* pa = a.data();
    const float* pb = b.data();
    float* po = out.data();
    parallel_for(a.numel(), kElementwiseGrain, [&](int64_t begin, int64_t end) {
        with_isa_level([&](auto) {
            for (int64_t i = begin; i < end; ++i) po[i] = f(pa[i], pb[i]);
        });
    });
    return out;
}

// out[i] = f(a[i], b[i], c[i])
template <typename F>
Tensor zip3(const Tensor& a, const Tensor& b, const Tensor& c, F f) {
    Tensor out = Tensor::empty(a.shape());
    const float* pa = a.data();
    const float* pb = b.data();
    const float* pc = c.data();
    float* po = out.data();
    parallel_for(a.numel(), kElementwiseGrain, [&](int64_t begin, int64_t end) {
        with_isa_level([&](auto) {
            for (int64_t i = begin; i < end; ++i) po[i] = f(pa[i], pb[i], pc[i]);
        });
    });
    return out;
}

// Row-major strides of a shape, in elements.
inline std::vector<int64_t> strides_of(const Shape& shape) {
    std::vector<int64_t> strides(shape.size(), 1);
    for (size_t i = shape.size(); i-- > 1;) strides[i - 1] = strides[i] * shape[i];
    return strides;
}

// Row-major strides of `s` over the axes of a broadcast shape of rank `rank`: 0 on the axes that
// s lacks or has as extent 1.
inline std::vector<int64_t> broadcast_strides(const Shape& s, size_t rank) {
    std::vector<int64_t> own = strides_of(s), strides(rank, 0);
    for (size_t i = 0; i < s.size(); ++i)
        if (s[i] != 1) strides[rank - s.size() + i] = own[i];
    return strides;
}

// out = f(a, b) with a and b broadcast to `out_shape`. The innermost axis runs as a plain loop
// with stride 0 or 1 for each operand; the outer axes are walked row by row.
template <typename F>
Tensor broadcast_zip(const Tensor& a, const Tensor& b, const Shape& out_shape, F f) {
    if (a.shape() == b.shape()) return zip(a, b, f);
    Tensor out = Tensor::empty(out_shape);
    const size_t rank = out_shape.size();
    if (rank == 0 || out.numel() == 0) {
        if (out.numel() == 1) out.data()[0] = f(a.data()[0], b.data()[0]);
        return out;
    }
    const std::vector<int64_t> sa = broadcast_strides(a.shape(), rank);
    const std::vector<int64_t> sb = broadcast_strides(b.shape(), rank);
    const int64_t inner = out_shape.back();
    const int64_t rows = out.numel() / inner;
    const int64_t ia = sa.back(), ib = sb.back();
    const float* pa = a.data();
    const float* pb = b.data();
    float* po = out.data();
    parallel_for(rows, std::max<int64_t>(1, kElementwiseGrain / inner), [&](int64_t begin, int64_t end) {
        with_isa_level([&](auto) {
            for (int64_t row = begin; row < end; ++row) {
                int64_t rest = row, oa = 0, ob = 0;
                for (size_t d = rank - 1; d-- > 0;) {
                    const int64_t idx = rest % out_shape[d];
                    rest /= out_shape[d];
                    oa += idx * sa[d];
                    ob += idx * sb[d];
                }
                const float* ra = pa + oa;
                const float* rb = pb + ob;
                float* ro = po + row * inner;
                for (int64_t j = 0; j < inner; ++j) ro[j] = f(ra[j * ia], rb[j * ib]);
            }
        });
    });
    return out;
}

// ---- rows (softmax, attention) ----

// The largest of x[0, n), -inf if none; a NaN never wins. row_max_blocks also hands each block
// of 64 elements to visit(begin, end, block), where block.above(t) says whether any of its
// elements is greater than t (log_softmax_top_k's scan skips the blocks that hold nothing for it).
// At the avx512 level, each block's maximum is one vector of sixteen lanes and the running maximum
// another, so a block costs a few instructions and no horizontal reduction; at avx2 the same in
// pairs of eight-lane vectors; at the portable level, sixteen running maxima side by side (a
// single running maximum would make each comparison wait for the one before; GCC keeps this loop
// scalar). row_max is row_max_blocks visiting nothing: the two give the same value bit for bit. L
// is the level of the kernel calling (isa_dispatch.h).
struct BlockMax16 {
    __m512 lanes;  // lane l: the largest of the block's elements l, l + 16, ... (-inf if none)
    SEQGRAD_TARGET_AVX512 bool above(float t) const {
        return _mm512_cmp_ps_mask(lanes, _mm512_set1_ps(t), _CMP_GT_OQ) != 0;
    }
};

template <typename Visit>
SEQGRAD_TARGET_AVX512 inline float row_max_blocks16(const float* x, int64_t n, Visit& visit) {
    const __m512 none = _mm512_set1_ps(-INFINITY);
    // max_ps(a, b) gives b when a is NaN: new values go first, so a NaN is never kept.
    __m512 running = none;
    for (int64_t j = 0; j < n; j += 64) {
        __m512 block = none;
        if (j + 64 <= n) {
            for (int64_t c = 0; c < 64; c += 16)
                block = _mm512_maskz_max_ps(kAllLanes, _mm512_loadu_ps(x + j + c), block);
        } else {
            for (int64_t c = j; c < n; c += 16) {
                const __mmask16 lanes = first_lanes(n - c);
                block = _mm512_maskz_max_ps(kAllLanes, _mm512_mask_loadu_ps(none, lanes, x + c), block);
            }
        }
        running = _mm512_maskz_max_ps(kAllLanes, block, running);
        visit(j, std::min(n, j + 64), BlockMax16{block});
    }
    return max_lanes16(running);
}

struct BlockMax1 {
    float value;  // the block's largest element
    bool above(float t) const { return value > t; }
};

// Sixteen running maxima and the tail, updated in the same order whether or not blocks are
// visited, so the maximum is the same either way.
template <typename Visit>
inline float row_max_blocks1(const float* x, int64_t n, Visit& visit) {
    constexpr int64_t kLanes = 16;
    float lanes[kLanes];
    for (float& lane : lanes) lane = -INFINITY;
    float m = -INFINITY;  // the elements after the last whole sixteen
    for (int64_t j = 0; j < n; j += 64) {
        const int64_t stop = std::min(n, j + 64);
        float block[kLanes];
        for (float& lane : block) lane = -INFINITY;
        int64_t i = j;
        for (; i + kLanes <= stop; i += kLanes)
            for (int64_t l = 0; l < kLanes; ++l) {
                const float v = x[i + l];
                lanes[l] = v > lanes[l] ? v : lanes[l];
                block[l] = v > block[l] ? v : block[l];
            }
        float largest = -INFINITY;
        for (; i < stop; ++i) {
            largest = x[i] > largest ? x[i] : largest;
            m = x[i] > m ? x[i] : m;
        }
        for (const float lane : block) largest = lane > largest ? lane : largest;
        visit(j, stop, BlockMax1{largest});
    }
    for (const float lane : lanes) m = lane > m ? lane : m;
    return m;
}

// The avx2 level's: sixteen running maxima in two vectors of eight, and each block's in two more;
// a block's elements after its last whole sixteen are folded into its maxima.
struct BlockMax8 {
    __m256 low, high;  // lane l: the largest of the block's elements l, l + 16, ... and 8 + l, 24 + l, ...
    SEQGRAD_TARGET_AVX2 bool above(float t) const {
        const __m256 threshold = _mm256_set1_ps(t);
        return _mm256_movemask_ps(_mm256_or_ps(_mm256_cmp_ps(low, threshold, _CMP_GT_OQ),
                                               _mm256_cmp_ps(high, threshold, _CMP_GT_OQ))) != 0;
    }
};

template <typename Visit>
SEQGRAD_TARGET_AVX2 inline float row_max_blocks8(const float* x, int64_t n, Visit& visit) {
    const __m256 none = _mm256_set1_ps(-INFINITY);
    // max_ps(a, b) gives b when a is NaN: new values go first, so a NaN is never kept.
    __m256 running_low = none, running_high = none;
    for (int64_t j = 0; j < n; j += 64) {
        const int64_t stop = std::min(n, j + 64);
        __m256 low = none, high = none;
        int64_t i = j;
        for (; i + 16 <= stop; i += 16) {
            low = _mm256_max_ps(_mm256_loadu_ps(x + i), low);
            high = _mm256_max_ps(_mm256_loadu_ps(x + i + 8), high);
        }
        float rest = -INFINITY;
        for (; i < stop; ++i) rest = x[i] > rest ? x[i] : rest;
        low = _mm256_max_ps(_mm256_set1_ps(rest), low);
        running_low = _mm256_max_ps(low, running_low);
        running_high = _mm256_max_ps(high, running_high);
        visit(j, stop, BlockMax8{low, high});
    }
    return max_lanes8(_mm256_max_ps(running_low, running_high));
}

template <IsaLevel L, typename Visit>
inline float row_max_blocks(const float* x, int64_t n, Visit&& visit) {
    if constexpr (L == IsaLevel::avx512) return row_max_blocks16(x, n, visit);
    else if constexpr (L == IsaLevel::avx2) return row_max_blocks8(x, n, visit);
    else return row_max_blocks1(x, n, visit);
}

template <IsaLevel L>
inline float row_max(const float* x, int64_t n) {
    return row_max_blocks<L>(x, n, [](int64_t, int64_t, const auto&) {});
}

// sum(exp(x - m)), and with Store the exponentials into y (which may be x); m is the largest of
// x (row_max's; every caller's), so no x - m is positive and the vector levels take the exponential
// without fast_exp's guards for positive arguments (fast_exp16_nonpositive). At the avx512 level,
// two sixteen-lane sums side by side (so an addition need not wait for the one before), then the
// elements past the last 32 sixteen at a time under a mask (attention's short rows are all
// remainder); at avx2 the same with eight lanes; at the portable level, the compiler's
// vectorisation of the loop. Either way the order of additions depends on n alone, so exp_shifted
// and exp_sum agree bit for bit.
template <bool Store>
SEQGRAD_TARGET_AVX512 inline float exp_accumulate16(const float* x, float m, float* y, int64_t n) {
    const __m512 shift = _mm512_set1_ps(m);
    __m512 sum0 = _mm512_setzero_ps(), sum1 = _mm512_setzero_ps();
    int64_t j = 0;
    for (; j + 32 <= n; j += 32) {
        const __m512 e0 = fast_exp16_nonpositive(_mm512_sub_ps(_mm512_loadu_ps(x + j), shift));
        const __m512 e1 = fast_exp16_nonpositive(_mm512_sub_ps(_mm512_loadu_ps(x + j + 16), shift));
        if constexpr (Store) {
            _mm512_storeu_ps(y + j, e0);
            _mm512_storeu_ps(y + j + 16, e1);
        }
        sum0 = _mm512_add_ps(sum0, e0);
        sum1 = _mm512_add_ps(sum1, e1);
    }
    // The last 31 or fewer: sixteen lanes at a time, the missing ones masked out.
    for (; j < n; j += 16) {
        const __mmask16 lanes = first_lanes(n - j);
        const __m512 e =
            _mm512_maskz_mov_ps(lanes,
                                fast_exp16_nonpositive(_mm512_sub_ps(_mm512_maskz_loadu_ps(lanes, x + j), shift)));
        if constexpr (Store) _mm512_mask_storeu_ps(y + j, lanes, e);
        sum0 = _mm512_add_ps(sum0, e);
    }
    return sum_lanes16(_mm512_add_ps(sum0, sum1));
}

// The avx2 level's: exp_accumulate16's order in eight-lane vectors, the last seven or fewer under
// a mask.
template <bool Store>
SEQGRAD_TARGET_AVX2 inline float exp_accumulate8(const float* x, float m, float* y, int64_t n) {
    const __m256 shift = _mm256_set1_ps(m);
    __m256 sum0 = _mm256_setzero_ps(), sum1 = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
        const __m256 e0 = fast_exp8_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(x + j), shift));
        const __m256 e1 = fast_exp8_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(x + j + 8), shift));
        if constexpr (Store) {
            _mm256_storeu_ps(y + j, e0);
            _mm256_storeu_ps(y + j + 8, e1);
        }
        sum0 = _mm256_add_ps(sum0, e0);
        sum1 = _mm256_add_ps(sum1, e1);
    }
    for (; j < n; j += 8) {
        const __m256i lanes = first_lanes8(n - j);
        const __m256 e = _mm256_and_ps(fast_exp8_nonpositive(_mm256_sub_ps(_mm256_maskload_ps(x + j, lanes), shift)),
                                       _mm256_castsi256_ps(lanes));
        if constexpr (Store) _mm256_maskstore_ps(y + j, lanes, e);
        sum0 = _mm256_add_ps(sum0, e);
    }
    return sum_lanes8(_mm256_add_ps(sum0, sum1));
}

template <IsaLevel L, bool Store>
inline float exp_accumulate(const float* x, float m, float* y, int64_t n) {
    if constexpr (L == IsaLevel::avx512) {
        return exp_accumulate16<Store>(x, m, y, n);
    } else if constexpr (L == IsaLevel::avx2) {
        return exp_accumulate8<Store>(x, m, y, n);
    } else {
        float total = 0;
#pragma omp simd reduction(+ : total)
        for (int64_t j = 0; j < n; ++j) {
            const float e = fast_exp(x[j] - m);
            if constexpr (Store) y[j] = e;
            total += e;
        }
        return total;
    }
}

// y = exp(x - m); returns sum(y). y may be x.
template <IsaLevel L>
inline float exp_shifted(const float* x, float m, float* y, int64_t n) {
    return exp_accumulate<L, true>(x, m, y, n);
}

// sum(exp(x - m)) without storing the exponentials: exp_shifted's sum, added in the same order.
template <IsaLevel L>
inline float exp_sum(const float* x, float m, int64_t n) {
    return exp_accumulate<L, false>(x, m, nullptr, n);
}

// A row's sum, in one order at every level: kLanes interleaved partial sums (partial l takes the
// terms l, l + kLanes, l + 2 kLanes, ...; the compiler keeps them in vector registers), then
// combined pairwise (8 + 8, 4 + 4, 2 + 2, 1 + 1); `term(j)` gives element j's term. An `omp simd`
// reduction ends instead with its lanes added one after another through memory: on rows of 64 to
// 512 floats (layer norm's, the gradients of softmax and of attention's weights) that chain of 16
// dependent adds, not the arithmetic, set the pace.
constexpr int kLanes = 16;

// Every loop over the lanes has a constant count, so that the compiler unrolls it and keeps the
// partial sums in registers.
inline float combine_lanes(float (&lanes)[kLanes]) {
    for (int l = 0; l < 8; ++l) lanes[l] += lanes[l + 8];
    for (int l = 0; l < 4; ++l) lanes[l] += lanes[l + 4];
    for (int l = 0; l < 2; ++l) lanes[l] += lanes[l + 2];
    return lanes[0] + lanes[1];
}

template <typename Term>
inline float row_sum(int64_t n, Term term) {
    float lanes[kLanes] = {};
    int64_t j = 0;
    for (; j + kLanes <= n; j += kLanes)
        for (int l = 0; l < kLanes; ++l) lanes[l] += term(j + l);
    if (j < n)  // the last n % kLanes terms
        for (int l = 0; l < kLanes; ++l)
            if (j + l < n) lanes[l] += term(j + l);
    return combine_lanes(lanes);
}

// sum of a[j] b[j], as row_sum adds it
inline float dot(const float* a, const float* b, int64_t n) {
    return row_sum(n, [=](int64_t j) { return a[j] * b[j]; });
}

// ---- dropout masks (dropout, attention) ----

// A counter-based dropout mask: one draw from the Generator gives a call its key, and element i
// is kept when its draw dropout_draw(key, i) (hash.h) is at least p * 2^32. Element i's decision
// depends only on (key, i): loops vectorise, split across threads without changing the result,
// and a backward pass recomputes the mask instead of storing it.
struct DropoutMask {
    uint64_t key = 0;
    uint32_t threshold = 0;  // p * 2^32
    float scale = 1;         // 1 / (1 - p), or 0 when p = 1 (nothing is kept)

    DropoutMask() = default;
    // For 0 < p <= 1.
    DropoutMask(float p, Generator& gen)
        : key(gen.next_u64()),
          threshold(p < 1 ? static_cast<uint32_t>(std::ldexp(static_cast<double>(p), 32)) : UINT32_MAX),
          scale(p < 1 ? 1.0f / (1.0f - p) : 0.0f) {}

    // out[j] = in[j] times 1 / (1 - p) if element first + j is kept, else times 0, for j < n. The
    // members are copied to locals and the arrays must not overlap, so that the loop vectorises
    // (32-bit lanes: eight at avx2, sixteen at avx512) instead of reloading the members after every
    // store. Every element is read and multiplied by its factor, never skipped: a select of "in[j] *
    // s or 0" compiles to a masked load, which on AMD's Zen cores kept the loop at 40% of the speed
    // of plain loads on arrays larger than the caches (a NaN or infinite input stays NaN where it is
    // dropped, as in PyTorch).
    void apply(const float* __restrict in, float* __restrict out, int64_t n, int64_t first) const {
        const uint32_t t = threshold;
        const float s = scale;
        by_streams(n, first, [&](int64_t begin, int64_t end, uint32_t i, uint32_t a, uint32_t b) {
            for (int64_t j = begin; j < end; ++j, ++i) out[j] = in[j] * factor(i * a + b, t, s);
        });
    }
    // factors[j] = the factor apply() multiplies element first + j by (1 / (1 - p) or 0), for j < n:
    // for a backward pass that drops two rows with one mask.
    void factors(float* __restrict out, int64_t n, int64_t first) const {
        const uint32_t t = threshold;
        const float s = scale;
        by_streams(n, first, [&](int64_t begin, int64_t end, uint32_t i, uint32_t a, uint32_t b) {
            for (int64_t j = begin; j < end; ++j, ++i) out[j] = factor(i * a + b, t, s);
        });
    }

    // out[j] = f(j, factor) for j < n, factor the one apply() multiplies element first + j by: for
    // the operations that fuse dropout with the work around it (add_dropout, activation_dropout).
    // f must read nothing out writes.
    template <typename F>
    void map(float* __restrict out, int64_t n, int64_t first, F&& f) const {
        const uint32_t t = threshold;
        const float s = scale;
        by_streams(n, first, [&](int64_t begin, int64_t end, uint32_t i, uint32_t a, uint32_t b) {
#pragma omp simd
            for (int64_t j = begin; j < end; ++j)
                out[j] = f(j, factor((i + static_cast<uint32_t>(j - begin)) * a + b, t, s));
        });
    }

private:
    // f(begin, end, i, a, b) for each stretch [begin, end) of j < n whose elements first + j share
    // their high 32 bits (one stretch but past 2^32 elements): element first + begin's low 32 bits
    // i, and the stretch's a and b (dropout_step).
    template <typename F>
    void by_streams(int64_t n, int64_t first, F&& f) const {
        for (int64_t j = 0; j < n;) {
            const uint64_t index = static_cast<uint64_t>(first + j), high = index >> 32;
            const int64_t end = std::min<int64_t>(n, j + static_cast<int64_t>(((high + 1) << 32) - index));
            const DropoutStep step = dropout_step(key, high);
            f(j, end, static_cast<uint32_t>(index), step.a, step.b);
            j = end;
        }
    }
    // An element's factor from its step value: scale s if kept (its draw at least the threshold t),
    // else 0. Static, on the members' local copies, so that the loops above vectorise.
    static float factor(uint32_t step, uint32_t t, float s) { return mix32(step) >= t ? s : 0.0f; }
};

}  // namespace seqgrad::detail
