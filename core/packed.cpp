// Packed weights through oneDNN's matmul (packed.h). PackedMatrix's constructor cuts W into column
// blocks, quantizes them for int8, and reorders each into the layout oneDNN's kernel reads; a
// product then runs one block per thread of seqgrad's pool. oneDNN is built with OpenMP here; each
// call runs on the calling thread alone (its OpenMP team is set to one thread), so oneDNN and the
// pool never compete for cores, as with sgemm (blas.cpp).
//
// A float32 product of a few rows (a model decoding one sequence, or a beam of four) does not go
// through oneDNN: rows_by_hand below reads the same packed weights with seqgrad's own loop, which
// keeps the weights streaming from memory at the rate a plain sweep reaches; oneDNN's kernel at one
// row reads them at about half that rate (the products of a GPT sampling one token: 18 GB/s against
// 38-43 on one core of an AMD EPYC). Every block's results are dense rows, so that oneDNN lays
// every block out in the panels rows_by_hand reads, on any number of threads.
//
// Below AVX-512, oneDNN's float32 kernels have no such layout and copy panels at every product, as
// sgemm does. There float32 weights are laid out by seqgrad itself instead (own_panels): each block
// as panels of 16 columns, [in][16] each, read by panel_rows at the CPU's level (two 8-lane sums a
// row at AVX2) for up to four rows, and by panel_tiles, six rows at a time, for more.
#include "seqgrad/core/packed.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "blas.h"
#include "ops/vector_math.h"
#include "parallel.h"
#include "scratch.h"
#include "seqgrad/core/autograd.h"
#include "seqgrad/core/cpu.h"
#include "seqgrad/core/error.h"
#include "seqgrad/core/isa_dispatch.h"
#include "seqgrad/core/ops.h"

#ifdef SEQGRAD_HAVE_DNNL
#include "onednn.h"
#endif

namespace seqgrad {

namespace {

constexpr const char* kOp = "linear_packed";

// set_packing_enabled's switch.
[[maybe_unused]] std::atomic<bool> packing_enabled{true};

// Levels each side of zero of int8 inputs (the weights': int8_weight_levels()).
constexpr int kInputLevels = 127;

// The largest |x| of n values, and whether any is NaN; and q = x * inverse rounded to the nearest
// integer (ties to even: the CPU's rounding, as nearbyint's), for values that fit in int8, its
// byte XOR `flip` (0x80 for q + 128 as an unsigned byte: inputs_shifted()). Plain loops for the
// portable level; AVX2 and AVX-512 copies below give the same results.
float row_peak_portable(const float* x, int64_t n, bool& nan) {
    float peak = 0.0f;
    nan = false;
    for (int64_t i = 0; i < n; ++i) {
        const float a = std::fabs(x[i]);
        peak = a > peak ? a : peak;
        nan |= a != a;
    }
    return peak;
}

void round_row_portable(const float* x, int64_t n, float inverse, uint8_t flip, int8_t* q) {
    for (int64_t j = 0; j < n; ++j)
        q[j] = static_cast<int8_t>(static_cast<uint8_t>(static_cast<int8_t>(std::nearbyint(x[j] * inverse))) ^ flip);
}

#if SEQGRAD_HAVE_ISA_LEVELS
// The vector copies compare |x| as integers: without its sign a float's bits order as its value,
// and a NaN's lie above infinity's (0x7f800000), so one integer maximum gives both the peak and
// whether a NaN was met. Four maxima in turn, each waiting on its own last.
constexpr int32_t kInfinityBits = 0x7f800000;

float from_bits(int32_t bits) {
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
}

SEQGRAD_TARGET_AVX2 inline __m256i magnitude_bits8(const float* x) {
    return _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x)), _mm256_set1_epi32(0x7fffffff));
}

SEQGRAD_TARGET_AVX2 float row_peak_avx2(const float* x, int64_t n, bool& nan) {
    __m256i p0 = _mm256_setzero_si256(), p1 = p0, p2 = p0, p3 = p0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        p0 = _mm256_max_epi32(p0, magnitude_bits8(x + i));
        p1 = _mm256_max_epi32(p1, magnitude_bits8(x + i + 8));
        p2 = _mm256_max_epi32(p2, magnitude_bits8(x + i + 16));
        p3 = _mm256_max_epi32(p3, magnitude_bits8(x + i + 24));
    }
    for (; i + 8 <= n; i += 8) p0 = _mm256_max_epi32(p0, magnitude_bits8(x + i));
    alignas(32) int32_t lanes[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes),
                       _mm256_max_epi32(_mm256_max_epi32(p0, p1), _mm256_max_epi32(p2, p3)));
    int32_t top = 0;
    for (const int32_t lane : lanes) top = lane > top ? lane : top;
    const float rest = row_peak_portable(x + i, n - i, nan);
    nan |= top > kInfinityBits;
    return std::max(from_bits(top), rest);
}

SEQGRAD_TARGET_AVX2 void round_row_avx2(const float* x, int64_t n, float inverse, uint8_t flip, int8_t* q) {
    const __m256 scale = _mm256_set1_ps(inverse);
    const __m128i flips = _mm_set1_epi8(static_cast<char>(flip));
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        const __m256i whole = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + j), scale));
        const __m128i words = _mm_packs_epi32(_mm256_castsi256_si128(whole), _mm256_extracti128_si256(whole, 1));
        _mm_storel_epi64(reinterpret_cast<__m128i*>(q + j), _mm_xor_si128(_mm_packs_epi16(words, words), flips));
    }
    round_row_portable(x + j, n - j, inverse, flip, q + j);
}

// |x[i..i+16)| as bits, lanes past the mask 0 (the zero-masking forms with every lane kept: see
// vector_math.h's kAllLanes).
SEQGRAD_TARGET_AVX512 inline __m512i magnitude_bits16(const float* x, __mmask16 lanes) {
    return _mm512_maskz_and_epi32(detail::kAllLanes, _mm512_maskz_loadu_epi32(lanes, x), _mm512_set1_epi32(0x7fffffff));
}

SEQGRAD_TARGET_AVX512 inline __m512i max_bits16(__m512i a, __m512i b) {
    return _mm512_maskz_max_epi32(detail::kAllLanes, a, b);
}

SEQGRAD_TARGET_AVX512 float row_peak_avx512(const float* x, int64_t n, bool& nan) {
    constexpr __mmask16 all = detail::kAllLanes;
    __m512i p0 = _mm512_setzero_si512(), p1 = p0, p2 = p0, p3 = p0;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        p0 = max_bits16(p0, magnitude_bits16(x + i, all));
        p1 = max_bits16(p1, magnitude_bits16(x + i + 16, all));
        p2 = max_bits16(p2, magnitude_bits16(x + i + 32, all));
        p3 = max_bits16(p3, magnitude_bits16(x + i + 48, all));
    }
    for (; i < n; i += 16) p0 = max_bits16(p0, magnitude_bits16(x + i, detail::first_lanes(n - i)));
    alignas(64) int32_t lanes[16];
    _mm512_store_si512(lanes, max_bits16(max_bits16(p0, p1), max_bits16(p2, p3)));
    int32_t top = 0;
    for (const int32_t lane : lanes) top = lane > top ? lane : top;
    nan = top > kInfinityBits;
    return from_bits(top);
}

SEQGRAD_TARGET_AVX512 void round_row_avx512(const float* x, int64_t n, float inverse, uint8_t flip, int8_t* q) {
    const __m512 scale = _mm512_set1_ps(inverse);
    const __m512i flips = _mm512_set1_epi32(flip);  // the stored low byte is the value's, flipped
    for (int64_t j = 0; j < n; j += 16) {
        const __mmask16 lanes = detail::first_lanes(n - j);
        const __m512i whole =
            _mm512_maskz_cvtps_epi32(detail::kAllLanes, _mm512_mul_ps(_mm512_maskz_loadu_ps(lanes, x + j), scale));
        _mm512_mask_cvtepi32_storeu_epi8(q + j, lanes, _mm512_xor_si512(whole, flips));
    }
}
#endif

// Row scale and quantized values of one row: q = round(x / s) in [-levels, levels], s = max |x| /
// levels. A row of zeros gets s = 0 (its products are 0); a row with an infinity or NaN gets
// s = NaN, so its outputs are NaN, as float32 products with such a value would be.
// `level`: the kernels' level, isa_level() (asked once by the caller of many rows). `flip`: as
// round_row's.
[[maybe_unused]] float quantize_row(const float* x, int64_t n, int levels, int8_t* q, IsaLevel level,
                                    uint8_t flip = 0) {
    float (*row_peak)(const float*, int64_t, bool&) = row_peak_portable;
    void (*round_row)(const float*, int64_t, float, uint8_t, int8_t*) = round_row_portable;
#if SEQGRAD_HAVE_ISA_LEVELS
    if (level == IsaLevel::avx512) row_peak = row_peak_avx512, round_row = round_row_avx512;
    else if (level == IsaLevel::avx2) row_peak = row_peak_avx2, round_row = round_row_avx2;
#endif
    bool nan = false;
    const float peak = row_peak(x, n, nan);
    if (nan || !std::isfinite(peak) || peak == 0.0f) {
        std::memset(q, flip, static_cast<size_t>(n));
        return nan || !std::isfinite(peak) ? std::nanf("") : 0.0f;
    }
    const float top = static_cast<float>(levels);
    round_row(x, n, top / peak, flip, q);
    return peak / top;
}

}  // namespace

