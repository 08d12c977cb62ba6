// Products of small matrices held in vector registers: attention's per-head products (ops/
// attention.cpp), whose sides are a head's width and a block of queries or keys, a few dozen each.
// sgemm copies both operands into panels and clears C at every such call; at OpenBLAS's Haswell
// kernels the copies and the call cost about as much as the arithmetic. Here nothing is copied:
// each tile of C, 6 rows by two vectors of columns at avx2 (12 at avx512), reads B's rows where
// they lie, broadcasts A's elements one at a time, and goes to memory once at the end.
//
// Every element's sum runs over k in order, one fused multiply-add per term, whatever tile it falls
// in: an element comes out the same in a product of any size around it (attention's blocks of
// queries rely on it). Vectors of 8 lanes at the avx2 level, of 16 at avx512. Internal to core/.
#pragma once

#include <cstdint>

#include "vector_math.h"

#if SEQGRAD_HAVE_ISA_LEVELS
namespace seqgrad::detail {

// Rows of a whole tile at level L: 6 at avx2 (12 of its 16 registers hold sums), 12 at avx512 (24
// of 32).
template <IsaLevel L>
constexpr int kProductTileRows = L == IsaLevel::avx512 ? 12 : 6;

// One tile: C[Rows, 8 Vecs] = (or +=) A[Rows, k] B[k, 8 Vecs], with A's element (r, p) at
// a[r * a_row + p * a_col]. When Partial, the last vector holds only `last` columns (0 < last <= 8):
// B and C are neither read nor written past them.
template <int Rows, int Vecs, bool Partial>
SEQGRAD_TARGET_AVX2 inline void product_tile_avx2(int64_t k, const float* a, int64_t a_row, int64_t a_col,
                                                  const float* b, int64_t ldb, float* c, int64_t ldc, bool accumulate,
                                                  int64_t last) {
    const __m256i lanes = first_lanes8(last);
    __m256 sum[Rows][Vecs];
    for (int r = 0; r < Rows; ++r)
        for (int v = 0; v < Vecs; ++v) sum[r][v] = _mm256_setzero_ps();
    for (int64_t p = 0; p < k; ++p) {
        const float* row = b + p * ldb;
        __m256 bv[Vecs];
        for (int v = 0; v < Vecs; ++v)
            bv[v] = Partial && v == Vecs - 1 ? _mm256_maskload_ps(row + 8 * v, lanes) : _mm256_loadu_ps(row + 8 * v);
        const float* ap = a + p * a_col;
        for (int r = 0; r < Rows; ++r) {
            const __m256 s = _mm256_broadcast_ss(ap + r * a_row);
            for (int v = 0; v < Vecs; ++v) sum[r][v] = _mm256_fmadd_ps(s, bv[v], sum[r][v]);
        }
    }
    for (int r = 0; r < Rows; ++r)
        for (int v = 0; v < Vecs; ++v) {
            float* out = c + r * ldc + 8 * v;
            const bool partial = Partial && v == Vecs - 1;
            if (accumulate)
                sum[r][v] = _mm256_add_ps(partial ? _mm256_maskload_ps(out, lanes) : _mm256_loadu_ps(out), sum[r][v]);
            if (partial) _mm256_maskstore_ps(out, lanes, sum[r][v]);
            else _mm256_storeu_ps(out, sum[r][v]);
        }
}

// The same with vectors of 16 lanes (0 < last <= 16).
template <int Rows, int Vecs, bool Partial>
SEQGRAD_TARGET_AVX512 inline void product_tile_avx512(int64_t k, const float* a, int64_t a_row, int64_t a_col,
                                                      const float* b, int64_t ldb, float* c, int64_t ldc,
                                                      bool accumulate, int64_t last) {
    const __mmask16 lanes = Partial ? first_lanes(last) : kAllLanes;
    __m512 sum[Rows][Vecs];
    for (int r = 0; r < Rows; ++r)
        for (int v = 0; v < Vecs; ++v) sum[r][v] = _mm512_setzero_ps();
    for (int64_t p = 0; p < k; ++p) {
        const float* row = b + p * ldb;
        __m512 bv[Vecs];
        for (int v = 0; v < Vecs; ++v) bv[v] = _mm512_maskz_loadu_ps(v == Vecs - 1 ? lanes : kAllLanes, row + 16 * v);
        const float* ap = a + p * a_col;
        for (int r = 0; r < Rows; ++r) {
            const __m512 s = _mm512_set1_ps(ap[r * a_row]);
            for (int v = 0; v < Vecs; ++v) sum[r][v] = _mm512_fmadd_ps(s, bv[v], sum[r][v]);
        }
    }
    for (int r = 0; r < Rows; ++r)
        for (int v = 0; v < Vecs; ++v) {
            float* out = c + r * ldc + 16 * v;
            const __mmask16 kept = v == Vecs - 1 ? lanes : kAllLanes;
            if (accumulate) sum[r][v] = _mm512_add_ps(_mm512_maskz_loadu_ps(kept, out), sum[r][v]);
            _mm512_mask_storeu_ps(out, kept, sum[r][v]);
        }
}

template <IsaLevel L, int Rows, int Vecs, bool Partial>
inline void product_tile(int64_t k, const float* a, int64_t a_row, int64_t a_col, const float* b, int64_t ldb, float* c,
                         int64_t ldc, bool accumulate, int64_t last) {
    if constexpr (L == IsaLevel::avx512)
        product_tile_avx512<Rows, Vecs, Partial>(k, a, a_row, a_col, b, ldb, c, ldc, accumulate, last);
    else product_tile_avx2<Rows, Vecs, Partial>(k, a, a_row, a_col, b, ldb, c, ldc, accumulate, last);
}

// A column panel of C (Vecs vectors) down all m rows: whole tiles, then (at avx512) one of 6 rows,
// then one of the rows left.
template <IsaLevel L, int Vecs, bool Partial>
inline void product_panel(int64_t m, int64_t k, const float* a, int64_t a_row, int64_t a_col, const float* b,
                          int64_t ldb, float* c, int64_t ldc, bool accumulate, int64_t last) {
    constexpr int TileRows = kProductTileRows<L>;
    int64_t i = 0;
    for (; i + TileRows <= m; i += TileRows)
        product_tile<L, TileRows, Vecs, Partial>(k, a + i * a_row, a_row, a_col, b, ldb, c + i * ldc, ldc, accumulate,
                                                 last);
    if constexpr (TileRows > 6) {
        if (i + 6 <= m) {
            product_tile<L, 6, Vecs, Partial>(k, a + i * a_row, a_row, a_col, b, ldb, c + i * ldc, ldc, accumulate,
                                              last);
            i += 6;
        }
    }
    const float* ai = a + i * a_row;
    float* ci = c + i * ldc;
    switch (m - i) {
        case 1: return product_tile<L, 1, Vecs, Partial>(k, ai, a_row, a_col, b, ldb, ci, ldc, accumulate, last);
        case 2: return product_tile<L, 2, Vecs, Partial>(k, ai, a_row, a_col, b, ldb, ci, ldc, accumulate, last);
        case 3: return product_tile<L, 3, Vecs, Partial>(k, ai, a_row, a_col, b, ldb, ci, ldc, accumulate, last);
        case 4: return product_tile<L, 4, Vecs, Partial>(k, ai, a_row, a_col, b, ldb, ci, ldc, accumulate, last);
        case 5: return product_tile<L, 5, Vecs, Partial>(k, ai, a_row, a_col, b, ldb, ci, ldc, accumulate, last);
        default: return;
    }
}

// C[m, n] = op(A) B, or C += op(A) B when accumulate, at level L (avx2 or avx512); row-major with
// row strides lda, ldb and ldc; A stored [m, k], or [k, m] when ta; B stored [k, n]. Extents
// positive.
template <IsaLevel L>
void small_product(bool ta, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
                   float* c, int64_t ldc, bool accumulate) {
    constexpr int64_t lanes = L == IsaLevel::avx512 ? 16 : 8;
    const int64_t a_row = ta ? 1 : lda, a_col = ta ? lda : 1;
    int64_t j = 0;
    for (; j + 2 * lanes <= n; j += 2 * lanes)
        product_panel<L, 2, false>(m, k, a, a_row, a_col, b + j, ldb, c + j, ldc, accumulate, lanes);
    const int64_t left = n - j;  // columns after the last whole panel: fewer than two vectors
    if (left > lanes)
        product_panel<L, 2, true>(m, k, a, a_row, a_col, b + j, ldb, c + j, ldc, accumulate, left - lanes);
    else if (left > 0) product_panel<L, 1, true>(m, k, a, a_row, a_col, b + j, ldb, c + j, ldc, accumulate, left);
}

}  // namespace seqgrad::detail
#endif
