// The one place seqgrad calls sgemm, or for the products of weight matrices oneDNN's float32 matmul
// in its stead (float32_products(), precision.h), and, in bf16 mode, oneDNN's bfloat16 products
// (bf16.cpp).
// OpenBLAS runs single-threaded (threads.cpp); a product large enough to be worth it is split here
// into blocks of rows (or columns), a few per thread of the pool, or, for a weight's gradient summed
// over many rows, into one part of the sum per thread; attention's per-head products (already
// spread over the pool) come as single blocks.
#include "blas.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstring>
#include <string>

#include "parallel.h"
#include "scratch.h"
#include "seqgrad/core/error.h"
#include "seqgrad/core/precision.h"

namespace seqgrad::detail {
namespace {

// Multiply-adds below which a product runs on one thread: waking a worker costs about as much.
constexpr double kSplitWork = 1 << 20;

std::atomic<int64_t> sums_in_parts{0};

}  // namespace

void gemm_block(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                int64_t ldb, float* c, int64_t ldc, bool accumulate) {
    if (m == 1 && !ta) {  // one row (decoding one sentence): sgemm would copy all of B into its panels first
        cblas_sgemv(CblasRowMajor, tb ? CblasNoTrans : CblasTrans, static_cast<int>(tb ? n : k),
                    static_cast<int>(tb ? k : n), 1.0f, b, static_cast<int>(ldb), a, 1, accumulate ? 1.0f : 0.0f, c, 1);
        return;
    }
    // For beta = 0 OpenBLAS first clears C in a pass of its own, one float at a time with its Haswell
    // and Zen kernels (sgemm_beta: 3.8% of the GPT's training step on a Zen 1). Cleared here by
    // memset's vector stores, C is then added to (beta = 1): the same sums, the same result.
    if (!accumulate) {
        if (ldc == n) std::memset(c, 0, sizeof(float) * static_cast<size_t>(m * n));
        else
            for (int64_t i = 0; i < m; ++i) std::memset(c + i * ldc, 0, sizeof(float) * static_cast<size_t>(n));
    }
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<int>(m),
                static_cast<int>(n), static_cast<int>(k), 1.0f, a, static_cast<int>(lda), b, static_cast<int>(ldb),
                1.0f, c, static_cast<int>(ldc));
}

void check_blas_size(int64_t n, const char* op) {
    check(n <= INT_MAX, op, "a matrix extent of ", n, " exceeds what BLAS can index");
}

namespace {

// Runs C = op(A) op(B) (+ C) as `block` calls (gemm_block's arguments, on A's and B's element type):
// one call for a small product, else the longer side of C cut into blocks of whole 16-row (or
// column) tiles, up to ThreadPool::kPartsPerThread a thread of the pool.
template <typename T, typename Block>
void split_product(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, const T* b, float* c, bool accumulate,
                   const Block& block) {
    const int64_t lda = ta ? m : k, ldb = tb ? k : n, ldc = n;
    const double work = static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
    if (work < kSplitWork || get_num_threads() == 1 || ThreadPool::in_worker()) {
        block(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, accumulate);
        return;
    }
    const bool by_rows = m >= n;
    const int64_t side = by_rows ? m : n;
    const int64_t tiles = (side + 15) / 16;
    // At least four tiles a part where there are enough for one part a thread: each part's sgemm
    // copies the whole of the operand it does not split into its own panels.
    parallel_for(tiles, balanced_grain(tiles, 4), [&](int64_t first_tile, int64_t end_tile) {
        const int64_t begin = first_tile * 16, end = std::min(side, end_tile * 16);
        if (by_rows)  // rows [begin, end) of A (or of A^T) and C
            block(ta, tb, end - begin, n, k, ta ? a + begin : a + begin * lda, lda, b, ldb, c + begin * ldc, ldc,
                  accumulate);
        else  // columns [begin, end) of B (or of B^T) and C
            block(ta, tb, m, end - begin, k, a, lda, tb ? b + begin * ldb : b + begin, ldb, c + begin, ldc, accumulate);
    });
}

// The same product with A and B rounded to bfloat16 first (into this thread's buffers, which the
// pool's threads read during the call). An error on a worker is carried back to the caller.
void gemm_bf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, const float* b, float* c,
               bool accumulate) {
    thread_local Scratch<uint16_t> half_a, half_b;
    uint16_t* rounded_a = half_a.get(m * k);
    uint16_t* rounded_b = half_b.get(k * n);
    round_to_bf16(a, m * k, rounded_a);
    round_to_bf16(b, k * n, rounded_b);
    FirstFailure failure;
    split_product(ta, tb, m, n, k, rounded_a, rounded_b, c, accumulate,
                  [&](bool ta_, bool tb_, int64_t m_, int64_t n_, int64_t k_, const uint16_t* a_, int64_t lda,
                      const uint16_t* b_, int64_t ldb, float* c_, int64_t ldc, bool acc) {
        failure.run([&] { gemm_block_bf16(ta_, tb_, m_, n_, k_, a_, lda, b_, ldb, c_, ldc, acc); });
    });
    if (!failure.message().empty()) throw Error(failure.message());
}

}  // namespace