#ifdef SEQGRAD_HAVE_DNNL

namespace {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

dnnl::engine& cpu_engine() { return detail::onednn_engine(); }

constexpr int64_t kLayoutRows = 64;            // rows at which the layout is chosen (oneDNN keeps it for any)
constexpr size_t kMaxKernels = 64;             // kernels kept per block, one per row count; then they start over
constexpr int64_t kBlockAlign = 16;            // column blocks start at multiples of this
constexpr int64_t kPanel = 64;                 // float32: the columns of one panel of oneDNN's layout, below
constexpr int64_t kRowsByHand = 4;             // float32 products of at most this many rows run rows_by_hand
constexpr int64_t kOwnPanel = 16;              // columns of one panel of seqgrad's own float32 layout
constexpr int64_t kStealColumns = 128;         // a block's columns per item of a product of few rows
constexpr int64_t kChunkRows = 256;            // oneDNN's products of more rows than this run a chunk at a time
constexpr int64_t kRowsWeightBytes = 1 << 20;  // packed weights up to this size run by_rows() for many rows

// What x and the packed W hold; W's rows are read from float32 for bf16 (the reorder rounds them).
dt input_type(Precision p) { return p == Precision::int8 ? dt::s8 : p == Precision::bf16 ? dt::bf16 : dt::f32; }
dt plain_type(Precision p) { return p == Precision::int8 ? dt::s8 : dt::f32; }
size_t input_bytes(Precision p) { return p == Precision::int8 ? 1 : p == Precision::bf16 ? 2 : sizeof(float); }

// Int8 without VNNI: x goes to oneDNN as unsigned bytes, q + 128, and the sums lose 128 times each
// column's sum of weights when scaled back (Impl::shift_sums). Given signed bytes, oneDNN's AVX2
// kernels shift them themselves and work out those column sums from the weights at every product,
// in a scalar loop down the columns: a fifth of the time of int8 beam decoding at the AVX2 level.
bool inputs_shifted() { return int8_weight_levels() < 127; }

// rows of x [rows, in] times one column block of W, into dense rows [rows, cols]: oneDNN writes
// int32 to strided rows slowly, and for float32 with rows `out` apart it takes only its gemm
// kernel, whose plain weight layout rows_by_hand does not read, where dense rows take brgemm and
// its panels (run() copies a block's rows into the output). Float32 adds the bias block itself;
// int8 adds it when scaling back.
dnnl::matmul::primitive_desc describe(Precision p, int64_t rows, int64_t in, int64_t cols,
                                      const dnnl::memory::desc& weights, bool bias) {
    const dnnl::memory::desc src({rows, in}, p == Precision::int8 && inputs_shifted() ? dt::u8 : input_type(p),
                                 tag::ab);
    const dnnl::memory::desc dst({rows, cols}, p == Precision::int8 ? dt::s32 : dt::f32, tag::ab);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);  // each thread its own, so calls can overlap
    if (bias && p != Precision::int8)
        return dnnl::matmul::primitive_desc(
            dnnl::matmul::desc(src, weights, dnnl::memory::desc({1, cols}, dt::f32, tag::ab), dst), attr, cpu_engine());
    return dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, weights, dst), attr, cpu_engine());
}

dnnl::memory::desc any_layout(Precision p, int64_t in, int64_t cols) {
    return dnnl::memory::desc({in, cols}, input_type(p), tag::any);
}

// Where oneDNN's float32 layout for a block of W^T [in, cols] is panels of kPanel columns, each
// [in][kPanel] in one stretch (oneDNN's "BA16a64b": blocks of 16 inputs by 64 columns, the inputs
// outer, columns padded with zeros to a whole panel), the floats from one panel to the next; else 0.
int64_t panel_stride(const dnnl::memory::desc& layout) {
    const dnnl_memory_desc_t& d = layout.data;
    if (d.format_kind != dnnl_blocked || d.ndims != 2 || d.data_type != dnnl_f32 || d.offset0 != 0 ||
        d.extra.flags != 0)
        return 0;
    const auto& b = d.format_desc.blocking;
    if (b.inner_nblks != 2 || b.inner_idxs[0] != 0 || b.inner_idxs[1] != 1 || b.inner_blks[1] != kPanel) return 0;
    const int64_t inputs = b.inner_blks[0];  // inputs per block
    if (b.strides[0] != inputs * kPanel || b.strides[1] != d.padded_dims[0] * kPanel) return 0;
    return b.strides[1];
}

// y[i, c] = x[i, :] . W[c, :] (+ bias[c]) for the R rows of x (rows `in` apart) and the `cols`
// columns of a block, from its panels; y's rows are `out` apart. Each panel's columns are summed in
// registers, input after input in order (4 x 16 columns a row: R x 4 sums and the 4 weights fit the
// 32 registers), so the weights are read once, in one stream, for all R rows.
template <int R>
SEQGRAD_TARGET_AVX512 void rows_by_hand(const float* panels, int64_t stride, int64_t in, int64_t cols, const float* x,
                                        const float* bias, float* y, int64_t out) {
    for (int64_t c0 = 0; c0 < cols; c0 += kPanel) {
        const float* w = panels + (c0 / kPanel) * stride;
        __m512 acc[R][4];
        for (int r = 0; r < R; ++r)
            for (int j = 0; j < 4; ++j) acc[r][j] = _mm512_setzero_ps();
        for (int64_t k = 0; k < in; ++k, w += kPanel) {
            const __m512 w0 = _mm512_loadu_ps(w), w1 = _mm512_loadu_ps(w + 16), w2 = _mm512_loadu_ps(w + 32),
                         w3 = _mm512_loadu_ps(w + 48);
            for (int r = 0; r < R; ++r) {
                const __m512 xr = _mm512_set1_ps(x[r * in + k]);
                acc[r][0] = _mm512_fmadd_ps(w0, xr, acc[r][0]);
                acc[r][1] = _mm512_fmadd_ps(w1, xr, acc[r][1]);
                acc[r][2] = _mm512_fmadd_ps(w2, xr, acc[r][2]);
                acc[r][3] = _mm512_fmadd_ps(w3, xr, acc[r][3]);
            }
        }
        const int64_t left = std::min(kPanel, cols - c0);
        for (int j = 0; j < 4 && 16 * j < left; ++j) {
            const __mmask16 mask = detail::first_lanes(left - 16 * j);
            const __m512 b = bias != nullptr ? _mm512_maskz_loadu_ps(mask, bias + c0 + 16 * j) : _mm512_setzero_ps();
            for (int r = 0; r < R; ++r)
                _mm512_mask_storeu_ps(y + r * out + c0 + 16 * j, mask, _mm512_add_ps(acc[r][j], b));
        }
    }
}

// rows_by_hand's sums on seqgrad's own panels of kOwnPanel columns ([in][16], `stride` floats from
// one to the next, the last padded with zeros), written once as plain C++ for with_isa_level to
// compile at each level: the R x 16 sums stay in registers (R x 2 at AVX2, R x 4 with SSE), the
// inputs taken in order, the bias added after. At one and two rows, G panels side by side: a
// panel's sums for one row are two chains of dependent multiply-adds at AVX2, whose latency (four
// cycles a link) bounds a lone panel at 16 bytes of weights a cycle, below what the caches deliver
// (a 384 x 192 block read 20-35% faster four panels at a time on a Zen 5 capped to AVX2). Each
// column's sum is taken in the same order either way, so the results do not change. The G panels
// are G streams from memory, 24 KB apart at d = 384: each is asked for kLinesAhead lines (of one
// input's 16 weights) before it is read. A GPT sampling a token at a time on a busy Zen 5 capped to
// AVX2, twelve alternating pairs: one thread 508 -> 853 tok/s, two 1,148 -> 1,325. The avx512
// level's rows_by_hand reads one stream of 64-column panels and goes without: asked for 2 KB or
// 8 KB ahead, it sampled 3-11% slower (median of eight pairs at each thread count).
constexpr int64_t kLinesAhead = 32;  // 2 KB ahead in each stream

