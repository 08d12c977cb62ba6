// Multi-head scaled dot-product attention as one operation, on the [batch, length, heads *
// head_size] layout the projections produce. Each (batch row, head) pair is an independent
// problem whose matrices are strided views of q, k and v (leading dimension heads * head_size),
// so heads are never split out or merged back by copies; its scores stay in one small buffer
// that the scaling, the mask, the softmax and dropout pass over once. Pairs run in parallel, each
// on one thread, with its products in vector registers (small_product.h; sgemm at the portable
// level), over blocks of query rows whose products stop at the last key the block attends to:
// with a causal mask about half the products are never computed, and their weights are exact
// zeros, as the full softmax would make them.
//
// The composition it replaces, per head h (the Transformer's multi-head attention):
//   weights_h = softmax(where(mask, q_h k_h^T / sqrt(head_size), -1e9))
//   context_h = dropout(weights_h) v_h
// test_ops_attention.cpp checks the two against each other, forward and backward.
#include <algorithm>
#include <cmath>
#include <memory>
#include <span>
#include <vector>

#include "../blas.h"
#include "../scratch.h"
#include "kernels.h"
#include "small_product.h"
#include "seqgrad/core/autograd.h"
#include "seqgrad/core/ops.h"

#if SEQGRAD_HAVE_ISA_LEVELS
#include <immintrin.h>
#endif

namespace seqgrad {
namespace {

#if SEQGRAD_HAVE_ISA_LEVELS
// Which of the sixteen scores from j on are masked out (mask[(j + l) * step] == 0), among the
// `lanes` that exist: one comparison of eight keys at a time when the mask row is contiguous.
SEQGRAD_TARGET_AVX512 inline __mmask16 masked_lanes16(const int64_t* mask, int64_t step, int64_t j, __mmask16 lanes) {
    if (step == 1) {
        const __m512i zero = _mm512_setzero_si512();
        const __mmask8 low = static_cast<__mmask8>(lanes), high = static_cast<__mmask8>(lanes >> 8);
        const __mmask8 a = _mm512_mask_cmpeq_epi64_mask(low, _mm512_maskz_loadu_epi64(low, mask + j), zero);
        const __mmask8 b = _mm512_mask_cmpeq_epi64_mask(high, _mm512_maskz_loadu_epi64(high, mask + j + 8), zero);
        return static_cast<__mmask16>(a | (static_cast<unsigned>(b) << 8));
    }
    unsigned bits = 0;
    for (int l = 0; l < 16; ++l)
        if ((lanes >> l & 1) && mask[(j + l) * step] == 0) bits |= 1u << l;
    return static_cast<__mmask16>(bits);
}

// scale_mask_max and scale_by at the avx512 level: sixteen scores at a time, the last ones under a
// mask.
SEQGRAD_TARGET_AVX512 float scale_mask_max16(float* row, int64_t n, float scale, const int64_t* mask, int64_t step) {
    const __m512 factor = _mm512_set1_ps(scale), fill = _mm512_set1_ps(kAttentionMaskFill);
    __m512 running = _mm512_set1_ps(-INFINITY);
    for (int64_t j = 0; j < n; j += 16) {
        const __mmask16 lanes = detail::first_lanes(n - j);
        __m512 x = _mm512_maskz_mul_ps(lanes, _mm512_maskz_loadu_ps(lanes, row + j), factor);
        if (mask != nullptr) x = _mm512_mask_mov_ps(x, masked_lanes16(mask, step, j, lanes), fill);
        _mm512_mask_storeu_ps(row + j, lanes, x);
        running = _mm512_mask_max_ps(running, lanes, x, running);  // max_ps(x, r) keeps r when x is NaN
    }
    return detail::max_lanes16(running);
}
SEQGRAD_TARGET_AVX512 void scale16(float* row, int64_t n, float f) {
    const __m512 inv = _mm512_set1_ps(f);
    for (int64_t j = 0; j < n; j += 16) {
        const __mmask16 lanes = detail::first_lanes(n - j);
        _mm512_mask_storeu_ps(row + j, lanes, _mm512_mul_ps(_mm512_maskz_loadu_ps(lanes, row + j), inv));
    }
}

// The avx2 level's: eight scores at a time; the mask's lanes as 32-bit all-ones, as blendv takes them.
SEQGRAD_TARGET_AVX2 inline __m256 masked_lanes8(const int64_t* mask, int64_t step, int64_t j, int64_t count) {
    if (step == 1 && count >= 8) {
        const __m256i zero = _mm256_setzero_si256();
        const __m256 a = _mm256_castsi256_ps(
            _mm256_cmpeq_epi64(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(mask + j)), zero));
        const __m256 b = _mm256_castsi256_ps(
            _mm256_cmpeq_epi64(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(mask + j + 4)), zero));
        // the low halves of a's and b's 64-bit lanes, as a0 a1 b0 b1 | a2 a3 b2 b3, then in order
        const __m256 interleaved = _mm256_shuffle_ps(a, b, 0x88);
        return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(interleaved), 0xD8));
    }
    alignas(32) int32_t bits[8] = {};
    for (int64_t l = 0; l < std::min<int64_t>(count, 8); ++l) bits[l] = mask[(j + l) * step] == 0 ? -1 : 0;
    return _mm256_castsi256_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(bits)));
}

SEQGRAD_TARGET_AVX2 float scale_mask_max8(float* row, int64_t n, float scale, const int64_t* mask, int64_t step) {
    const __m256 factor = _mm256_set1_ps(scale), fill = _mm256_set1_ps(kAttentionMaskFill);
    const __m256 none = _mm256_set1_ps(-INFINITY);
    __m256 running = none;
    // Whole vectors with plain loads and stores (AMD's cores run a masked store as many slower steps).
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 x = _mm256_mul_ps(_mm256_loadu_ps(row + j), factor);
        if (mask != nullptr) x = _mm256_blendv_ps(x, fill, masked_lanes8(mask, step, j, 8));
        _mm256_storeu_ps(row + j, x);
        running = _mm256_max_ps(x, running);  // max_ps(x, r) keeps r when x is NaN
    }
    if (j < n) {
        const __m256i lanes = detail::first_lanes8(n - j);
        __m256 x = _mm256_mul_ps(_mm256_maskload_ps(row + j, lanes), factor);
        if (mask != nullptr) x = _mm256_blendv_ps(x, fill, masked_lanes8(mask, step, j, n - j));
        _mm256_maskstore_ps(row + j, lanes, x);
        // the lanes past n count as -inf
        running = _mm256_max_ps(_mm256_blendv_ps(none, x, _mm256_castsi256_ps(lanes)), running);
    }
    return detail::max_lanes8(running);
}
SEQGRAD_TARGET_AVX2 void scale8(float* row, int64_t n, float f) {
    const __m256 inv = _mm256_set1_ps(f);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) _mm256_storeu_ps(row + j, _mm256_mul_ps(_mm256_loadu_ps(row + j), inv));
    if (j < n) {
        const __m256i lanes = detail::first_lanes8(n - j);
        _mm256_maskstore_ps(row + j, lanes, _mm256_mul_ps(_mm256_maskload_ps(row + j, lanes), inv));
    }
}
#endif

