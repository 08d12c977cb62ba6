// The bridge to OpenBLAS: the CBLAS entry points seqgrad uses, and OpenBLAS's own controls.
#pragma once

extern "C" {
#include <cblas.h>
// Declared here as well as in OpenBLAS's cblas.h, so that any CBLAS header will do.
void openblas_set_num_threads(int num_threads);
int openblas_get_num_threads(void);
char* openblas_get_corename(void);
// OpenBLAS's own way to stop its threads (it calls it before a fork, and starts them again when a
// call next needs them). Weak, so that a BLAS without it still links: then it is null.
int blas_thread_shutdown_(void) __attribute__((weak));
}

#include <cstdint>

namespace seqgrad::detail {

// Throws Error naming `op` if a matrix extent does not fit BLAS's int.
void check_blas_size(int64_t n, const char* op);

// C[m, n] = op(A) op(B), or C += op(A) op(B) when accumulate; in float32, or with both operands
// rounded to bfloat16 when matmul_precision() is bf16 (precision.h; the sums and C stay float32);
// row-major, A stored [m, k] (or [k, m] when ta), B stored [k, n] (or [n, k] when tb). Extents may
// be zero.
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, const float* b, float* c, bool accumulate);

// gemm for the products of a weight matrix (linear layers, the LSTM's gates): in float32 on
// oneDNN's matmul instead of sgemm where float32_products() is "onednn" (precision.h). On sgemm, a
// weight's gradient A^T B summed over many more rows than C has on a side runs as one part of the
// sum per thread, added together after (blas.cpp, sum_in_parts). Plain matmul stays on sgemm, whose
// sum for an element does not depend on the shape of the product around it. (Attention's per-head
// products run in vector registers of their own above the portable level: ops/small_product.h.)
void gemm_weights(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, const float* b, float* c,
                  bool accumulate);
// How many of gemm_weights' products have run so, in parts of their sum (tests check the dispatch).
int64_t products_summed_in_parts();

// The same on the calling thread alone, with row strides of its own (lda, ldb, ldc): a block of
// larger matrices, such as one attention head's columns (ops/attention.cpp). Extents must be
// positive.
void gemm_block(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                int64_t ldb, float* c, int64_t ldc, bool accumulate);

// The bfloat16 side (bf16.cpp): x [n] rounded to bfloat16 (to_bf16, on the pool's threads), and
// gemm_block on bfloat16 operands through oneDNN, on the calling thread (Error if oneDNN fails or
// is missing).
void round_to_bf16(const float* x, int64_t n, uint16_t* out);
// gemm_block on oneDNN's float32 matmul (bf16.cpp), and whether gemm_weights runs on it.
void gemm_block_onednn(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                       int64_t ldb, float* c, int64_t ldc, bool accumulate);
bool float32_products_on_onednn();
// Whether products of weights run on sgemm in float32 (neither on oneDNN's matmul nor in bf16):
// the products WeightPanels can stand in for, and the ones a pool's thread may call (oneDNN's and
// bf16's throw their errors on the calling thread, which on a worker would end the program).
bool weight_products_on_sgemm();
// How many blocks gemm_block_onednn has run in this process (tests check the dispatch with it).
int64_t onednn_float32_blocks_run();
void gemm_block_bf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda,
                     const uint16_t* b, int64_t ldb, float* c, int64_t ldc, bool accumulate);

}  // namespace seqgrad::detail