template <int R>
void panel_rows(const float* __restrict panels, int64_t stride, int64_t in, int64_t cols, const float* __restrict x,
                const float* __restrict bias, float* __restrict y, int64_t out) {
    constexpr int G = R == 1 ? 4 : R == 2 ? 2 : 1;
    int64_t c0 = 0;
    for (; c0 + G * kOwnPanel <= cols; c0 += G * kOwnPanel) {
        const float* w = panels + (c0 / kOwnPanel) * stride;
        float acc[G][R][kOwnPanel] = {};
        for (int64_t k = 0; k < in; ++k, w += kOwnPanel) {
            if (k + kLinesAhead < in)
                for (int g = 0; g < G; ++g) __builtin_prefetch(w + g * stride + kLinesAhead * kOwnPanel, 0, 3);
            for (int r = 0; r < R; ++r) {
                const float xr = x[r * in + k];
                for (int g = 0; g < G; ++g) {
#pragma omp simd
                    for (int64_t j = 0; j < kOwnPanel; ++j) acc[g][r][j] += w[g * stride + j] * xr;
                }
            }
        }
        for (int g = 0; g < G; ++g)
            for (int r = 0; r < R; ++r)
                for (int64_t j = 0; j < kOwnPanel; ++j) {
                    const int64_t c = c0 + g * kOwnPanel + j;
                    y[r * out + c] = acc[g][r][j] + (bias != nullptr ? bias[c] : 0.0f);
                }
    }
    for (; c0 < cols; c0 += kOwnPanel) {
        const float* w = panels + (c0 / kOwnPanel) * stride;
        float acc[R][kOwnPanel] = {};
        for (int64_t k = 0; k < in; ++k, w += kOwnPanel)
            for (int r = 0; r < R; ++r) {
                const float xr = x[r * in + k];
#pragma omp simd
                for (int64_t j = 0; j < kOwnPanel; ++j) acc[r][j] += w[j] * xr;
            }
        const int64_t left = std::min(kOwnPanel, cols - c0);
        for (int r = 0; r < R; ++r)
            for (int64_t j = 0; j < left; ++j)
                y[r * out + c0 + j] = acc[r][j] + (bias != nullptr ? bias[c0 + j] : 0.0f);
    }
}

// rows_by_hand's sums on seqgrad's own panels of kOwnPanel columns ([in][16], `stride` floats from
// one to the next, the last padded with zeros), written once as plain C++ for with_isa_level to
// compile at each level: the R x 16 sums stay in registers (R x 2 at AVX2, R x 4 with SSE), the
// inputs taken in order, the bias added after.
// Int8 products of up to four rows where oneDNN's int8 kernels have no VNNI (AVX2, AVX-512
// without it): oneDNN's kernel at one row takes several times as long as the float32 panels
// (3.5x on a Transformer-base sentence at AVX2). The weights go into panels of kOwnPanel columns
// with the inputs in pairs, [in / 2][16][2] (byte 2j + t of pair p is W[16 q + j, 2p + t]; a
// missing last input or column is 0), and sums[i, c] = sum_k qx[i, k] qw[c, k] is summed exactly
// in int32: each pair of products added by one vpmaddwd at AVX2 (|w| <= 63, |x| <= 127: no
// 16-bit product can overflow), plain C++ elsewhere. The sums are oneDNN's own, so the results
// do not depend on which of the two ran.
template <int R>
SEQGRAD_TARGET_AVX2 void int8_pairs_avx2(const int8_t* panels, int64_t stride, int64_t pairs, int64_t cols,
                                         const int16_t* x, int32_t* sums) {
    for (int64_t c0 = 0; c0 < cols; c0 += kOwnPanel) {
        const int8_t* w = panels + (c0 / kOwnPanel) * stride;
        __m256i acc[R][2];
        for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
        for (int64_t p = 0; p < pairs; ++p, w += 2 * kOwnPanel) {
            const __m256i lo = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w)));
            const __m256i hi = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 16)));
            for (int r = 0; r < R; ++r) {
                int32_t both;
                std::memcpy(&both, x + r * 2 * pairs + 2 * p, sizeof both);  // x[r, 2p] and x[r, 2p + 1]
                const __m256i xr = _mm256_set1_epi32(both);
                acc[r][0] = _mm256_add_epi32(acc[r][0], _mm256_madd_epi16(lo, xr));
                acc[r][1] = _mm256_add_epi32(acc[r][1], _mm256_madd_epi16(hi, xr));
            }
        }
        alignas(32) int32_t lanes[kOwnPanel];
        const int64_t left = std::min(kOwnPanel, cols - c0);
        for (int r = 0; r < R; ++r) {
            _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), acc[r][0]);
            _mm256_store_si256(reinterpret_cast<__m256i*>(lanes + 8), acc[r][1]);
            std::memcpy(sums + r * cols + c0, lanes, static_cast<size_t>(left) * sizeof(int32_t));
        }
    }
}

// The same sums in plain C++, for the portable level.
void int8_pairs_portable(const int8_t* panels, int64_t stride, int64_t pairs, int64_t rows, int64_t cols,
                         const int16_t* x, int32_t* sums) {
    for (int64_t c0 = 0; c0 < cols; c0 += kOwnPanel) {
        const int64_t left = std::min(kOwnPanel, cols - c0);
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t j = 0; j < left; ++j) {
                const int8_t* w = panels + (c0 / kOwnPanel) * stride + 2 * j;
                int32_t total = 0;
                for (int64_t p = 0; p < pairs; ++p, w += 2 * kOwnPanel)
                    total += w[0] * x[r * 2 * pairs + 2 * p] + w[1] * x[r * 2 * pairs + 2 * p + 1];
                sums[r * cols + c0 + j] = total;
            }
    }
}

// v after the activation A: what relu() and gelu() compute.
template <PackedActivation A>
inline float activated(float v) {
    if constexpr (A == PackedActivation::relu) return v > 0 ? v : 0.0f;
    else if constexpr (A == PackedActivation::gelu) return detail::gelu_with_slope(v).value;
    else return v;
}

// f(std::integral_constant<PackedActivation, activation>{}): the activation as a compile-time value.
template <typename F>
void with_activation(PackedActivation activation, F&& f) {
    using A = PackedActivation;
    switch (activation) {
        case A::relu: return f(std::integral_constant<A, A::relu>{});
        case A::gelu: return f(std::integral_constant<A, A::gelu>{});
        default: return f(std::integral_constant<A, A::none>{});
    }
}

// `activation` in place on rows x cols of y (rows `out` apart), at the CPU's level, on results
// still in the core's cache.
void activate(PackedActivation activation, float* y, int64_t rows, int64_t cols, int64_t out) {
    if (activation == PackedActivation::none) return;
    with_isa_level([&](auto) {
        with_activation(activation, [&](auto then) {
            for (int64_t i = 0; i < rows; ++i) {
                float* yi = y + i * out;
#pragma omp simd
                for (int64_t j = 0; j < cols; ++j) yi[j] = activated<decltype(then)::value>(yi[j]);
            }
        });
    });
}

// The products of more rows on seqgrad's own panels: R rows (at most kTileRows) by one panel's 16
// columns over inputs [k0, k0 + kc), w the panel's first of them, x the rows' first (rows `in`
// apart), y the tile's first output (rows `out` apart, `left` of its 16 columns real). The sums
// start from init's 16 values (the bias or zeros) on the first stretch of inputs, else from y's,
// and stay in registers across the stretch (R x 2 at AVX2: 12 of the 16), each input's 16 weights
// read once for the R rows. Written as plain C++ for with_isa_level to compile at each level.
constexpr int kTileRows = 6;
constexpr int64_t kTileInputs = 512;            // a stretch: 32 KB of a panel, in L1 while the rows pass
constexpr int64_t kTileBlock = 22 * kTileRows;  // rows a stretch meets in turn: 264 KB of x at most

template <int R>
void panel_tile(const float* __restrict w, int64_t kc, const float* __restrict x, int64_t in,
                const float* __restrict init, float* __restrict y, int64_t out, int64_t left) {
    float acc[R][kOwnPanel];
    for (int r = 0; r < R; ++r)
        for (int64_t j = 0; j < kOwnPanel; ++j) acc[r][j] = init != nullptr ? init[j] : j < left ? y[r * out + j] : 0;
    for (int64_t k = 0; k < kc; ++k, w += kOwnPanel)
        for (int r = 0; r < R; ++r) {
            const float xr = x[r * in + k];
#pragma omp simd
            for (int64_t j = 0; j < kOwnPanel; ++j) acc[r][j] += w[j] * xr;
        }
    if (left == kOwnPanel) {
        for (int r = 0; r < R; ++r)
#pragma omp simd
            for (int64_t j = 0; j < kOwnPanel; ++j) y[r * out + j] = acc[r][j];
    } else {
        for (int r = 0; r < R; ++r)
            for (int64_t j = 0; j < left; ++j) y[r * out + j] = acc[r][j];
    }
}