// What the raw scores q . k are multiplied by: 1 / sqrt(head_size), for training's attention() and
// decoding's gathered_attention() alike.
float score_scale(int64_t head_size) { return 1.0f / std::sqrt(static_cast<float>(head_size)); }

// A row of raw scores q . k each times `scale` (1 / sqrt(head_size): a product, as a division takes
// several times as long a vector), or set to kAttentionMaskFill where masked (mask[j * mask_step]
// == 0; no mask when it is null); returns the row's largest.
template <IsaLevel L>
float scale_mask_max(float* row, int64_t n, float scale, const int64_t* mask, int64_t mask_step) {
#if SEQGRAD_HAVE_ISA_LEVELS
    if constexpr (L == IsaLevel::avx512) return scale_mask_max16(row, n, scale, mask, mask_step);
    if constexpr (L == IsaLevel::avx2) return scale_mask_max8(row, n, scale, mask, mask_step);
#endif
    for (int64_t j = 0; j < n; ++j)
        row[j] = mask != nullptr && mask[j * mask_step] == 0 ? kAttentionMaskFill : row[j] * scale;
    return detail::row_max<L>(row, n);
}
template <IsaLevel L>
void scale_by(float* row, int64_t n, float f) {
#if SEQGRAD_HAVE_ISA_LEVELS
    if constexpr (L == IsaLevel::avx512) return scale16(row, n, f);
    if constexpr (L == IsaLevel::avx2) return scale8(row, n, f);
#endif
    for (int64_t j = 0; j < n; ++j) row[j] *= f;
}

// Rows of attention weights (rows of n, ld apart) from their raw scores: scale_mask_max (the mask's
// rows mask_ld apart), then softmax. The one computation of the weights, for training's attention()
// and decoding's gathered_attention() alike, so that both round the same (at one level L:
// isa_dispatch.h); every level scales alike, takes the same maximum and sums the exponentials in
// exp_shifted's order, so the levels differ only as exp_shifted's do. Eight rows go through each
// step before the next: a row's steps wait on one another (two sums across the lanes among them),
// and a short row's (64 keys) would otherwise leave the core idle between them.
template <IsaLevel L>
void attention_weights_rows(float* w, int64_t rows, int64_t ld, int64_t n, float scale, const int64_t* mask,
                            int64_t mask_ld, int64_t mask_step) {
    constexpr int64_t kChunk = 8;
    float peak[kChunk], inv[kChunk];
    for (int64_t r0 = 0; r0 < rows; r0 += kChunk) {
        const int64_t c = std::min(kChunk, rows - r0);
        for (int64_t r = 0; r < c; ++r)
            peak[r] =
                scale_mask_max<L>(w + (r0 + r) * ld, n, scale, mask ? mask + (r0 + r) * mask_ld : nullptr, mask_step);
        for (int64_t r = 0; r < c; ++r) {
            float* row = w + (r0 + r) * ld;
            inv[r] = 1.0f / detail::exp_shifted<L>(row, peak[r], row, n);
        }
        for (int64_t r = 0; r < c; ++r) scale_by<L>(w + (r0 + r) * ld, n, inv[r]);
    }
}

// Row loops of the backward pass, as plain functions with __restrict rows so that they vectorise:
// out[j] = a[j] * b[j]; x[j] *= f[j]; x[j] += y[j] (for j < n).
void multiply_rows(const float* __restrict a, const float* __restrict b, float* __restrict out, int64_t n) {
    for (int64_t j = 0; j < n; ++j) out[j] = a[j] * b[j];
}
void scale_row(float* __restrict x, const float* __restrict f, int64_t n) {
    for (int64_t j = 0; j < n; ++j) x[j] *= f[j];
}
void add_row(float* __restrict x, const float* __restrict y, int64_t n) {
    for (int64_t j = 0; j < n; ++j) x[j] += y[j];
}

// One row of the scores' gradient from the weights' (d weights in ds, replaced; its first n
// entries): ds[j] = w[j] (ds[j] - sum_j' ds[j'] w[j']) scale, 0 where masked(j), since the fill
// replaced those scores.
template <typename Masked>
void score_gradient_row(float* __restrict ds, const float* __restrict w, int64_t n, float scale, Masked&& masked) {
    const float d = detail::dot(ds, w, n);
    for (int64_t j = 0; j < n; ++j) ds[j] = masked(j) ? 0.0f : w[j] * (ds[j] - d) * scale;
}

// Query rows per block at level L: each block's products stop at the last key one of its rows
// attends to, so a causal mask skips about half of the products (of 64 queries' scores, blocks of
// 32 compute 75%, of 16 62.5%), and padding masks the padded keys' share. 16 at avx2 and avx512:
// on an AMD EPYC Zen 1 (avx2), the GPT CPU recipe's attention (12 texts, 4 heads, 64 positions,
// head 32) took 5.6-5.9 ms of a training step against 6.1-6.4 with 32, and at 256 positions the
// same within 2% (8 rows: slower than 16 at both); on an AMD EPYC Zen 4 at avx512, whose tiles are
// 12 rows (small_product.h), the forward and backward of that shape took 0.90 of its time with 32,
// and of 256 positions with heads of 64, 0.95. sgemm, at the portable level, keeps 32.
template <IsaLevel L>
constexpr int64_t kQueryBlock = L == IsaLevel::portable ? 32 : 16;
// Query rows at most in the blocks the forward pass runs together (whole blocks; see attention()).
constexpr int64_t kMergedRows = 256;

