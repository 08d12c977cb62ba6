// WeightPanels (panels.h): the weight as panels of 16 columns, [k][16] each, read by a kernel of
// six rows by 16 columns whose 12 sums stay in AVX2 registers (the AVX-512 CPUs run it too, where
// products of weights are asked of sgemm). The pool's threads split the panels, each keeping its
// own for every product of the sequence; the rows of A are read in place, six at a time, each
// input's 16 weights once for the six.
#include "panels.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "blas.h"
#include "parallel.h"
#include "seqgrad/core/isa_dispatch.h"
#include "seqgrad/core/precision.h"

#if SEQGRAD_HAVE_ISA_LEVELS
#include <immintrin.h>
#endif

namespace seqgrad::detail {
namespace {

constexpr int64_t kPanel = 16;
constexpr int kTileRows = 6;
constexpr int64_t kStretch = 256;              // inputs a panel's stretch holds: 16 KB, in L1 while the rows pass
constexpr int64_t kRowBlock = 20 * kTileRows;  // rows a stretch meets in turn: 120 KB of A at most, in L2
// Rows above which sgemm, copying the rows into its own panels too, is as fast or faster (at the
// avx2 level on an AMD EPYC: 32 and 64 rows 3-12% faster here, 128 and 256 rows 2-7% slower).
constexpr int64_t kMostRows = 64;
// Products below which the weight's copy into panels is not paid back: a one-step sequence (the
// attention decoder's, step by step) went 25-40% slower in its LSTM layers with them.
constexpr int64_t kFewestProducts = 4;
// Multiply-adds below which a product runs on one thread: waking a worker costs about as much.
constexpr double kSplitWork = 1 << 20;

#if SEQGRAD_HAVE_ISA_LEVELS
// R rows (rows lda apart) by one panel's 16 columns over a stretch of kc inputs: w the stretch's
// first weights, a the rows' first inputs, c the tile's first sums (rows ldc apart), which the
// stretch's products add to when `load`, else replace.
template <int R>
SEQGRAD_TARGET_AVX2 inline void tile(const float* __restrict w, int64_t kc, const float* __restrict a, int64_t lda,
                                     float* __restrict c, int64_t ldc, bool load) {
    __m256 lo[R], hi[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
        lo[r] = load ? _mm256_loadu_ps(c + r * ldc) : _mm256_setzero_ps();
        hi[r] = load ? _mm256_loadu_ps(c + r * ldc + 8) : _mm256_setzero_ps();
    }
    for (int64_t k = 0; k < kc; ++k, w += kPanel) {
        const __m256 w_lo = _mm256_load_ps(w), w_hi = _mm256_load_ps(w + 8);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
            const __m256 x = _mm256_broadcast_ss(a + r * lda + k);
            lo[r] = _mm256_fmadd_ps(w_lo, x, lo[r]);
            hi[r] = _mm256_fmadd_ps(w_hi, x, hi[r]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
        _mm256_storeu_ps(c + r * ldc, lo[r]);
        _mm256_storeu_ps(c + r * ldc + 8, hi[r]);
    }
}

template <int R>
SEQGRAD_TARGET_AVX2 void tile_any(const float* w, int64_t kc, const float* a, int64_t lda, float* c, int64_t ldc,
                                  bool load, int64_t cols) {
    if (cols == kPanel) return tile<R>(w, kc, a, lda, c, ldc, load);
    alignas(32) float part[R * kPanel] = {};  // the panel's last columns: through a whole tile here
    if (load)
        for (int r = 0; r < R; ++r) std::memcpy(part + r * kPanel, c + r * ldc, static_cast<size_t>(cols) * 4);
    tile<R>(w, kc, a, lda, part, kPanel, load);
    for (int r = 0; r < R; ++r) std::memcpy(c + r * ldc, part + r * kPanel, static_cast<size_t>(cols) * 4);
}

// Panels [p0, p1) of C's columns for all m rows: stretch by stretch of the inputs, each panel's
// stretch meeting a block of rows six at a time while it stays in the first-level cache.
SEQGRAD_TARGET_AVX2 void panels_avx2(const float* panels, int64_t p0, int64_t p1, int64_t m, int64_t n, int64_t k,
                                     const float* a, float* c, bool accumulate) {
    for (int64_t k0 = 0; k0 < k; k0 += kStretch) {
        const int64_t kc = std::min(kStretch, k - k0);
        const bool load = accumulate || k0 > 0;
        for (int64_t i0 = 0; i0 < m; i0 += kRowBlock) {
            const int64_t rows = std::min(kRowBlock, m - i0);
            for (int64_t p = p0; p < p1; ++p) {
                const float* w = panels + p * k * kPanel + k0 * kPanel;
                const int64_t cols = std::min(kPanel, n - p * kPanel);
                const float* ar = a + i0 * k + k0;
                float* cr = c + i0 * n + p * kPanel;
                int64_t i = 0;
                for (; i + kTileRows <= rows; i += kTileRows)
                    tile_any<kTileRows>(w, kc, ar + i * k, k, cr + i * n, n, load, cols);
                switch (rows - i) {
                    case 1: tile_any<1>(w, kc, ar + i * k, k, cr + i * n, n, load, cols); break;
                    case 2: tile_any<2>(w, kc, ar + i * k, k, cr + i * n, n, load, cols); break;
                    case 3: tile_any<3>(w, kc, ar + i * k, k, cr + i * n, n, load, cols); break;
                    case 4: tile_any<4>(w, kc, ar + i * k, k, cr + i * n, n, load, cols); break;
                    case 5: tile_any<5>(w, kc, ar + i * k, k, cr + i * n, n, load, cols); break;
                    default: break;
                }
            }
        }
    }
}
#endif

}  // namespace

bool weight_panels_run() {
#if SEQGRAD_HAVE_ISA_LEVELS
    return isa_level() >= IsaLevel::avx2 && matmul_precision() == Precision::float32 && !float32_products_on_onednn();
#else
    return false;
#endif
}

void WeightPanels::Free::operator()(float* p) const { std::free(p); }

WeightPanels::WeightPanels(const float* weight, int64_t n, int64_t k, bool transposed, int64_t rows, int64_t products)
    : weight_(weight), n_(n), k_(k), transposed_(transposed) {
    if (n <= 0 || k <= 0 || rows > kMostRows || products < kFewestProducts || !weight_panels_run()) return;
    const int64_t count = (n + kPanel - 1) / kPanel;
    const size_t bytes = static_cast<size_t>(count * k * kPanel) * sizeof(float);
    auto* room = static_cast<float*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64));
    if (room == nullptr) throw std::bad_alloc();
    panels_.reset(room);
    float* out = room;
    parallel_for(count, std::max<int64_t>(1, (1 << 14) / (k * kPanel)), [=](int64_t begin, int64_t end) {
        for (int64_t q = begin; q < end; ++q) {
            float* panel = out + q * k * kPanel;
            const int64_t c0 = q * kPanel, cols = std::min(kPanel, n - c0);
            if (cols < kPanel) std::fill_n(panel, k * kPanel, 0.0f);
            if (transposed) {  // weight [n, k]: column c of B is row c of the weight
                for (int64_t j = 0; j < cols; ++j) {
                    const float* row = weight + (c0 + j) * k;
                    for (int64_t i = 0; i < k; ++i) panel[i * kPanel + j] = row[i];
                }
            } else {  // weight [k, n]
                for (int64_t i = 0; i < k; ++i) std::copy_n(weight + i * n + c0, cols, panel + i * kPanel);
            }
        }
    });
}

WeightPanels::~WeightPanels() = default;

void WeightPanels::multiply(int64_t m, const float* a, float* c, bool accumulate) const {
    if (m <= 0 || n_ <= 0) return;
    if (!active()) {
        gemm_weights(false, transposed_, m, n_, k_, a, weight_, c, accumulate);
        return;
    }
#if SEQGRAD_HAVE_ISA_LEVELS
    const int64_t count = (n_ + kPanel - 1) / kPanel;
    const float* panels = panels_.get();
    const int64_t n = n_, k = k_;
    const double work = static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
    if (work < kSplitWork) {
        panels_avx2(panels, 0, count, m, n, k, a, c, accumulate);
        return;
    }
    // The same split of the panels at every call, so that each thread meets its own again.
    parallel_for(count, 1,
                 [=](int64_t begin, int64_t end) { panels_avx2(panels, begin, end, m, n, k, a, c, accumulate); });
#endif
}

}  // namespace seqgrad::detail