namespace {

// C [m, n] = A^T B (+ C) with A stored [k, m] and B [k, n], as a weight's gradient dW = dy^T x is:
// a small result summed over many rows (the batch's tokens). Split by C's rows, each thread's
// sgemm copies all of B and runs the whole length of the sum for half of C: 256 x 256 over 3,072
// rows ran at 150-160 GFLOP/s on two AVX2 cores (OpenBLAS Haswell, AMD EPYC Zen 4, operands from
// memory). Here each thread computes all of C over its own stretch of the rows, 185-188 GFLOP/s,
// and the parts are added into C after (one pass over C, 256 KB there). Used where k is at least
// twice C's longer side and C is at most 2^20 elements; the parts are added in order, so a given
// number of threads always gives the same result. Returns false, having done nothing, elsewhere.
bool sum_in_parts(int64_t m, int64_t n, int64_t k, const float* a, const float* b, float* c, bool accumulate) {
    const int64_t threads = get_num_threads();
    if (threads < 2 || ThreadPool::in_worker() || k < 2 * std::max(m, n) || m * n > (int64_t{1} << 20) ||
        static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) < kSplitWork)
        return false;
    const int64_t parts = std::min(threads, k / std::max<int64_t>(std::max(m, n), 64));
    if (parts < 2) return false;
    thread_local Scratch<float> sums;
    float* rest = sums.get((parts - 1) * m * n);
    const int64_t rows = (k + parts - 1) / parts;
    parallel_for(parts, 1, [&](int64_t first_part, int64_t end_part) {  // one part a thread
        for (int64_t part = first_part; part < end_part; ++part) {
            const int64_t first = part * rows, count = std::min(k, first + rows) - first;
            float* out = part == 0 ? c : rest + (part - 1) * m * n;
            if (count <= 0) {
                if (part > 0) std::fill_n(out, m * n, 0.0f);
                continue;
            }
            gemm_block(true, false, m, n, count, a + first * m, m, b + first * n, n, out, n, part == 0 && accumulate);
        }
    });
    parallel_for(m * n, 1 << 14, [&](int64_t begin, int64_t end) {
        for (int64_t p = 1; p < parts; ++p) {
            const float* __restrict part = rest + (p - 1) * m * n;
            float* __restrict out = c;
            for (int64_t i = begin; i < end; ++i) out[i] += part[i];
        }
    });
    sums_in_parts.fetch_add(1, std::memory_order_relaxed);
    return true;
}

void product(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, const float* b, float* c,
             bool accumulate, bool onednn_allowed) {
    if (m == 0 || n == 0) return;
    if (k == 0) {  // an empty sum: BLAS implementations differ on whether they touch C
        if (!accumulate) std::fill_n(c, m * n, 0.0f);
        return;
    }
    if (matmul_precision() == Precision::bf16) {
        gemm_bf16(ta, tb, m, n, k, a, b, c, accumulate);
        return;
    }
    // One row (decoding one sentence) stays on gemm_block's sgemv.
    if (onednn_allowed && !(m == 1 && !ta) && float32_products_on_onednn()) {
        split_product(ta, tb, m, n, k, a, b, c, accumulate, gemm_block_onednn);
        return;
    }
    if (onednn_allowed && ta && !tb && sum_in_parts(m, n, k, a, b, c, accumulate)) return;
    split_product(ta, tb, m, n, k, a, b, c, accumulate, gemm_block);
}

}  // namespace

int64_t products_summed_in_parts() { return sums_in_parts.load(std::memory_order_relaxed); }

void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, const float* b, float* c,
          bool accumulate) {
    product(ta, tb, m, n, k, a, b, c, accumulate, false);
}

void gemm_weights(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, const float* b, float* c,
                  bool accumulate) {
    product(ta, tb, m, n, k, a, b, c, accumulate, true);
}

}  // namespace seqgrad::detail