// Everything about one call that the forward and backward loops share.
struct Problem {
    int64_t batch, heads, tq, tk, width, head_size;
    float scale;  // of the raw scores: 1 / sqrt(head_size)
    // The mask's strides over [batch, heads, tq, tk] (0 on broadcast axes); no mask if empty.
    const int64_t* mask = nullptr;
    int64_t mask_strides[4] = {0, 0, 0, 0};
    bool dropout = false;
    detail::DropoutMask dropout_mask{};

    int64_t pairs() const { return batch * heads; }
    // Offset of pair p's first row in q (or the context), and in k and v.
    int64_t query_offset(int64_t p) const { return (p / heads) * tq * width + (p % heads) * head_size; }
    int64_t key_offset(int64_t p) const { return (p / heads) * tk * width + (p % heads) * head_size; }
    // Whether score (i, j) of pair p is masked out.
    bool masked(int64_t p, int64_t i, int64_t j) const {
        return mask && mask[mask_slice(p) + i * mask_strides[2] + j * mask_strides[3]] == 0;
    }
    // Offset of pair p's [tq, tk] slice of the mask (pairs that broadcast one slice share it).
    int64_t mask_slice(int64_t p) const { return (p / heads) * mask_strides[0] + (p % heads) * mask_strides[1]; }
    // Row i of pair p's slice of the mask (its entries mask_strides[3] apart), null without a mask.
    const int64_t* mask_row(int64_t p, int64_t i) const {
        return mask ? mask + mask_slice(p) + i * mask_strides[2] : nullptr;
    }
    // Calls f(masked_j), where masked_j(j) is masked(p, i, j), in a form whose loops vectorise:
    // the row's entries read in place when the mask's last axis is not broadcast (a causal or a
    // full mask), a constant without a mask.
    template <typename F>
    void with_mask_row(int64_t p, int64_t i, F&& f) const {
        if (!mask) return f([](int64_t) { return false; });
        const int64_t* row = mask_row(p, i);
        if (mask_strides[3] == 1) return f([row](int64_t j) { return row[j] == 0; });
        return f([row, step = mask_strides[3]](int64_t j) { return row[j * step] == 0; });
    }
    // For each block of `block` query rows of pair p, how many leading keys its products need:
    // one past the last key any of its rows attends to (a causal mask's lower triangle, a padding
    // mask's real keys); every key when there is no mask or a row attends to none (its weights are
    // then uniform over all tk keys, as the unblocked softmax makes them).
    void block_keys(int64_t p, int64_t block, std::vector<int64_t>& keys) const {
        const int64_t blocks = (tq + block - 1) / block;
        keys.assign(static_cast<size_t>(blocks), tk);
        if (!mask) return;
        for (int64_t b = 0; b < blocks; ++b) {
            int64_t needed = 0;
            for (int64_t i = b * block; i < std::min(tq, (b + 1) * block); ++i) {
                int64_t last = tk;
                while (last > 0 && masked(p, i, last - 1)) --last;
                if (last == 0) {  // a row attending to nothing
                    needed = tk;
                    break;
                }
                needed = std::max(needed, last);
            }
            keys[static_cast<size_t>(b)] = needed;
        }
    }
    // Element (i, 0) of pair p's weights in the dropout mask's count.
    int64_t dropout_first(int64_t p, int64_t i) const { return (p * tq + i) * tk; }
    // Pairs per chunk of work for parallel_for.
    int64_t grain() const { return std::max<int64_t>(1, (1 << 17) / std::max<int64_t>(1, tq * tk * head_size)); }
};

// One thread's Problem::block_keys for blocks of `block` rows, recomputed only when a pair reads
// another slice of the mask (pairs that broadcast one slice, or a call without a mask, share the
// first answer).
class BlockKeys {
public:
    explicit BlockKeys(int64_t block) : block_(block) {}
    const std::vector<int64_t>& of(const Problem& pr, int64_t p) {
        const int64_t slice = pr.mask_slice(p);
        if (slice != slice_) {
            pr.block_keys(p, block_, keys_);
            slice_ = slice;
        }
        return keys_;
    }

private:
    int64_t block_;
    std::vector<int64_t> keys_;
    int64_t slice_ = -1;
};

// C [m, n] (row stride ldc) = op(A) op(B), or C += op(A) op(B) when accumulate; one thread,
// row-major. Above the portable level, with B untransposed, in vector registers
// (small_product.h); else sgemm.
template <IsaLevel L>
void small_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                int64_t ldb, float* c, int64_t ldc, bool accumulate = false) {
#if SEQGRAD_HAVE_ISA_LEVELS
    if constexpr (L != IsaLevel::portable) {
        if (!tb) return detail::small_product<L>(ta, m, n, k, a, lda, b, ldb, c, ldc, accumulate);
    }
#endif
    detail::gemm_block(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, accumulate);
}

#if SEQGRAD_HAVE_ISA_LEVELS
// dst[c * ldd + r] = src[r * lds + c] for an 8 x 8 tile: pairs, then quads, then halves of rows
// interleaved. Run at the avx2 and avx512 levels.
SEQGRAD_TARGET_AVX2 void transpose_tile8(const float* src, int64_t lds, float* dst, int64_t ldd) {
    __m256 r[8], t[8];
    for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * lds);
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
        r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
        r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
    for (int i = 0; i < 4; ++i) {
        _mm256_storeu_ps(dst + i * ldd, _mm256_permute2f128_ps(r[i], r[i + 4], 0x20));
        _mm256_storeu_ps(dst + (i + 4) * ldd, _mm256_permute2f128_ps(r[i], r[i + 4], 0x31));
    }
}
#endif

// A pair's keys [tk, head_size] (rows `width` apart) as kt [head_size, tk]: the scores q k^T are
// then a product of two untransposed matrices, which small_product.h computes in place (and
// OpenBLAS's AVX-512 kernels too, at such small shapes, where for q k^T they copy both operands
// into panels at every call). Backward lays out the values so, for d context v^T. Above the
// portable level, in tiles of 8 keys by 8 of their values; where either side is no multiple of 8
// (12 keys, say), its last tile ends at its end and overlaps the one before, rewriting the same
// values, rather than leaving a tail to a scalar loop (at 12 keys, 8% of the forward pass).
template <IsaLevel L>
void transpose_keys(const float* k, int64_t tk, int64_t head_size, int64_t width, float* kt) {
#if SEQGRAD_HAVE_ISA_LEVELS
    if constexpr (L != IsaLevel::portable) {
        if (tk >= 8 && head_size >= 8) {
            for (int64_t j = 0; j < tk; j += 8) {
                const int64_t j0 = std::min(j, tk - 8);
                for (int64_t d = 0; d < head_size; d += 8) {
                    const int64_t d0 = std::min(d, head_size - 8);
                    transpose_tile8(k + j0 * width + d0, width, kt + d0 * tk + j0, tk);
                }
            }
            return;
        }
    }
#endif
    for (int64_t j = 0; j < tk; ++j)
        for (int64_t d = 0; d < head_size; ++d) kt[d * tk + j] = k[j * width + d];
}