// One stretch of inputs [k0, k0 + kc) for `rows` rows of x: panel after panel, each meeting every
// row, six at a time.
void panel_stretch(const float* panels, int64_t stride, int64_t k0, int64_t kc, int64_t in, int64_t cols, int64_t rows,
                   const float* x, const float* bias, float* y, int64_t out, PackedActivation activation) {
    for (int64_t c0 = 0; c0 < cols; c0 += kOwnPanel) {
        const int64_t left = std::min(kOwnPanel, cols - c0);
        float start[kOwnPanel] = {};  // the first stretch's: the bias, zeros past the block's last column
        if (k0 == 0 && bias != nullptr)
            for (int64_t j = 0; j < left; ++j) start[j] = bias[c0 + j];
        const float* init = k0 == 0 ? start : nullptr;
        const float* w = panels + (c0 / kOwnPanel) * stride + k0 * kOwnPanel;
        // The next panel's stretch is asked for into the second-level cache while the tiles run, a
        // share of its lines before each tile: read from memory only when the first tile reached
        // it, a wide output layer's panels (32,000 columns) ran at 88% of the small products' rate.
        const float* next = c0 + kOwnPanel < cols ? w + stride : nullptr;
        const int64_t tiles = (rows + kTileRows - 1) / kTileRows;
        const int64_t lines_per_tile = (kc + tiles - 1) / tiles;  // a line holds one input's 16 weights
        with_isa_level([&](auto) {
            for (int64_t r0 = 0; r0 < rows; r0 += kTileRows) {
                if (next != nullptr) {
                    const int64_t first = (r0 / kTileRows) * lines_per_tile;
                    for (int64_t k = first; k < std::min(kc, first + lines_per_tile); ++k)
                        __builtin_prefetch(next + k * kOwnPanel, 0, 2);
                }
                const float* xr = x + r0 * in + k0;
                float* yr = y + r0 * out + c0;
                switch (std::min<int64_t>(kTileRows, rows - r0)) {
                    case 1: panel_tile<1>(w, kc, xr, in, init, yr, out, left); break;
                    case 2: panel_tile<2>(w, kc, xr, in, init, yr, out, left); break;
                    case 3: panel_tile<3>(w, kc, xr, in, init, yr, out, left); break;
                    case 4: panel_tile<4>(w, kc, xr, in, init, yr, out, left); break;
                    case 5: panel_tile<5>(w, kc, xr, in, init, yr, out, left); break;
                    default: panel_tile<kTileRows>(w, kc, xr, in, init, yr, out, left);
                }
            }
        });
        if (k0 + kc == in) activate(activation, y + c0, rows, left, out);  // the panel's sums are whole
    }
}

// y's columns of one block for `rows` rows of x, from its panels (`stride` floats apart): for each
// stretch of kTileInputs inputs and block of kTileBlock rows, each panel meets the block's rows
// while its stretch stays in the first-level cache, and their stretch of x in the second. At 128
// rows (a beam of 4 over 32 sentences) this ran at 91-99% of OpenBLAS's 2048^3 peak at the avx2
// level, where sgemm on the same products, which copies the weights into its panels at every call,
// ran at 77-96%.
void panel_tiles(const float* panels, int64_t stride, int64_t in, int64_t cols, int64_t rows, const float* x,
                 const float* bias, float* y, int64_t out, PackedActivation activation) {
    for (int64_t k0 = 0; k0 < in; k0 += kTileInputs)
        for (int64_t b0 = 0; b0 < rows; b0 += kTileBlock) {
            const int64_t kc = std::min(kTileInputs, in - k0), block_rows = std::min(kTileBlock, rows - b0);
            panel_stretch(panels, stride, k0, kc, in, cols, block_rows, x + b0 * in, bias, y + b0 * out, out,
                          activation);
        }
}

}  // namespace

struct PackedMatrix::Impl {
    Precision precision = Precision::float32;
    int64_t out = 0, in = 0;
    std::vector<float> scales;        // int8
    std::vector<int32_t> shift_sums;  // int8 without VNNI: 128 x the sum of each row of W's quantized values
    // Float32 below AVX-512: seqgrad's own panels (Block::own) for any number of rows. As with
    // every packing, changing the weight in place calls for packing again (Module::pack_weights
    // does after load_state_dict).
    bool own_panels = false;

    struct Kernel {
        dnnl::matmul matmul;
        dnnl::memory::desc src, dst, bias, scratchpad;  // as describe() made them
        int64_t rows = 0;                               // rows it computes: more than asked when padded (see kernel())
    };
    struct Block {
        uint64_t id = next_block_id();  // never reused, so that threads' caches of bound kernels cannot go stale
        int64_t first = 0, cols = 0;    // columns [first, first + cols) of the output
        dnnl::memory::desc layout;
        dnnl::memory packed;
        int64_t panel_stride = 0;  // float32 in panels that rows_by_hand reads (panel_stride()); else 0
        std::vector<float> own;    // own_panels: the block's columns, panels of kOwnPanel, [in][16] each
        std::vector<int8_t> own8;  // int8 without VNNI: the block's columns in pairs, [in / 2][16][2] a panel
        std::mutex mutex;
        std::map<std::pair<int64_t, bool>, std::shared_ptr<const Kernel>> kernels;  // by (rows, bias)
    };
    std::vector<std::unique_ptr<Block>> blocks;

    // The kernel for `rows` rows of x. oneDNN's fast kernels take the packed layout for almost any
    // row count, but not all (one row by 256 columns goes to its reference kernel, 100x slower):
    // then a few more rows are computed, the extra ones zeros, whose results are dropped.
    std::shared_ptr<const Kernel> kernel(Block& block, int64_t rows, bool bias) const {
        std::lock_guard<std::mutex> lock(block.mutex);
        auto found = block.kernels.find({rows, bias});
        if (found != block.kernels.end()) return found->second;
        std::shared_ptr<const Kernel> made;
        for (int64_t padded : {rows, int64_t{2}, int64_t{4}, int64_t{8}, int64_t{16}, kLayoutRows}) {
            if (padded < rows) continue;
            const auto pd = describe(precision, padded, in, block.cols, block.layout, bias);
            const bool fast = pd.weights_desc() == block.layout && std::string(pd.impl_info_str()).rfind("ref", 0) != 0;
            if (fast || (padded == rows && rows >= kLayoutRows)) {  // many rows: whatever oneDNN has
                made = std::make_shared<const Kernel>(Kernel{dnnl::matmul(pd), pd.src_desc(), pd.dst_desc(),
                                                             pd.bias_desc(), pd.scratchpad_desc(), padded});
                break;
            }
        }
        check(made != nullptr, kOp, "oneDNN has no kernel for ", rows, " rows of the packed weights");
        if (block.kernels.size() >= kMaxKernels) block.kernels.clear();
        block.kernels.emplace(std::make_pair(rows, bias), made);
        return made;
    }

    static uint64_t next_block_id() {
        static std::atomic<uint64_t> next{0};
        return next.fetch_add(1, std::memory_order_relaxed);
    }

    // A kernel with its memory objects on one thread, made once and pointed at each product's
    // buffers: making them and the argument map at every product was a twentieth of the time of
    // sampling a language model one token at a time.
    struct Bound {
        std::shared_ptr<const Kernel> kernel;
        dnnl::memory src, dst, pad, bias;
    };
    Bound& bound(Block& block, int64_t rows, bool bias) const {
        struct Key {
            uint64_t block;
            int64_t rows;
            bool bias;
            bool operator==(const Key&) const = default;
        };
        struct Hash {
            size_t operator()(const Key& k) const {
                return std::hash<uint64_t>()(k.block * 0x9E3779B97F4A7C15ull ^ static_cast<uint64_t>(k.rows) * 2 ^
                                             k.bias);
            }
        };
        constexpr size_t kMaxBound = 256;  // then the thread's cache starts over
        thread_local std::unordered_map<Key, Bound, Hash> cache;
        const Key key{block.id, rows, bias};
        if (auto found = cache.find(key); found != cache.end()) return found->second;
        if (cache.size() >= kMaxBound) cache.clear();
        Bound b;
        b.kernel = kernel(block, rows, bias);
        const Kernel& k = *b.kernel;
        b.src = dnnl::memory(k.src, cpu_engine(), DNNL_MEMORY_NONE);
        b.dst = dnnl::memory(k.dst, cpu_engine(), DNNL_MEMORY_NONE);
        b.pad = dnnl::memory(k.scratchpad, cpu_engine(), DNNL_MEMORY_NONE);
        if (bias) b.bias = dnnl::memory(k.bias, cpu_engine(), DNNL_MEMORY_NONE);
        return cache.emplace(key, std::move(b)).first->second;
    }

