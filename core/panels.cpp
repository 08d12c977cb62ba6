// WeightPanels (panels.h): the weight as panels of 16 columns, [k][16] each (in stretches of 256
// inputs, stretch by stretch across the panels), read by a kernel of
// six rows by 16 columns whose 12 sums stay in AVX2 registers (the AVX-512 CPUs run it too, where
// products of weights are asked of sgemm). The pool's threads split the panels, each keeping its
// own for every product of the sequence; the rows of A are read in place, six at a time, each
// input's 16 weights once for the six.
#include "panels.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "blas.h"
#include "parallel.h"
#include "seqgrad/core/error.h"
#include "seqgrad/core/isa_dispatch.h"
#include "seqgrad/core/ops.h"

#if SEQGRAD_HAVE_ISA_LEVELS
#include <immintrin.h>
#endif

namespace seqgrad::detail {
namespace {

constexpr int64_t kPanel = 16;
constexpr int kTileRows = 6;
constexpr int64_t kStretch = 256;              // inputs a panel's stretch holds: 16 KB, in L1 while the rows pass
constexpr int64_t kRowBlock = 20 * kTileRows;  // rows a stretch meets in turn: 120 KB of A at most, in L2
// Rows above which sgemm, copying the rows into its own panels too, is as fast. At the avx2 level
// on an AMD EPYC: products of 32 to 64 rows 8-33% faster here; of 128 to 512 rows on one thread
// (n 1024, k 256 to 1024) even to 6% faster, at 2048 rows 3% slower. Above kColumnSplitRows
// the threads split the rows: a whole LSTM layer of 256 rows, 12 steps, whose threads each
// take half the rows through every step, 3% faster than on sgemm, which copies the weight at
// every step; split by columns it was only as fast, with two waits a step.
constexpr int64_t kMostRows = 512;
// Rows a thread takes at least where the threads split the rows.
constexpr int64_t kRowsGrain = 30;
// Products below which the weight's copy into panels is not paid back: a one-step sequence (the
// attention decoder's, step by step) went 25-40% slower in its LSTM layers with them.
constexpr int64_t kFewestProducts = 4;
// Where panel q's stretch of inputs [k0, k0 + kc) lies: [kc][16] floats. The stretches lie in the
// order the kernel reads them, each stretch's panels one after another, so that a thread's panels
// stream from memory in long runs rather than 16 KB pieces 4 k floats apart.
template <class T>
T* stretch_of(T* panels, int64_t q, int64_t k0, int64_t kc, int64_t n) {
    const int64_t count = (n + kPanel - 1) / kPanel;
    return panels + k0 * count * kPanel + q * kc * kPanel;
}

// Inputs ahead of the kernel whose weights it asks the memory for (4 KB; the stretches lie in the
// order they are read, so past a stretch's end lies the thread's next). The weights of a decoder's
// step (four LSTM weights, 20 MB) come from beyond the caches at every step: 32 x 2048 products ran
// at 155-160 GFLOP/s without it, 185-190 with it, on the avx2 level of an AMD EPYC.
constexpr int64_t kAhead = 64;

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
        _mm_prefetch(reinterpret_cast<const char*>(w + kAhead * kPanel), _MM_HINT_T0);
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

// A whole panel's stretch of kc inputs from a weight stored [n, k] (16 of its rows, from `rows`,
// k apart): the stretch's input i is the 16 rows' i-th values, so each block of 8 rows by 8 inputs
// is transposed in registers; inputs past the last multiple of 8 one by one.
SEQGRAD_TARGET_AVX2 void lay_out_rows(const float* rows, int64_t k, int64_t kc, float* panel) {
    int64_t i = 0;
    for (; i + 8 <= kc; i += 8)
        for (int64_t half = 0; half < 2; ++half) {
            const float* block = rows + half * 8 * k + i;
            __m256 r[8], t[8];
            for (int j = 0; j < 8; ++j) r[j] = _mm256_loadu_ps(block + j * k);
            for (int j = 0; j < 8; j += 2) {  // pairs of rows interleaved: (r0 r1) by twos
                t[j] = _mm256_unpacklo_ps(r[j], r[j + 1]);
                t[j + 1] = _mm256_unpackhi_ps(r[j], r[j + 1]);
            }
            for (int j = 0; j < 8; j += 4) {  // then fours: within each 128-bit lane, 4 rows' values
                r[j] = _mm256_shuffle_ps(t[j], t[j + 2], 0x44);
                r[j + 1] = _mm256_shuffle_ps(t[j], t[j + 2], 0xEE);
                r[j + 2] = _mm256_shuffle_ps(t[j + 1], t[j + 3], 0x44);
                r[j + 3] = _mm256_shuffle_ps(t[j + 1], t[j + 3], 0xEE);
            }
            for (int j = 0; j < 4; ++j) {  // rows 0-3's lane beside rows 4-7's: input i + j, then i + 4 + j
                _mm256_store_ps(panel + (i + j) * kPanel + half * 8, _mm256_permute2f128_ps(r[j], r[j + 4], 0x20));
                _mm256_store_ps(panel + (i + 4 + j) * kPanel + half * 8, _mm256_permute2f128_ps(r[j], r[j + 4], 0x31));
            }
        }
    for (; i < kc; ++i)
        for (int64_t j = 0; j < kPanel; ++j) panel[i * kPanel + j] = rows[j * k + i];
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
                const float* w = stretch_of(panels, p, k0, kc, n);
                const int64_t cols = std::min(kPanel, n - p * kPanel);
                const float* ar = a + i0 * k + k0;
                float* cr = c + i0 * n + p * kPanel;
                // Whole tiles of six rows, but a last one, two or three rows join the last whole
                // tile as two tiles of four or five: a tile's sums are its chains of dependent
                // multiply-adds, and two rows' four are too few to keep both units busy.
                const int64_t left = rows % kTileRows, whole = rows / kTileRows;
                const int64_t six_rows = left >= 1 && left <= 3 && whole > 0 ? (whole - 1) * kTileRows : rows - left;
                int64_t i = 0;
                for (; i < six_rows; i += kTileRows)
                    tile_any<kTileRows>(w, kc, ar + i * k, k, cr + i * n, n, load, cols);
                if (rows - i > kTileRows) {  // 7 to 9 rows: four and three, four and four, or five and four
                    const int64_t first = (rows - i + 1) / 2;
                    if (first == 5) tile_any<5>(w, kc, ar + i * k, k, cr + i * n, n, load, cols);
                    else tile_any<4>(w, kc, ar + i * k, k, cr + i * n, n, load, cols);
                    i += first;
                }
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
    return isa_level() >= IsaLevel::avx2 && weight_products_on_sgemm();
#else
    return false;
#endif
}

namespace {

// Whether WeightPanels for these extents, rows and products lay the weight out now; where not,
// their products are gemm_weights'.
bool panels_would_run(int64_t n, int64_t k, int64_t rows, int64_t products) {
    return n > 0 && k > 0 && rows <= kMostRows && products >= kFewestProducts && weight_panels_run();
}

}  // namespace

WeightPanels::WeightPanels(const float* weight, int64_t n, int64_t k, bool transposed, int64_t rows, int64_t products)
    : weight_(weight), n_(n), k_(k), transposed_(transposed) {
    if (!panels_would_run(n, k, rows, products)) return;
    const int64_t count = (n + kPanel - 1) / kPanel;
    block_ = allocate_floats(count * k * kPanel);
    float* out = block_.data;
    parallel_for(count, std::max<int64_t>(1, (1 << 14) / (k * kPanel)), [=](int64_t begin, int64_t end) {
        for (int64_t q = begin; q < end; ++q) {
            const int64_t c0 = q * kPanel, cols = std::min(kPanel, n - c0);
            for (int64_t k0 = 0; k0 < k; k0 += kStretch) {
                const int64_t kc = std::min(kStretch, k - k0);
                float* panel = stretch_of(out, q, k0, kc, n);
#if SEQGRAD_HAVE_ISA_LEVELS
                if (transposed && cols == kPanel) {  // weight [n, k]: column c of B is row c of the weight
                    lay_out_rows(weight + c0 * k + k0, k, kc, panel);
                    continue;
                }
#endif
                if (cols < kPanel) std::fill_n(panel, kc * kPanel, 0.0f);
                for (int64_t i = 0; i < kc; ++i) {
                    if (!transposed) {  // weight [k, n]
                        std::copy_n(weight + (k0 + i) * n + c0, cols, panel + i * kPanel);
                        continue;
                    }
                    for (int64_t j = 0; j < cols; ++j) panel[i * kPanel + j] = weight[(c0 + j) * k + k0 + i];
                }
            }
        }
    });
}

WeightPanels::~WeightPanels() {
    if (block_.data != nullptr) free_floats(block_);
}

void WeightPanels::multiply(int64_t m, const float* a, float* c, bool accumulate) const {
    const double work = static_cast<double>(m) * static_cast<double>(n_) * static_cast<double>(k_);
    // sgemm splits its own products; small ones are not worth a worker's wake-up.
    if (!active() || m <= 0 || n_ <= 0 || work < kSplitWork) return multiply_here(m, a, c, accumulate);
#if SEQGRAD_HAVE_ISA_LEVELS
    const int64_t count = (n_ + kPanel - 1) / kPanel;
    const float* panels = block_.data;
    const int64_t n = n_, k = k_;
    if (m <= kColumnSplitRows) {
        // The same split of the panels at every call, so that each thread meets its own again.
        parallel_for(count, 1,
                     [=](int64_t begin, int64_t end) { panels_avx2(panels, begin, end, m, n, k, a, c, accumulate); });
        return;
    }
    // Whole tiles of rows to each thread, every panel: each sum runs the same way in either split.
    const int64_t tiles = (m + kTileRows - 1) / kTileRows;
    parallel_for(tiles, kRowsGrain / kTileRows, [=](int64_t begin, int64_t end) {
        const int64_t r0 = begin * kTileRows, r1 = std::min(m, end * kTileRows);
        panels_avx2(panels, 0, count, r1 - r0, n, k, a + r0 * k, c + r0 * n, accumulate);
    });
#endif
}

void WeightPanels::multiply_here(int64_t m, const float* a, float* c, bool accumulate) const {
    if (m <= 0 || n_ <= 0) return;
    if (!active()) {
        gemm_weights(false, transposed_, m, n_, k_, a, weight_, c, accumulate);
        return;
    }
#if SEQGRAD_HAVE_ISA_LEVELS
    panels_avx2(block_.data, 0, (n_ + kPanel - 1) / kPanel, m, n_, k_, a, c, accumulate);
#endif
}

PassPanels::PassPanels(Tensor weight, int64_t n, int64_t k, bool transposed, int64_t rows, int64_t products)
    : weight_(std::move(weight)), n_(n), k_(k), rows_(rows), products_(products), transposed_(transposed) {}

void PassPanels::multiply(int64_t m, const float* a, float* c, bool accumulate) {
    // Panels that would not lay the weight out have nothing to keep across the pass: no lock, no
    // object, whichever thread calls (a pool's thread sees no pass under way).
    if (!panels_would_run(n_, k_, rows_, products_)) {
        gemm_weights(false, transposed_, m, n_, k_, a, weight_.data(), c, accumulate);
        return;
    }
    laid_out()->multiply(m, a, c, accumulate);
}

std::shared_ptr<const WeightPanels> PassPanels::laid_out() {
    const uint64_t pass = backward_pass_number();
    const std::lock_guard<std::mutex> lock(mutex_);
    if (panels_ == nullptr || pass == 0 || pass != pass_) {
        panels_.reset();  // the old layout's memory back before the new one's is taken
        panels_ = std::make_shared<const WeightPanels>(weight_.data(), n_, k_, transposed_, rows_, products_);
        pass_ = pass;
    }
    return panels_;
}

}  // namespace seqgrad::detail

namespace seqgrad {

RepeatedWeight::RepeatedWeight(const Tensor& weight, int64_t rows, int64_t uses) : weight_(weight) {
    check(weight.defined() && weight.dim() == 2, "RepeatedWeight", "the weight must be [out, in], got ",
          weight.defined() ? weight.shape() : Shape{});
    check(rows >= 0 && uses >= 0, "RepeatedWeight", "rows ", rows, " and uses ", uses, " must not be negative");
    const int64_t out = weight.size(0), in = weight.size(1);
    forward_ = std::make_shared<const detail::WeightPanels>(weight.data(), out, in, true, rows, uses);
    backward_ = std::make_shared<detail::PassPanels>(weight, in, out, false, rows, uses);
}

}  // namespace seqgrad