Problem describe(const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads, const IntTensor& mask) {
    check(q.defined() && k.defined() && v.defined(), "attention", "an operand is undefined");
    check(q.dim() == 3 && k.dim() == 3 && v.dim() == 3, "attention", "expects q [B, Tq, D], k and v [B, Tk, D], got ",
          q.shape(), ", ", k.shape(), ", ", v.shape());
    check(k.shape() == v.shape() && k.size(0) == q.size(0) && k.size(2) == q.size(2), "attention", "q ", q.shape(),
          ", k ", k.shape(), " and v ", v.shape(), " do not fit");
    check(heads > 0 && q.size(2) > 0 && q.size(2) % heads == 0, "attention", "width ", q.size(2),
          " is not a positive multiple of ", heads, " heads");
    Problem pr{};
    pr.batch = q.size(0);
    pr.heads = heads;
    pr.tq = q.size(1);
    pr.tk = k.size(1);
    pr.width = q.size(2);
    pr.head_size = pr.width / heads;
    pr.scale = score_scale(pr.head_size);
    for (int64_t n : {pr.tq, pr.tk, pr.width}) detail::check_blas_size(n, "attention");
    if (mask.numel() > 0) {
        const Shape scores{pr.batch, heads, pr.tq, pr.tk};
        check(mask.dim() <= 4 && broadcast_shapes(scores, mask.shape(), "attention") == scores, "attention", "mask ",
              mask.shape(), " does not broadcast to the scores ", scores);
        const std::vector<int64_t> strides = detail::broadcast_strides(mask.shape(), 4);
        std::copy(strides.begin(), strides.end(), pr.mask_strides);
        pr.mask = mask.data();
    }
    return pr;
}

}  // namespace

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads, const IntTensor& mask,
                 float dropout_p, bool training, Generator* gen, Tensor* weights_out) {
    Problem pr = describe(q, k, v, heads, mask);
    check(dropout_p >= 0 && dropout_p <= 1, "attention", "dropout probability must be in [0, 1], got ", dropout_p);
    check(!(training && dropout_p > 0) || gen != nullptr, "attention", "dropout needs a generator");
    if (training && dropout_p > 0) {
        pr.dropout = true;
        pr.dropout_mask = detail::DropoutMask(dropout_p, *gen);  // p = 1 keeps nothing
    }
    // The weights are kept only for a caller who asks for them or for backward; otherwise each block
    // of query rows has its scores in a buffer of the thread's, still in the core's cache when the
    // context reads them (at 64 texts of 64 tokens and 4 heads, 4 MB less written per layer).
    const bool keep_weights = weights_out != nullptr || needs_grad({q, k, v});
    Tensor weights = keep_weights ? Tensor::empty({pr.batch, heads, pr.tq, pr.tk}) : Tensor();
    const bool empty = pr.tq == 0 || pr.tk == 0;
    // Every pair writes its whole block of the context, so only an empty problem needs zeros.
    Tensor context = empty ? Tensor::zeros({pr.batch, pr.tq, pr.width}) : Tensor::empty({pr.batch, pr.tq, pr.width});
    if (!empty) {
        const float* pq = q.data();
        const float* pk = k.data();
        const float* pv = v.data();
        float* pw = keep_weights ? weights.data() : nullptr;
        float* pc = context.data();
        detail::parallel_for(pr.pairs(), pr.grain(), [&](int64_t begin, int64_t end) {
            // The blocks' weights when they are not kept, and with dropout the weights after it: read
            // by the context's product while still in the core's cache, and by nothing after it.
            thread_local detail::Scratch<float> block_scores;
            const int64_t buffers = (keep_weights ? 0 : 1) + (pr.dropout ? 1 : 0);
            float* scratch = buffers > 0 ? block_scores.get(buffers * kMergedRows * pr.tk) : nullptr;
            thread_local detail::Scratch<float> keys_t;  // a pair's keys transposed (transpose_keys)
            float* kt = keys_t.get(pr.head_size * pr.tk);
            with_isa_level([&](auto isa) {
                constexpr int64_t block = kQueryBlock<decltype(isa)::value>;
                BlockKeys block_keys(block);
                for (int64_t p = begin; p < end; ++p) {
                    const std::vector<int64_t>& keys = block_keys.of(pr, p);
                    transpose_keys<decltype(isa)::value>(pk + pr.key_offset(p), pr.tk, pr.head_size, pr.width, kt);
                    for (int64_t i0 = 0, rows = 0; i0 < pr.tq; i0 += rows) {
                        // Blocks that need as many keys (all of them without a mask, or with padding
                        // alone) go through the products together: fewer, larger products.
                        const int64_t n = keys[static_cast<size_t>(i0 / block)];
                        int64_t i1 = i0 + block;
                        while (i1 < pr.tq && i1 - i0 < kMergedRows && keys[static_cast<size_t>(i1 / block)] == n)
                            i1 += block;
                        rows = std::min(i1, pr.tq) - i0;
                        // the blocks' rows of the weights, and of the weights after dropout
                        const int64_t first = (p * pr.tq + i0) * pr.tk;
                        float* w = keep_weights ? pw + first : scratch;
                        float* dropped_w = !pr.dropout ? w : keep_weights ? scratch : scratch + kMergedRows * pr.tk;
                        small_gemm<decltype(isa)::value>(false, false, rows, n, pr.head_size,
                                                         pq + pr.query_offset(p) + i0 * pr.width, pr.width, kt, pr.tk,
                                                         w, pr.tk);
                        attention_weights_rows<decltype(isa)::value>(w, rows, pr.tk, n, pr.scale, pr.mask_row(p, i0),
                                                                     pr.mask_strides[2], pr.mask_strides[3]);
                        for (int64_t r = 0; r < rows; ++r) {
                            float* row = w + r * pr.tk;
                            if (keep_weights && n < pr.tk)  // keys the blocks never see
                                std::fill(row + n, row + pr.tk, 0.0f);
                            if (pr.dropout)
                                pr.dropout_mask.apply(row, dropped_w + r * pr.tk, n, pr.dropout_first(p, i0 + r));
                        }
                        small_gemm<decltype(isa)::value>(false, false, rows, pr.head_size, n, dropped_w, pr.tk,
                                                         pv + pr.key_offset(p), pr.width,
                                                         pc + pr.query_offset(p) + i0 * pr.width, pr.width);
                    }
                }
            });
        });
    }
    if (!needs_grad({q, k, v})) {
        if (weights_out) *weights_out = weights;
        return context;
    }
    // The weights are an output too, so a loss may use them; when none does, backward is handed
    // an undefined gradient for them and skips them.
    if (empty) {
        auto outputs = record("attention", {context, weights}, {q, k, v}, [q, k, v](std::span<const Tensor>) {
            return std::vector<Tensor>{Tensor::zeros(q.shape()), Tensor::zeros(k.shape()), Tensor::zeros(v.shape())};
        });
        if (weights_out) *weights_out = outputs[1];
        return outputs[0];
    }
    // The caller's mask may not outlive this call: backward keeps its own copy.
    auto mask_copy = std::make_shared<const IntTensor>(pr.mask ? mask : IntTensor());
    auto outputs = record(
        "attention", {context, weights}, {q, k, v},
        [q, k, v, weights, pr, mask_copy](std::span<const Tensor> grads) {
        // Gradients of outputs no path used arrive undefined (UnusedGradients::undefined): the
        // weights' own gradient is then skipped, and a context no path used counts as zeros.
        const Tensor g = grads[0].defined() ? grads[0] : Tensor::zeros(q.shape());
        const float* pgw = grads[1].defined() ? grads[1].data() : nullptr;
        Problem b = pr;
        b.mask = b.mask ? mask_copy->data() : nullptr;
        Tensor gq = Tensor::empty(q.shape()), gk = Tensor::empty(k.shape()), gv = Tensor::empty(v.shape());
        const float* pq = q.data();
        const float* pk = k.data();
        const float* pv = v.data();
        const float* pw = weights.data();
        const float* pg = g.data();
        float* gq_data = gq.data();
        float* gk_data = gk.data();
        float* gv_data = gv.data();
        detail::parallel_for(b.pairs(), b.grain(), [&](int64_t begin, int64_t end) {
            // A pair's values transposed, [head_size, tk], so that d context v^T is a product of
            // untransposed matrices too (small_gemm); sgemm takes v as it is at the portable level.
            thread_local detail::Scratch<float> values_t;
            float* vt = values_t.get(b.head_size * b.tk);
            // A block's rows of the dropped weights, then of their gradient and the scores': in the
            // core's cache from the first product that writes them to the last that reads them.
            thread_local detail::Scratch<float> block_rows;
            with_isa_level([&](auto isa) {
                constexpr IsaLevel L = decltype(isa)::value;
                constexpr int64_t block = kQueryBlock<L>;
                float* sb = block_rows.get(block * b.tk);
                BlockKeys block_keys(block);
                // A block's dropout factors, row by row: the mask drops the weights and, through the
                // same factors, the gradient of the dropped weights.
                std::vector<float> factors(b.dropout ? static_cast<size_t>(block * b.tk) : 0);
                for (int64_t p = begin; p < end; ++p) {
                    const std::vector<int64_t>& keys = block_keys.of(b, p);
                    if constexpr (L != IsaLevel::portable)
                        transpose_keys<L>(pv + b.key_offset(p), b.tk, b.head_size, b.width, vt);
                    const float* w = pw + p * b.tq * b.tk;
                    const float* g_context = pg + b.query_offset(p);
                    const float* gw = pgw != nullptr ? pgw + p * b.tq * b.tk : nullptr;
                    // d v and d k sum over the blocks: the first block's products write the rows of
                    // the keys it sees (most often all of them), the rest start at zero. (Zeroing
                    // every row, a short memset each, took a tenth of a forward and backward pass
                    // at 12 keys.)
                    for (int64_t j = keys[0]; j < b.tk; ++j) {
                        std::fill_n(gv_data + b.key_offset(p) + j * b.width, b.head_size, 0.0f);
                        std::fill_n(gk_data + b.key_offset(p) + j * b.width, b.head_size, 0.0f);
                    }
                    for (int64_t i0 = 0; i0 < b.tq; i0 += block) {
                        const int64_t rows = std::min(block, b.tq - i0), n = keys[static_cast<size_t>(i0 / block)];
                        const float* wb = w + i0 * b.tk;
                        const float* gcb = g_context + i0 * b.width;
                        const float* dropped = wb;
                        if (b.dropout) {
                            for (int64_t i = i0; i < i0 + rows; ++i) {
                                float* f = factors.data() + (i - i0) * b.tk;
                                b.dropout_mask.factors(f, n, b.dropout_first(p, i));
                                multiply_rows(w + i * b.tk, f, sb + (i - i0) * b.tk, n);
                            }
                            dropped = sb;
                        }
                        // d v += dropout(weights)^T d context
                        small_gemm<L>(true, false, n, b.head_size, rows, dropped, b.tk, gcb, b.width,
                                      gv_data + b.key_offset(p), b.width, i0 > 0);
                        // d dropout(weights) = d context v^T, then back through dropout
                        if constexpr (L != IsaLevel::portable)
                            small_gemm<L>(false, false, rows, n, b.head_size, gcb, b.width, vt, b.tk, sb, b.tk);
                        else
                            small_gemm<L>(false, true, rows, n, b.head_size, gcb, b.width, pv + b.key_offset(p),
                                          b.width, sb, b.tk);
                        // d weights gains the weights' own gradient (when a loss used them); then the
                        // scores' gradient. Keys past n have weight 0 in every row of the block.
                        for (int64_t i = i0; i < i0 + rows; ++i) {
                            float* sr = sb + (i - i0) * b.tk;
                            if (b.dropout) scale_row(sr, factors.data() + (i - i0) * b.tk, n);
                            if (gw != nullptr) add_row(sr, gw + i * b.tk, n);
                            b.with_mask_row(p, i, [&](auto masked) {
                                score_gradient_row(sr, w + i * b.tk, n, b.scale, masked);
                            });
                        }
                        // d q = d scores k;  d k += d scores^T q
                        small_gemm<L>(false, false, rows, b.head_size, n, sb, b.tk, pk + b.key_offset(p), b.width,
                                      gq_data + b.query_offset(p) + i0 * b.width, b.width);
                        small_gemm<L>(true, false, n, b.head_size, rows, sb, b.tk,
                                      pq + b.query_offset(p) + i0 * b.width, b.width, gk_data + b.key_offset(p),
                                      b.width, i0 > 0);
                    }
                }
            });
        });
        return std::vector<Tensor>{gq, gk, gv};
        },
        UnusedGradients::undefined);
    if (weights_out) *weights_out = outputs[1];
    return outputs[0];
}