    // One block of y [rows, out] from x (float32 [rows, in]) or qx (int8 [rows, in], with the row
    // scales; x's bytes q + 128 if `shifted`, as oneDNN takes them without VNNI: inputs_shifted()),
    // on the calling thread. Int8 sums go to `sums` first: the block's own room for
    // min(rows, kChunkRows) x cols of them. Many rows go through oneDNN in chunks, so that a chunk's
    // int32 sums (or float32 rows bound for the block's columns of y) are still in the core's cache
    // when they are scaled back (or copied to y, or activated): a block's sums for 4,096 rows are
    // megabytes.
    void run(Block& block, int64_t rows, const void* x, bool shifted, const float* row_scales, const float* bias,
             int32_t* sums, float* y, PackedActivation activation) const {
        if (rows > kChunkRows && !own_panels &&
            (precision == Precision::int8 || block.cols != out || activation != PackedActivation::none)) {
            const size_t row_bytes = static_cast<size_t>(in) * input_bytes(precision);
            for (int64_t first = 0; first < rows; first += kChunkRows)
                compute(block, std::min(kChunkRows, rows - first), static_cast<const char*>(x) + first * row_bytes,
                        shifted, row_scales != nullptr ? row_scales + first : nullptr, bias, sums, y + first * out,
                        activation);
            return;
        }
        compute(block, rows, x, shifted, row_scales, bias, sums, y, activation);
    }

    // Whether compute() runs a float32 product of `rows` rows on seqgrad's own loop over the
    // block's panels (rows_columns()): at most kRowsByHand rows on its own panels, or on oneDNN's
    // AVX-512 ones at the avx512 level.
    bool rows_by_columns(const Block& block, int64_t rows) const {
        return rows <= kRowsByHand && (own_panels || (precision == Precision::float32 && block.panel_stride > 0 &&
                                                      isa_level() == IsaLevel::avx512));
    }

    // Columns [c0, c1) of the block for `rows` <= kRowsByHand rows of x, where rows_by_columns():
    // c0 a multiple of kStealColumns, so a panel's first column in either layout. Each column's
    // sum is the same whatever the range, so any cut of a block gives the same y.
    void rows_columns(const Block& block, int64_t rows, const float* x, const float* bias, float* y,
                      PackedActivation activation, int64_t c0, int64_t c1) const {
        const int64_t cols = c1 - c0;
        const float* b = bias != nullptr ? bias + block.first + c0 : nullptr;
        float* yc = y + block.first + c0;
        if (own_panels) {
            const int64_t s = in * kOwnPanel;
            const float* panels = block.own.data() + (c0 / kOwnPanel) * s;
            with_isa_level([&](auto) {
                switch (rows) {
                    case 1: return panel_rows<1>(panels, s, in, cols, x, b, yc, out);
                    case 2: return panel_rows<2>(panels, s, in, cols, x, b, yc, out);
                    case 3: return panel_rows<3>(panels, s, in, cols, x, b, yc, out);
                    default: return panel_rows<4>(panels, s, in, cols, x, b, yc, out);
                }
            });
        } else {  // oneDNN's AVX-512 layout, which seqgrad's own loop reads at the avx512 level
            const int64_t s = block.panel_stride;
            const float* panels = static_cast<const float*>(block.packed.get_data_handle()) + (c0 / kPanel) * s;
            static_assert(kRowsByHand == 4, "a case for each row count up to kRowsByHand");
            switch (rows) {
                case 1: rows_by_hand<1>(panels, s, in, cols, x, b, yc, out); break;
                case 2: rows_by_hand<2>(panels, s, in, cols, x, b, yc, out); break;
                case 3: rows_by_hand<3>(panels, s, in, cols, x, b, yc, out); break;
                default: rows_by_hand<4>(panels, s, in, cols, x, b, yc, out);
            }
        }
        activate(activation, yc, rows, cols, out);
    }

    // run()'s product, of at most kChunkRows rows where run() cuts them into chunks.
    void compute(Block& block, int64_t rows, const void* x, bool shifted, const float* row_scales, const float* bias,
                 int32_t* sums, float* y, PackedActivation activation) const {
        if (rows_by_columns(block, rows))
            return rows_columns(block, rows, static_cast<const float*>(x), bias, y, activation, 0, block.cols);
        if (own_panels) {
            const float* b = bias != nullptr ? bias + block.first : nullptr;
            return panel_tiles(block.own.data(), in * kOwnPanel, in, block.cols, rows, static_cast<const float*>(x), b,
                               y + block.first, out, activation);
        }
        if (precision == Precision::int8 && !block.own8.empty() && rows <= kRowsByHand) {
            const int64_t pairs = (in + 1) / 2;
            thread_local std::vector<int16_t> wide_x;  // x's rows as int16, padded to whole pairs
            wide_x.assign(static_cast<size_t>(rows * 2 * pairs), 0);
            const auto* qx = static_cast<const uint8_t*>(x);
            for (int64_t i = 0; i < rows; ++i)
                for (int64_t k = 0; k < in; ++k) {  // x's own values, signed
                    const uint8_t byte = qx[i * in + k];
                    wide_x[static_cast<size_t>(i * 2 * pairs + k)] =
                        static_cast<int16_t>(shifted ? byte - 128 : static_cast<int8_t>(byte));
                }
            const int64_t stride = pairs * 2 * kOwnPanel;
            if (isa_level() != IsaLevel::portable) {
                switch (rows) {
                    case 1:
                        int8_pairs_avx2<1>(block.own8.data(), stride, pairs, block.cols, wide_x.data(), sums);
                        break;
                    case 2:
                        int8_pairs_avx2<2>(block.own8.data(), stride, pairs, block.cols, wide_x.data(), sums);
                        break;
                    case 3:
                        int8_pairs_avx2<3>(block.own8.data(), stride, pairs, block.cols, wide_x.data(), sums);
                        break;
                    default: int8_pairs_avx2<4>(block.own8.data(), stride, pairs, block.cols, wide_x.data(), sums);
                }
            } else {
                int8_pairs_portable(block.own8.data(), stride, pairs, rows, block.cols, wide_x.data(), sums);
            }
            return scale_back(block, rows, sums, nullptr, row_scales, bias, y, activation);
        }
        detail::onednn_on_this_thread();
        thread_local detail::Scratch<uint8_t> scratch;
        thread_local std::vector<uint8_t> padded_x;
        thread_local detail::Scratch<int32_t> padded_sums;
        thread_local detail::Scratch<float> dense_y;
        thread_local dnnl::stream stream(cpu_engine());
        const bool int8 = precision == Precision::int8;
        const bool with_bias = bias != nullptr && !int8;  // int8 adds it when scaling back
        Bound& b = bound(block, rows, with_bias);
        const Kernel* k = b.kernel.get();
        const int64_t n = k->rows;
        uint8_t* pad = scratch.get(std::max<int64_t>(static_cast<int64_t>(k->scratchpad.get_size()), 1));
        // Float32: the kernel writes the block's columns as dense rows (n x cols), into y itself
        // when the block is all of y and n is the rows asked for, else here, copied to y after.
        const bool direct = block.cols == out && n == rows;
        float* y_block = y;
        if (n > rows) {  // zero rows after x's; results into buffers of n rows
            const size_t row_bytes = static_cast<size_t>(in) * input_bytes(precision);
            padded_x.assign(static_cast<size_t>(n) * row_bytes, 0);
            std::memcpy(padded_x.data(), x, static_cast<size_t>(rows) * row_bytes);
            x = padded_x.data();
            if (int8) {
                sums = padded_sums.get(n * block.cols);
            }
        }
        if (!int8 && !direct) {
            y_block = dense_y.get(n * block.cols);
        }
        b.src.set_data_handle(const_cast<void*>(x));
        b.dst.set_data_handle(int8 ? static_cast<void*>(sums) : static_cast<void*>(y_block));
        b.pad.set_data_handle(pad);
        dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, b.src.get()},
                                   {DNNL_ARG_WEIGHTS, block.packed.get()},
                                   {DNNL_ARG_DST, b.dst.get()},
                                   {DNNL_ARG_SCRATCHPAD, b.pad.get()},
                                   {DNNL_ARG_BIAS, nullptr}};
        if (with_bias) {
            b.bias.set_data_handle(const_cast<float*>(bias + block.first));
            args[4].memory = b.bias.get();
        }
        dnnl::error::wrap_c_api(dnnl_primitive_execute(k->matmul.get(), stream.get(), with_bias ? 5 : 4, args),
                                "could not execute a packed product");
        stream.wait();
        if (!int8) {
            if (!direct)
                for (int64_t i = 0; i < rows; ++i)
                    std::memcpy(y + i * out + block.first, y_block + i * block.cols,
                                static_cast<size_t>(block.cols) * sizeof(float));
            return activate(activation, y + block.first, rows, block.cols, out);
        }
        scale_back(block, rows, sums, shifted ? shift_sums.data() + block.first : nullptr, row_scales, bias, y,
                   activation);
    }

    // Int8: y = sums * s_i * s_r (+ b) for the block's columns, from its dense int32 sums, less
    // `shift` (the block's shift_sums) where x's bytes were shifted, then `activation`, in one pass.
    void scale_back(const Block& block, int64_t rows, const int32_t* sums, const int32_t* shift,
                    const float* row_scales, const float* bias, float* y, PackedActivation activation) const {
        const float* w_scales = scales.data() + block.first;
        const float* b = bias != nullptr ? bias + block.first : nullptr;
        const int64_t cols = block.cols;
        float* y_block = y + block.first;
        const auto rows_back = [&](auto biased, auto less_shift, auto then) {
            for (int64_t i = 0; i < rows; ++i) {
                const float s = row_scales[i];
                const int32_t* a = sums + i * cols;
                float* yi = y_block + i * out;
#pragma omp simd
                for (int64_t r = 0; r < cols; ++r) {
                    int32_t sum = a[r];
                    if constexpr (less_shift) sum -= shift[r];
                    float v = static_cast<float>(sum) * (s * w_scales[r]);
                    if constexpr (biased) v += b[r];
                    yi[r] = activated<decltype(then)::value>(v);
                }
            }
        };
        const auto with_shift = [&](auto biased, auto then) {
            if (shift != nullptr) rows_back(biased, std::true_type{}, then);
            else rows_back(biased, std::false_type{}, then);
        };
        const auto with_bias = [&](auto then) {
            if (b != nullptr) with_shift(std::true_type{}, then);
            else with_shift(std::false_type{}, then);
        };
        with_isa_level([&](auto) { with_activation(activation, with_bias); });
    }
};