// ---- attention over gathered keys (incremental decoding) ----

namespace {

// At the avx512 level and with heads a multiple of 16 wide, a row's scores and context in vector registers:
// scores: eight key positions at a time, head by head, each position's 16-lane products in a
//         register of its own, so that eight chains of multiply-adds run side by side whatever
//         the number of heads (a thread's share of one sampled token's heads can be three: with
//         heads side by side, three chains waited on their own latency), then the eight
//         positions' lanes summed together by one tree of shuffles (sum_lanes), instead of one
//         horizontal sum per head and position;
// context: the weighted values in 8 accumulators of 16 lanes at a time, the value rows read once
//          per 128 columns.
// Each score's lanes are added in one fixed order, so the arrangement does not change results.

// Key and value rows are asked for this many positions ahead: a row (1.5 KB at d_model 384) is
// shorter than a page, and the hardware's prefetchers stop at every page's end.
constexpr int64_t kRowsAhead = 4;
// Only a row's first two lines are asked for: the hardware's own prefetcher follows on within the
// row, and asking for every line of both rows (48 requests a position at d_model 384) took a fifth
// of the time of one row's attention over 128 positions at the avx2 level, and 10-15% at avx512.
constexpr int64_t kPrefetchBytes = 128;

// Keys (positions x width) from which a row's heads are split among threads when there are fewer
// rows than threads: below it, waking another thread costs about what the split saves.
constexpr int64_t kSplitHeadsFrom = 16384;

inline void prefetch_row(const float* row, int64_t bytes) {
    const char* p = reinterpret_cast<const char*>(row);
    for (int64_t b = 0; b < bytes; b += 64) _mm_prefetch(p + b, _MM_HINT_T0);
}

// The shuffles' zero-masking forms with every lane kept: GCC 12's plain forms start from an
// undefined vector, which it then warns may be used uninitialized.
constexpr __mmask16 kAll = 0xFFFF;

// 128-bit quarters: halves(a0, a1) = [a0's two half-sums, a1's two half-sums].
SEQGRAD_TARGET_AVX512 inline __m512 halves(__m512 x, __m512 y) {
    return _mm512_add_ps(_mm512_maskz_shuffle_f32x4(kAll, x, y, 0x44), _mm512_maskz_shuffle_f32x4(kAll, x, y, 0xEE));
}

// s[h] = the sum of a[h]'s 16 lanes, for h < 8.
SEQGRAD_TARGET_AVX512 inline void sum_lanes(const __m512 a[8], float s[8]) {
    const __m512 t01 = halves(a[0], a[1]), t23 = halves(a[2], a[3]), t45 = halves(a[4], a[5]), t67 = halves(a[6], a[7]);
    // Quarter q of u0 holds a[q]'s four partial sums, of u1 a[q + 4]'s.
    const __m512 u0 = _mm512_add_ps(_mm512_maskz_shuffle_f32x4(kAll, t01, t23, 0x88),
                                    _mm512_maskz_shuffle_f32x4(kAll, t01, t23, 0xDD));
    const __m512 u1 = _mm512_add_ps(_mm512_maskz_shuffle_f32x4(kAll, t45, t67, 0x88),
                                    _mm512_maskz_shuffle_f32x4(kAll, t45, t67, 0xDD));
    // Quarter q: [a[q] twice halved, a[q + 4] likewise, ...], then whole: elements 4q and 4q + 1.
    const __m512 w = _mm512_add_ps(_mm512_maskz_unpacklo_ps(kAll, u0, u1), _mm512_maskz_unpackhi_ps(kAll, u0, u1));
    const __m512 x = _mm512_add_ps(w, _mm512_maskz_permute_ps(kAll, w, 0x4E));
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, x);
    for (int q = 0; q < 4; ++q) {
        s[q] = lanes[4 * q];
        s[q + 4] = lanes[4 * q + 1];
    }
}

// The keys of positions [j0, j0 + 8) in key[] (past the last position, the last one's, unused),
// the start of the key and value rows kRowsAhead positions on asked for; returns how many of the
// eight positions there are.
inline int64_t eight_keys(const float* const* keys, const float* const* values, int64_t j0, int64_t length,
                          int64_t row_bytes, const float* key[8]) {
    for (int64_t j = j0 + kRowsAhead; j < std::min(j0 + 8 + kRowsAhead, length); ++j) {
        prefetch_row(keys[j], std::min(row_bytes, kPrefetchBytes));
        prefetch_row(values[j], std::min(row_bytes, kPrefetchBytes));
    }
    const int64_t group = std::min<int64_t>(8, length - j0);
    for (int p = 0; p < 8; ++p) key[p] = keys[j0 + std::min<int64_t>(p, group - 1)];
    return group;
}

// scores[h * length + j] = q_h . k_h (positions j in [0, length), key j at keys[j]), the raw score
// that attention_weights_rows scales and normalises. It asks for the key and value rows kRowsAhead
// positions on, so that the values are in cache when gathered_context_avx512 reads them.
SEQGRAD_TARGET_AVX512 void gathered_scores_avx512(const float* query, const float* const* keys,
                                                  const float* const* values, int64_t length, int64_t heads,
                                                  int64_t head_size, float* scores) {
    const int64_t chunks = head_size / 16;
    const int64_t row_bytes = heads * head_size * static_cast<int64_t>(sizeof(float));
    for (int64_t j0 = 0; j0 < length; j0 += 8) {
        const float* key[8];
        const int64_t group = eight_keys(keys, values, j0, length, row_bytes, key);
        for (int64_t h = 0; h < heads; ++h) {
            __m512 acc[8];  // loops over p run to the constant 8, so that acc stays in registers
            for (int p = 0; p < 8; ++p) acc[p] = _mm512_setzero_ps();
            const int64_t first = h * head_size;
            for (int64_t c = 0; c < chunks; ++c) {
                const __m512 qc = _mm512_loadu_ps(query + first + 16 * c);
                for (int p = 0; p < 8; ++p)
                    acc[p] = _mm512_fmadd_ps(qc, _mm512_loadu_ps(key[p] + first + 16 * c), acc[p]);
            }
            float sums[8];
            sum_lanes(acc, sums);
            for (int64_t p = 0; p < group; ++p) scores[h * length + j0 + p] = sums[p];
        }
    }
}