bool packing_available(Precision precision) {
    if (!packing_enabled.load(std::memory_order_relaxed)) return false;
    // Float32 on oneDNN pays only with a kernel that reads the packed layout as it is (brgemm,
    // AVX-512 and newer); elsewhere seqgrad lays it out in panels of its own (own_panels). Bf16 needs
    // the CPU's bfloat16 instructions (precision.h).
    if (precision == Precision::bf16) return bf16_available();
    return true;
}

void set_packing_enabled(bool enabled) { packing_enabled.store(enabled, std::memory_order_relaxed); }

int int8_weight_levels() {
    // Without VNNI or AMX, oneDNN's int8 kernels multiply with vpmaddubsw: x shifted by 128 to
    // [1, 255] times W, each pair of products summed in 16 bits that saturate at 32767. With W in
    // [-63, 63] no pair can reach it (2 * 255 * 63 = 32130); with 127 levels it would reach 64770.
    using isa = dnnl::cpu_isa;
    static const int levels = [] {
        const isa e = dnnl::get_effective_cpu_isa();
        return e == isa::avx512_core_vnni || e == isa::avx512_core_bf16 || e == isa::avx512_core_amx ||
                       e == isa::avx2_vnni
                   ? 127
                   : 63;
    }();
    return levels;
}

namespace {

// The kernel oneDNN runs for `precision` here, or why it has none.
const std::string& onednn_packed_kernel(Precision precision) {
    static std::string names[3];
    static std::once_flag once[3];
    const int i = static_cast<int>(precision);
    std::call_once(once[i], [&] {
        try {
            names[i] =
                describe(precision, kLayoutRows, 512, 512, any_layout(precision, 512, 512), false).impl_info_str();
        } catch (const dnnl::error& e) {
            names[i] = std::string("none (oneDNN: ") + e.what() + ")";
        }
    });
    return names[i];
}

// Whether float32 weights take oneDNN's layout (its brgemm kernel's), else seqgrad's own panels.
bool float32_on_onednn() { return onednn_packed_kernel(Precision::float32).rfind("brg", 0) == 0; }

}  // namespace

std::string packed_kernel_name(Precision precision) {
    if (precision == Precision::float32 && !float32_on_onednn())
        return std::string("seqgrad panels (") + isa_level_name(isa_level()) + ")";
    return onednn_packed_kernel(precision);
}

PackedMatrix::PackedMatrix(const Tensor& weight, Precision precision) : impl_(std::make_unique<Impl>()) {
    check(weight.defined() && weight.dim() == 2, "PackedMatrix", "the weight must be a 2-D tensor [out, in]");
    Impl& m = *impl_;
    m.precision = precision;
    m.out = weight.size(0);
    m.in = weight.size(1);
    check(m.out > 0 && m.in > 0 && m.out <= INT32_MAX && m.in <= INT32_MAX, "PackedMatrix", "weight ", weight.shape(),
          " has an extent oneDNN cannot take");
    // [out, in] row-major is oneDNN's [in, out] matrix in layout "ba"; int8 quantizes it first.
    std::vector<int8_t> q;
    const void* plain_data = weight.data();
    if (precision == Precision::int8) {
        q.resize(static_cast<size_t>(m.out * m.in));
        m.scales.resize(static_cast<size_t>(m.out));
        const IsaLevel level = isa_level();
        for (int64_t r = 0; r < m.out; ++r) {
            m.scales[r] =
                quantize_row(weight.data() + r * m.in, m.in, int8_weight_levels(), q.data() + r * m.in, level);
            check(!std::isnan(m.scales[r]), "PackedMatrix", "row ", r, " of the weight ", weight.shape(),
                  " holds an infinity or NaN");
        }
        plain_data = q.data();
        if (inputs_shifted()) {
            m.shift_sums.resize(static_cast<size_t>(m.out));
            for (int64_t r = 0; r < m.out; ++r) {
                int32_t sum = 0;
                for (int64_t k = 0; k < m.in; ++k) sum += q[static_cast<size_t>(r * m.in + k)];
                m.shift_sums[static_cast<size_t>(r)] = 128 * sum;
            }
        }
    }
    const size_t element = precision == Precision::int8 ? 1 : sizeof(float);  // of the plain rows
    // One block of columns per thread, in multiples of kBlockAlign.
    const int64_t threads = std::max<int64_t>(1, std::min<int64_t>(get_num_threads(), m.out / kBlockAlign));
    const int64_t width = (m.out + threads - 1) / threads;
    const int64_t step = (width + kBlockAlign - 1) / kBlockAlign * kBlockAlign;
    if (precision == Precision::float32 && !float32_on_onednn()) {
        // Seqgrad's own panels: block columns [first, first + cols) as panels of kOwnPanel columns,
        // element (k, j) of panel p holding W[first + 16 p + j, k], zeros past the last column.
        m.own_panels = true;
        const float* w = weight.data();
        for (int64_t first = 0; first < m.out; first += step) {
            auto block = std::make_unique<Impl::Block>();
            block->first = first;
            block->cols = std::min(step, m.out - first);
            const int64_t panels = (block->cols + kOwnPanel - 1) / kOwnPanel;
            block->own.assign(static_cast<size_t>(panels * m.in * kOwnPanel), 0.0f);
            for (int64_t c = 0; c < block->cols; ++c) {
                float* panel = block->own.data() + (c / kOwnPanel) * m.in * kOwnPanel + c % kOwnPanel;
                const float* row = w + (first + c) * m.in;
                for (int64_t k = 0; k < m.in; ++k) panel[k * kOwnPanel] = row[k];
            }
            m.blocks.push_back(std::move(block));
        }
        return;
    }
    try {
        dnnl::stream stream(cpu_engine());
        for (int64_t first = 0; first < m.out; first += step) {
            auto block = std::make_unique<Impl::Block>();
            block->first = first;
            block->cols = std::min(step, m.out - first);
            block->layout =
                describe(precision, kLayoutRows, m.in, block->cols, any_layout(precision, m.in, block->cols), false)
                    .weights_desc();
            // Rows [first, first + cols) of W: oneDNN's [in, cols] with row stride in ("ba").
            const auto* start = static_cast<const char*>(plain_data) + static_cast<size_t>(first * m.in) * element;
            dnnl::memory plain({{m.in, block->cols}, plain_type(precision), tag::ba}, cpu_engine(),
                               const_cast<char*>(start));
            block->packed = dnnl::memory(block->layout, cpu_engine());
            dnnl::reorder(plain, block->packed).execute(stream, plain, block->packed);
            if (precision == Precision::float32) block->panel_stride = panel_stride(block->layout);
            if (precision == Precision::int8 && int8_weight_levels() < 127) {  // no VNNI: pairs for few rows
                const int64_t pairs = (m.in + 1) / 2, panels = (block->cols + kOwnPanel - 1) / kOwnPanel;
                block->own8.assign(static_cast<size_t>(panels * pairs * 2 * kOwnPanel), 0);
                for (int64_t c = 0; c < block->cols; ++c) {
                    int8_t* panel = block->own8.data() + (c / kOwnPanel) * pairs * 2 * kOwnPanel + 2 * (c % kOwnPanel);
                    const int8_t* row = q.data() + (first + c) * m.in;
                    for (int64_t k = 0; k < m.in; ++k) panel[(k / 2) * 2 * kOwnPanel + k % 2] = row[k];
                }
            }
            m.blocks.push_back(std::move(block));
        }
        stream.wait();
    } catch (const dnnl::error& e) {
        throw Error(std::string("PackedMatrix: oneDNN: ") + e.what());
    }
}