// out[h * head_size + e] = sum_j weights[h * length + j] * value_j[h * head_size + e]. Where the
// group's first four slots share a head, and so do its last four (heads 64 wide or a multiple of
// 128 at the avx512 level; 32 or a multiple of 64 at avx2), two weights are broadcast a position
// rather than eight.
inline bool halves_share_heads(int64_t chunks) { return chunks % 8 == 0 || chunks == 4; }

SEQGRAD_TARGET_AVX512 void gathered_context_avx512(const float* weights, const float* const* values, int64_t length,
                                                   int64_t heads, int64_t head_size, float* out) {
    const int64_t chunks = head_size / 16, slots = heads * chunks;  // slot s: columns [16 s, 16 s + 16)
    for (int64_t s0 = 0; s0 < slots; s0 += 8) {
        const int64_t group = std::min<int64_t>(8, slots - s0);
        const float* weight_of[8];  // slot s0 + g's head's weights
        for (int g = 0; g < 8; ++g) weight_of[g] = weights + ((s0 + std::min<int64_t>(g, group - 1)) / chunks) * length;
        __m512 acc[8];  // loops over g run to the constant 8, so that acc stays in registers
        for (int g = 0; g < 8; ++g) acc[g] = _mm512_setzero_ps();
        if (halves_share_heads(chunks)) {
            for (int64_t j = 0; j < length; ++j) {
                const float* value = values[j] + 16 * s0;
                const __m512 low = _mm512_set1_ps(weight_of[0][j]), high = _mm512_set1_ps(weight_of[4][j]);
                for (int g = 0; g < 8; ++g)
                    if (g < group)
                        acc[g] = _mm512_fmadd_ps(g < 4 ? low : high, _mm512_loadu_ps(value + 16 * g), acc[g]);
            }
        } else {
            for (int64_t j = 0; j < length; ++j) {
                const float* value = values[j] + 16 * s0;
                for (int g = 0; g < 8; ++g)
                    if (g < group)
                        acc[g] =
                            _mm512_fmadd_ps(_mm512_set1_ps(weight_of[g][j]), _mm512_loadu_ps(value + 16 * g), acc[g]);
            }
        }
        for (int g = 0; g < 8; ++g)
            if (g < group) _mm512_storeu_ps(out + 16 * (s0 + g), acc[g]);
    }
}

// The avx2 level's versions of the two above, with heads a multiple of 8 wide: eight lanes a
// vector, the eight positions' sums by one tree of horizontal additions.
SEQGRAD_TARGET_AVX2 inline void sum_lanes8x8(const __m256 a[8], float s[8]) {
    const __m256 t0 = _mm256_hadd_ps(a[0], a[1]), t1 = _mm256_hadd_ps(a[2], a[3]);
    const __m256 t2 = _mm256_hadd_ps(a[4], a[5]), t3 = _mm256_hadd_ps(a[6], a[7]);
    // 128-bit half l of u0: a[0..3]'s sums of their lanes 4l to 4l + 3; of u1, a[4..7]'s.
    const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
    _mm256_storeu_ps(s, _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31)));
}

SEQGRAD_TARGET_AVX2 void gathered_scores_avx2(const float* query, const float* const* keys, const float* const* values,
                                              int64_t length, int64_t heads, int64_t head_size, float* scores) {
    const int64_t chunks = head_size / 8;
    const int64_t row_bytes = heads * head_size * static_cast<int64_t>(sizeof(float));
    for (int64_t j0 = 0; j0 < length; j0 += 8) {
        const float* key[8];
        const int64_t group = eight_keys(keys, values, j0, length, row_bytes, key);
        for (int64_t h = 0; h < heads; ++h) {
            __m256 acc[8];  // loops over p run to the constant 8, so that acc stays in registers
            for (int p = 0; p < 8; ++p) acc[p] = _mm256_setzero_ps();
            const int64_t first = h * head_size;
            for (int64_t c = 0; c < chunks; ++c) {
                const __m256 qc = _mm256_loadu_ps(query + first + 8 * c);
                for (int p = 0; p < 8; ++p)
                    acc[p] = _mm256_fmadd_ps(qc, _mm256_loadu_ps(key[p] + first + 8 * c), acc[p]);
            }
            float sums[8];
            sum_lanes8x8(acc, sums);
            for (int64_t p = 0; p < group; ++p) scores[h * length + j0 + p] = sums[p];
        }
    }
}

// Context as at the avx512 level, 8 columns a slot.
SEQGRAD_TARGET_AVX2 void gathered_context_avx2(const float* weights, const float* const* values, int64_t length,
                                               int64_t heads, int64_t head_size, float* out) {
    const int64_t chunks = head_size / 8, slots = heads * chunks;  // slot s: columns [8 s, 8 s + 8)
    for (int64_t s0 = 0; s0 < slots; s0 += 8) {
        const int64_t group = std::min<int64_t>(8, slots - s0);
        const float* weight_of[8];  // slot s0 + g's head's weights
        for (int g = 0; g < 8; ++g) weight_of[g] = weights + ((s0 + std::min<int64_t>(g, group - 1)) / chunks) * length;
        __m256 acc[8];
        for (int g = 0; g < 8; ++g) acc[g] = _mm256_setzero_ps();
        if (halves_share_heads(chunks)) {
            for (int64_t j = 0; j < length; ++j) {
                const float* value = values[j] + 8 * s0;
                const __m256 low = _mm256_set1_ps(weight_of[0][j]), high = _mm256_set1_ps(weight_of[4][j]);
                for (int g = 0; g < 8; ++g)
                    if (g < group) acc[g] = _mm256_fmadd_ps(g < 4 ? low : high, _mm256_loadu_ps(value + 8 * g), acc[g]);
            }
        } else {
            for (int64_t j = 0; j < length; ++j) {
                const float* value = values[j] + 8 * s0;
                for (int g = 0; g < 8; ++g)
                    if (g < group)
                        acc[g] =
                            _mm256_fmadd_ps(_mm256_set1_ps(weight_of[g][j]), _mm256_loadu_ps(value + 8 * g), acc[g]);
            }
        }
        for (int g = 0; g < 8; ++g)
            if (g < group) _mm256_storeu_ps(out + 8 * (s0 + g), acc[g]);
    }
}

}  // namespace