#else  // no oneDNN: every entry point says so

struct PackedMatrix::Impl {
    Precision precision = Precision::float32;
    int64_t out = 0, in = 0;
    std::vector<float> scales;
};

bool packing_available(Precision) { return false; }

void set_packing_enabled(bool) {}

int int8_weight_levels() { return 127; }

std::string packed_kernel_name(Precision) { return "none (built without oneDNN: install libdnnl-dev and rebuild)"; }

PackedMatrix::PackedMatrix(const Tensor&, Precision precision) {
    throw Error(std::string("PackedMatrix: ") + precision_name(precision) +
                " packed weights need oneDNN, and seqgrad was built without it (install Debian's libdnnl-dev "
                "and rebuild)");
}

#endif

PackedMatrix::~PackedMatrix() = default;
Precision PackedMatrix::precision() const { return impl_->precision; }
int64_t PackedMatrix::out_features() const { return impl_->out; }
int64_t PackedMatrix::in_features() const { return impl_->in; }
const float* PackedMatrix::scales() const { return impl_->scales.empty() ? nullptr : impl_->scales.data(); }

namespace {

// linear_packed's checks of x, a weight and its bias; x's rows.
int64_t checked_rows(const Tensor& x, const PackedMatrix& weight, const Tensor& bias) {
    const int64_t in = weight.in_features(), out = weight.out_features();
    check(x.defined(), kOp, "the input is undefined");
    check(!(grad_enabled() && x.requires_grad()), kOp,
          "packed weights have no gradient: run them under NoGradGuard, on inputs that do not require grad");
    check(x.dim() >= 1 && x.size(-1) == in, kOp, "input ", x.shape(), " does not end in the weight's in_features ", in);
    check(!bias.defined() || bias.shape() == Shape{out}, kOp, "bias ", bias.defined() ? bias.shape() : Shape{},
          " does not match the weight's out_features ", out);
    const int64_t rows = x.numel() / in;
    check(rows <= INT32_MAX, kOp, "input ", x.shape(), " has more rows than oneDNN can take");
    return rows;
}

Tensor empty_output(const Tensor& x, int64_t out) {
    Shape out_shape(x.shape().begin(), x.shape().end() - 1);
    out_shape.push_back(out);
    return Tensor::empty(out_shape);
}

#ifdef SEQGRAD_HAVE_DNNL
// x's rows as the products of one precision take them: as they are (float32), rounded to bfloat16,
// or quantized per row (int8, with the rows' scales; bytes q + 128 where `shifted`). In this
// thread's buffers, valid until the next call here on the thread.
struct PackedInput {
    const void* rows = nullptr;
    const float* row_scales = nullptr;
    bool shifted = false;
};

// A thread's buffers for prepared rows.
struct InputBuffers {
    detail::Scratch<int8_t> qx;
    detail::Scratch<float> row_scales;
    detail::Scratch<uint16_t> half_x;
};

PackedInput prepare_input(const float* x, Precision precision, int64_t rows, int64_t in, InputBuffers& buffers) {
    PackedInput input{x, nullptr, false};
    if (precision == Precision::bf16) {
        uint16_t* half = buffers.half_x.get(rows * in);
        detail::round_to_bf16(x, rows * in, half);
        input.rows = half;
    } else if (precision == Precision::int8) {
        int8_t* pq = buffers.qx.get(rows * in);
        float* ps = buffers.row_scales.get(rows);
        const IsaLevel level = isa_level();
        // oneDNN's products take shifted bytes; the pairs (up to kRowsByHand rows) take them as they are
        const bool shifted = rows > kRowsByHand && inputs_shifted();
        detail::parallel_for(rows, std::max<int64_t>(1, (1 << 14) / in), [=](int64_t begin, int64_t end) {
            for (int64_t i = begin; i < end; ++i)
                ps[i] = quantize_row(x + i * in, in, kInputLevels, pq + i * in, level, shifted ? 0x80 : 0);
        });
        input = {pq, ps, shifted};
    }
    return input;
}

PackedInput prepare_input(const Tensor& x, Precision precision, int64_t rows, int64_t in) {
    thread_local InputBuffers buffers;
    return prepare_input(x.data(), precision, rows, in, buffers);
}

// Rows [first, ...) of prepared rows of `in` inputs.
PackedInput rows_from(const PackedInput& input, int64_t first, int64_t in, Precision precision) {
    const size_t row_bytes = static_cast<size_t>(in) * input_bytes(precision);
    return {static_cast<const char*>(input.rows) + static_cast<size_t>(first) * row_bytes,
            input.row_scales != nullptr ? input.row_scales + first : nullptr, input.shifted};
}

// n rows (at most kChunkRows) of prepared input through every block of m, into y's first n rows
// (m.out apart), on the calling thread.
void run_chunk(const PackedMatrix::Impl& m, const PackedInput& input, int64_t n, const float* bias, float* y,
               PackedActivation activation) {
    thread_local detail::Scratch<int32_t> chunk_sums;  // int8: a chunk's sums for one block
    for (const auto& block : m.blocks) {
        int32_t* sums = m.precision == Precision::int8 ? chunk_sums.get(kChunkRows * block->cols) : nullptr;
        m.compute(*block, n, input.rows, input.shifted, input.row_scales, bias, sums, y, activation);
    }
}

// Whether a product runs by rows (each thread all of W's blocks for its share of the rows, a
// chunk at a time) rather than by blocks of columns (each thread its block for every row): for
// many rows through weights small enough that every thread keeps all of them in its cache. Then a
// thread reads the rows of x it quantized itself (prepare_input splits them the same way) and
// writes the rows of y that the next operation's share of rows on the thread reads; by blocks,
// half of x comes from the other core's cache and half of y goes back to it (on an Intel Xeon with
// AMX, oneDNN's chunks of an encoder's products at d = 128 took 10-30% less time by rows).
bool by_rows(const PackedMatrix::Impl& m, int64_t rows) {
    const int64_t weight_bytes = m.in * m.out * static_cast<int64_t>(input_bytes(m.precision));
    return !m.own_panels && rows >= 2 * kChunkRows && weight_bytes <= kRowsWeightBytes;
}

// f(first, n) for each chunk of at most kChunkRows rows of `rows`, the rows split between the
// pool's threads as prepare_input splits them (by_rows); an error on a worker is thrown here.
template <typename F>
void by_chunks(int64_t rows, F&& f) {
    detail::FirstFailure failure;
    detail::parallel_for(rows, kChunkRows, [&](int64_t begin, int64_t end) {
        for (int64_t first = begin; first < end; first += kChunkRows)
            failure.run([&] { f(first, std::min(kChunkRows, end - first)); });
    });
    check(failure.message().empty(), kOp, "oneDNN failed: ", failure.message());
}

// Whether a product is split between threads: from 64K multiply-adds, where one row through a
// 384 x 384 weight (a language model sampling one token) already runs faster on two threads, each
// reading half of the weight from memory; below it waking a thread costs more than it saves.
constexpr double kSplitWork = 1 << 16;
double multiply_adds(const PackedMatrix::Impl& m, int64_t rows) {
    return static_cast<double>(rows) * static_cast<double>(m.in) * static_cast<double>(m.out);
}
bool worth_splitting(const PackedMatrix::Impl& m, int64_t rows) { return multiply_adds(m, rows) >= kSplitWork; }

// Products of one to four rows through one weight or several with the same input (a
// self-attention's queries, keys and values of one position), which read each weight once from
// memory: one job between the threads, whose end has every thread wait for the slowest, rather
// than one a weight. Each thread reads its own block of columns of every weight, kStealColumns at a
// time, and then takes from the back the columns of any block whose thread has not reached them
// (parallel_shares; the shares lie block by block, block 0 of every weight, then block 1, ..., so
// that with one block a thread, as the weights were packed, a thread's own shares are its own
// blocks), so that a thread on a slower or busier core (a small core of a hybrid CPU, a core shared
// with other work) does not hold up every product: one fixed half a thread waited for the slower
// half, whose core, on a busy host, read memory at 30-37 GB/s beside the other's 56. Each column
// is computed by one thread with the same code, so the results do not depend on which thread took
// it, nor on which weights share the job. A GPT sampling a token at a time on two threads of an
// AMD EPYC Zen 5, ten alternating pairs each: 1,452 -> 1,508 tok/s at the avx2 level (8 of 10
// faster), 1,396 -> 1,435 at avx512 (7 of 10). Taken 128 columns at a time from the front rather
// than half of what is left, it was 2% slower (13 of 36 pairs faster).
void run_few_rows(std::span<const PackedMatrix::Impl* const> ms, const float* x, int64_t rows,
                  std::span<const float* const> biases, std::span<float* const> ys, PackedActivation activation) {
    double work = 0;
    for (const PackedMatrix::Impl* m : ms) work += multiply_adds(*m, rows);
    if (work < kSplitWork) {
        for (size_t i = 0; i < ms.size(); ++i)
            for (const auto& block : ms[i]->blocks)
                ms[i]->rows_columns(*block, rows, x, biases[i], ys[i], activation, 0, block->cols);
        return;
    }
    thread_local std::vector<std::pair<size_t, size_t>> which;  // the weight and block of each share
    thread_local std::vector<int64_t> chunks;                   // of each share; read before the job starts
    which.clear();
    chunks.clear();
    size_t most = 0;
    for (const PackedMatrix::Impl* m : ms) most = std::max(most, m->blocks.size());
    for (size_t b = 0; b < most; ++b)
        for (size_t i = 0; i < ms.size(); ++i)
            if (b < ms[i]->blocks.size()) {
                which.emplace_back(i, b);
                chunks.push_back((ms[i]->blocks[b]->cols + kStealColumns - 1) / kStealColumns);
            }
    // This thread's copy of `which`, for the others to read (by name each would read its own).
    const std::pair<size_t, size_t>* of_share = which.data();
    detail::parallel_shares(chunks, [&](int64_t share, int64_t first, int64_t end) {
        const auto [i, b] = of_share[share];
        const PackedMatrix::Impl::Block& block = *ms[i]->blocks[b];
        ms[i]->rows_columns(block, rows, x, biases[i], ys[i], activation, first * kStealColumns,
                            std::min(block.cols, end * kStealColumns));
    });
}

// Whether run_product would multiply `rows` rows by m with run_few_rows.
bool few_rows(const PackedMatrix::Impl& m, int64_t rows) {
    return m.blocks.size() > 1 && m.rows_by_columns(*m.blocks[0], rows);
}

// y = the product of the prepared rows with m (+ bias), then `activation`: one block per thread
// (run_few_rows for one to four rows), or by_rows.
void run_product(const PackedMatrix::Impl& m, const PackedInput& input, int64_t rows, const float* bias, float* y,
                 PackedActivation activation) {
    if (by_rows(m, rows)) {
        by_chunks(rows, [&](int64_t first, int64_t n) {
            run_chunk(m, rows_from(input, first, m.in, m.precision), n, bias, y + first * m.out, activation);
        });
        return;
    }
    const int64_t blocks = static_cast<int64_t>(m.blocks.size());
    if (few_rows(m, rows)) {
        const PackedMatrix::Impl* one[] = {&m};
        return run_few_rows(one, static_cast<const float*>(input.rows), rows, {&bias, 1}, {&y, 1}, activation);
    }
    thread_local detail::Scratch<int32_t> int_parts;  // int8: room for the blocks' int32 sums
    int32_t* parts = m.precision == Precision::int8 ? int_parts.get(std::min(rows, kChunkRows) * m.out) : nullptr;
    detail::FirstFailure failure;  // an error on a worker, carried back here
    detail::parallel_for(blocks, worth_splitting(m, rows) ? 1 : blocks, [&](int64_t first, int64_t end) {
        for (int64_t b = first; b < end; ++b)
            failure.run([&] {
                PackedMatrix::Impl::Block& block = *m.blocks[static_cast<size_t>(b)];
                // run() takes a chunk of rows at a time
                int32_t* sums = parts != nullptr ? parts + std::min(rows, kChunkRows) * block.first : nullptr;
                m.run(block, rows, input.rows, input.shifted, input.row_scales, bias, sums, y, activation);
            });
    });
    check(failure.message().empty(), kOp, "oneDNN failed: ", failure.message());
}
#endif

}  // namespace