Tensor gathered_attention(const Tensor& q, const Tensor& k, const Tensor& v, const IntTensor& rows, int64_t length,
                          int64_t heads, const IntTensor& mask, Tensor* weights_out) {
    const char* op = "gathered_attention";
    check(q.defined() && k.defined() && v.defined(), op, "an operand is undefined");
    check(!needs_grad({q, k, v}), op, "is for decoding only: it has no backward (use attention(), or NoGradGuard)");
    check(q.dim() == 3 && q.size(1) == 1, op, "expects one query position per row, q [N, 1, D], got ", q.shape());
    check(k.dim() == 3 && k.shape() == v.shape() && k.size(2) == q.size(2), op, "k and v must be [M, C, ", q.size(2),
          "] alike, got ", k.shape(), " and ", v.shape());
    const int64_t n = q.size(0), width = q.size(2), capacity = k.size(1), stored = k.size(0);
    check(heads > 0 && width > 0 && width % heads == 0, op, "width ", width, " is not a positive multiple of ", heads,
          " heads");
    check(rows.dim() == 2 && rows.size(0) == n && length >= 0 && length <= rows.size(1) && length <= capacity, op,
          "rows must be [", n, ", >= length] and length at most ", capacity, " (k's positions), got rows ",
          rows.shape(), " and length ", length);
    const int64_t row_stride = rows.size(1);
    const int64_t* row_of = rows.data();
    for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < length; ++j) {
            const int64_t r = row_of[i * row_stride + j];
            check(r >= 0 && r < stored, op, "rows[", i, ", ", j, "] = ", r, " is outside [0, ", stored, ")");
        }
    const int64_t head_size = width / heads;
    const Shape scores{n, heads, 1, length};
    std::vector<int64_t> mask_strides(4, 0);
    const int64_t* pm = nullptr;
    if (mask.numel() > 0) {
        check(mask.dim() <= 4 && broadcast_shapes(scores, mask.shape(), op) == scores, op, "mask ", mask.shape(),
              " does not broadcast to the scores ", scores);
        mask_strides = detail::broadcast_strides(mask.shape(), 4);
        pm = mask.data();
    }
    Tensor weights = Tensor::empty(scores);
    Tensor context = Tensor::zeros({n, 1, width});
    if (length == 0) {
        if (weights_out) *weights_out = weights;
        return context;
    }
    const float scale = score_scale(head_size);
    const float* pq = q.data();
    const float* pk = k.data();
    const float* pv = v.data();
    float* pw = weights.data();
    float* pc = context.data();
    // Row by row, each key and value read whole (all heads at once, one contiguous stretch) in
    // position order: reading one head's slice of every position, then the next head's, would
    // leave the hardware prefetcher a pattern it does not follow. With fewer rows than threads (one
    // sentence, one sampled text), a row's heads are split among the threads instead, each reading
    // its contiguous share of every key and value: at one row, attention over a long cache would
    // otherwise run on the calling thread alone while the others wait. A head's scores, weights and
    // context are the same whichever share it is in, so the split does not change the results.
    const int64_t threads = get_num_threads();
    const int64_t split = n >= threads || length * width < kSplitHeadsFrom ? 1 : std::min(heads, (threads + n - 1) / n);
    const int64_t items = n * split;  // item t: row t / split, share t % split of its heads
    const int64_t grain = split > 1 ? 1 : std::max<int64_t>(1, 4096 / std::max<int64_t>(1, length * width));
    detail::parallel_for(items, grain, [&](int64_t begin, int64_t end) {
        std::vector<const float*> keys, values;
        with_isa_level([&](auto isa) {
            constexpr IsaLevel L = decltype(isa)::value;
            for (int64_t t = begin; t < end; ++t) {
                const int64_t i = t / split, part = t % split;
                const int64_t h0 = heads * part / split, count = heads * (part + 1) / split - h0;
                const int64_t offset = h0 * head_size;  // the share's first column
                const float* query = pq + i * width + offset;
                const int64_t* from = row_of + i * row_stride;
                float* w = pw + (i * heads + h0) * length;  // [count, length]
                float* out = pc + i * width + offset;
                const auto weights_of_row = [&] {
                    const int64_t* row_mask = pm ? pm + i * mask_strides[0] + h0 * mask_strides[1] : nullptr;
                    attention_weights_rows<L>(w, count, length, length, scale, row_mask, mask_strides[1],
                                              mask_strides[3]);
                };
                if constexpr (L != IsaLevel::portable) {
                    if (head_size % (L == IsaLevel::avx512 ? 16 : 8) == 0) {
                        keys.resize(static_cast<size_t>(length));
                        values.resize(static_cast<size_t>(length));
                        for (int64_t j = 0; j < length; ++j) {
                            keys[static_cast<size_t>(j)] = pk + (from[j] * capacity + j) * width + offset;
                            values[static_cast<size_t>(j)] = pv + (from[j] * capacity + j) * width + offset;
                        }
                        if constexpr (L == IsaLevel::avx512) {
                            gathered_scores_avx512(query, keys.data(), values.data(), length, count, head_size, w);
                            weights_of_row();
                            gathered_context_avx512(w, values.data(), length, count, head_size, out);
                        } else {
                            gathered_scores_avx2(query, keys.data(), values.data(), length, count, head_size, w);
                            weights_of_row();
                            gathered_context_avx2(w, values.data(), length, count, head_size, out);
                        }
                        continue;
                    }
                }
                for (int64_t j = 0; j < length; ++j) {
                    const float* key = pk + (from[j] * capacity + j) * width + offset;
                    for (int64_t h = 0; h < count; ++h)
                        w[h * length + j] = detail::dot(query + h * head_size, key + h * head_size, head_size);
                }
                weights_of_row();
                for (int64_t j = 0; j < length; ++j) {
                    const float* value = pv + (from[j] * capacity + j) * width + offset;
                    for (int64_t h = 0; h < count; ++h) {
                        const float a = w[h * length + j];
                        float* o = out + h * head_size;
                        const float* v = value + h * head_size;
#pragma omp simd
                        for (int64_t e = 0; e < head_size; ++e) o[e] += a * v[e];
                    }
                }
            }
        });
    });
    if (weights_out) *weights_out = weights;
    return context;
}

}  // namespace seqgrad