Tensor linear_packed(const Tensor& x, const PackedMatrix& weight, const Tensor& bias, PackedActivation activation) {
    const int64_t rows = checked_rows(x, weight, bias);
    Tensor y = empty_output(x, weight.out_features());
    if (rows == 0) return y;
#ifdef SEQGRAD_HAVE_DNNL
    const PackedInput input = prepare_input(x, weight.precision(), rows, weight.in_features());
    run_product(weight.impl(), input, rows, bias.defined() ? bias.data() : nullptr, y.data(), activation);
#endif
    return y;
}

std::vector<Tensor> linear_packed(const Tensor& x, const std::vector<const PackedMatrix*>& weights,
                                  const std::vector<Tensor>& biases) {
    check(!weights.empty() && weights.size() == biases.size(), kOp, weights.size(), " weights and ", biases.size(),
          " biases: one bias (or an undefined one) for each weight");
    int64_t rows = 0;
    for (size_t i = 0; i < weights.size(); ++i) {
        check(weights[i] != nullptr, kOp, "weight ", i, " is null");
        check(weights[i]->precision() == weights[0]->precision(), kOp, "weights packed in ",
              precision_name(weights[0]->precision()), " and ", precision_name(weights[i]->precision()),
              " cannot share one input");
        rows = checked_rows(x, *weights[i], biases[i]);
    }
    std::vector<Tensor> ys;
    for (const PackedMatrix* w : weights) ys.push_back(empty_output(x, w->out_features()));
    if (rows == 0) return ys;
#ifdef SEQGRAD_HAVE_DNNL
    const PackedInput input = prepare_input(x, weights[0]->precision(), rows, weights[0]->in_features());
    // One to four rows through several weights whose columns are shared out (run_few_rows): one
    // job for all of them.
    bool few = weights.size() > 1;
    for (const PackedMatrix* w : weights) few = few && few_rows(w->impl(), rows);
    if (few) {
        std::vector<const PackedMatrix::Impl*> ms;
        std::vector<const float*> bs;
        std::vector<float*> out;
        for (size_t i = 0; i < weights.size(); ++i) {
            ms.push_back(&weights[i]->impl());
            bs.push_back(biases[i].defined() ? biases[i].data() : nullptr);
            out.push_back(ys[i].data());
        }
        run_few_rows(ms, static_cast<const float*>(input.rows), rows, bs, out, PackedActivation::none);
        return ys;
    }
    for (size_t i = 0; i < weights.size(); ++i)
        run_product(weights[i]->impl(), input, rows, biases[i].defined() ? biases[i].data() : nullptr, ys[i].data(),
                    PackedActivation::none);
#endif
    return ys;
}

Tensor linear_packed(const Tensor& x, const PackedMatrix& first, const Tensor& first_bias, PackedActivation between,
                     const PackedMatrix& second, const Tensor& second_bias) {
    const int64_t rows = checked_rows(x, first, first_bias);
    check(second.precision() == first.precision(), kOp, "weights packed in ", precision_name(first.precision()),
          " and ", precision_name(second.precision()), " cannot run one after the other");
    check(second.in_features() == first.out_features(), kOp, "the second weight's in_features ", second.in_features(),
          " is not the first's out_features ", first.out_features());
    check(!second_bias.defined() || second_bias.shape() == Shape{second.out_features()}, kOp, "bias ",
          second_bias.defined() ? second_bias.shape() : Shape{}, " does not match the second weight's out_features ",
          second.out_features());
#ifdef SEQGRAD_HAVE_DNNL
    const PackedMatrix::Impl &m1 = first.impl(), &m2 = second.impl();
    if (by_rows(m1, rows) && by_rows(m2, rows)) {
        Tensor y = empty_output(x, m2.out);
        const PackedInput input = prepare_input(x, m1.precision, rows, m1.in);
        const float* b1 = first_bias.defined() ? first_bias.data() : nullptr;
        const float* b2 = second_bias.defined() ? second_bias.data() : nullptr;
        by_chunks(rows, [&](int64_t first, int64_t n) {
            thread_local detail::Scratch<float> hidden;  // a chunk's rows between the two products
            thread_local InputBuffers hidden_input;      // those rows prepared for the second
            float* h = hidden.get(kChunkRows * m1.out);
            run_chunk(m1, rows_from(input, first, m1.in, m1.precision), n, b1, h, between);
            run_chunk(m2, prepare_input(h, m2.precision, n, m2.in, hidden_input), n, b2, y.data() + first * m2.out,
                      PackedActivation::none);
        });
        return y;
    }
#endif
    return linear_packed(linear_packed(x, first, first_bias, between), second, second_bias);
}

}  // namespace seqgrad
