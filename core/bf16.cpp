// oneDNN's matmul for the products of training: bfloat16 (the rounding, precision.h, and the
// products of mixed-precision training, blas.h's gemm_block_bf16) and float32 (gemm_block_onednn,
// where it runs instead of sgemm: float32_products()). bfloat16 operands are rounded once per
// product (blas.cpp); then each thread of the pool runs its block of rows or columns as one oneDNN
// matmul with a float32 result: written, or added to with a "sum" post-op when the product
// accumulates into a gradient.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "blas.h"
#include "seqgrad/core/cpu.h"
#include "onednn.h"
#include "scratch.h"
#include "parallel.h"
#include "seqgrad/core/error.h"
#include "seqgrad/core/precision.h"
#include "seqgrad/core/threads.h"

namespace seqgrad {
namespace {

std::atomic<int> matmul_mode{static_cast<int>(Precision::float32)};
std::atomic<bool> bf16_enabled{true};

// float32_products(): set_float32_products's choice, or kAuto for the default's rule.
enum Float32Products : int { kAuto, kSgemm, kOnednn };
std::atomic<int> float32_choice{kAuto};
std::atomic<int64_t> onednn_float32_blocks{0};

bool onednn_float32_is_avx512();  // below, with oneDNN

Float32Products parse_float32_products(const std::string& which, const char* what) {
    if (which == "sgemm") return kSgemm;
    if (which == "auto") return kAuto;
    check(which == "onednn", what, "\"", which, "\" is not one of sgemm, onednn, auto");
#ifndef SEQGRAD_HAVE_DNNL
    throw Error(std::string(what) + ": onednn, but seqgrad was built without oneDNN (install libdnnl-dev and rebuild)");
#endif
    return kOnednn;
}

// The choice in force: the set one, else SEQGRAD_FLOAT32_PRODUCTS's, else the rule's (decided once).
Float32Products float32_choice_now() {
    const int set = float32_choice.load(std::memory_order_relaxed);
    if (set != kAuto) return static_cast<Float32Products>(set);
    static const Float32Products by_default = [] {
        const char* env = std::getenv("SEQGRAD_FLOAT32_PRODUCTS");
        const Float32Products asked = env && *env ? parse_float32_products(env, "SEQGRAD_FLOAT32_PRODUCTS") : kAuto;
        if (asked != kAuto) return asked;
        return onednn_float32_is_avx512() ? kOnednn : kSgemm;
    }();
    return by_default;
}

}  // namespace

const char* precision_name(Precision precision) {
    switch (precision) {
        case Precision::int8: return "int8";
        case Precision::bf16: return "bf16";
        default: return "float32";
    }
}

Precision parse_precision(const std::string& name, const char* what) {
    for (Precision p : {Precision::float32, Precision::int8, Precision::bf16})
        if (name == precision_name(p)) return p;
    throw Error(std::string(what) + ": unknown precision \"" + name + "\" (float32, int8 or bf16)");
}

// Round to nearest even on the bits: adding 0x7fff plus the lowest kept bit carries into the kept
// half exactly when the cut-off half is above one half, or equal to it with the kept half odd.
// Infinities are unchanged by it; a NaN's payload could carry into the exponent, so NaNs are kept
// apart (quiet, sign kept).
uint16_t to_bf16(float x) {
    uint32_t u;
    std::memcpy(&u, &x, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
    return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

float from_bf16(uint16_t h) {
    const uint32_t u = static_cast<uint32_t>(h) << 16;
    float x;
    std::memcpy(&x, &u, sizeof x);
    return x;
}

namespace detail {

void round_to_bf16(const float* x, int64_t n, uint16_t* out) {
    parallel_for(n, 1 << 15, [=](int64_t begin, int64_t end) {
#pragma omp simd
        for (int64_t i = begin; i < end; ++i) {  // to_bf16, written for the vector units
            uint32_t u;
            std::memcpy(&u, x + i, sizeof u);
            const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
            const uint32_t nan = (u >> 16) | 0x40u;
            out[i] = static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
        }
    });
}

}  // namespace detail

std::string float32_products() { return float32_choice_now() == kOnednn ? "onednn" : "sgemm"; }

void set_float32_products(const std::string& which) {
    float32_choice.store(parse_float32_products(which, "set_float32_products"), std::memory_order_relaxed);
}

namespace detail {
bool float32_products_on_onednn() { return float32_choice_now() == kOnednn; }
bool weight_products_on_sgemm() { return !float32_products_on_onednn() && matmul_precision() == Precision::float32; }
int64_t onednn_float32_blocks_run() { return onednn_float32_blocks.load(std::memory_order_relaxed); }
}  // namespace detail

Precision matmul_precision() { return static_cast<Precision>(matmul_mode.load(std::memory_order_relaxed)); }

MatmulPrecisionScope::MatmulPrecisionScope(Precision precision) : previous_(matmul_precision()) {
    check(precision != Precision::int8, "matrix products", "training's products are float32 or bf16, not int8");
    if (precision == Precision::bf16) {
        const std::string why = bf16_unavailable_reason();
        check(why.empty(), "matrix products", why);
    }
    matmul_mode.store(static_cast<int>(precision), std::memory_order_relaxed);
}

MatmulPrecisionScope::~MatmulPrecisionScope() {
    matmul_mode.store(static_cast<int>(previous_), std::memory_order_relaxed);
}

void set_bf16_enabled(bool enabled) { bf16_enabled.store(enabled, std::memory_order_relaxed); }

bool bf16_available() { return bf16_unavailable_reason().empty(); }

std::string bf16_unavailable_reason() {
    if (!bf16_enabled.load(std::memory_order_relaxed)) return "bf16 is turned off in this process";
    // Asked of the CPU first: oneDNN's answer on a CPU without the instructions is an error of its
    // own ("could not create a primitive descriptor iterator"), or an emulation slower than float32.
    static const bool instructions = [] {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
        return __builtin_cpu_supports("avx512bf16") != 0;  // every CPU with AMX has it too
#else
        return false;
#endif
    }();
    if (!instructions)
        return "bf16 needs a CPU with bfloat16 instructions (AVX512_BF16 or AMX), and this one has none: "
               "use float32";
    if (isa_level() != IsaLevel::avx512)
        return std::string("bf16 needs the avx512 level, and seqgrad runs at ") + isa_description() +
               " here: unset SEQGRAD_MAX_CPU_ISA, or use float32";
    const std::string kernel = bf16_kernel_name();
    if (kernel.rfind("none (built", 0) == 0) return "bf16 products need oneDNN: " + kernel;
    if (kernel.find("bf16") == std::string::npos && kernel.find("amx") == std::string::npos) {
        const char* cap = std::getenv("ONEDNN_MAX_CPU_ISA");
        return "bf16 needs oneDNN's bfloat16 kernels, and oneDNN has none here (" +
               (cap != nullptr ? "ONEDNN_MAX_CPU_ISA=" + std::string(cap) + " holds it below them" : kernel) +
               "): use float32";
    }
    return "";
}

#ifdef SEQGRAD_HAVE_DNNL

namespace {

using dt = dnnl::memory::data_type;

// A product's shape, strides and flags: one oneDNN primitive each.
struct Shape3 {
    int64_t m, n, k, lda, ldb, ldc;
    bool ta, tb, accumulate;
    bool float32 = false;  // float32 operands, else bfloat16
    auto tie() const { return std::tie(m, n, k, lda, ldb, ldc, ta, tb, accumulate, float32); }
    bool operator<(const Shape3& o) const { return tie() < o.tie(); }
};

struct Kernel {
    dnnl::matmul matmul;
    dnnl::memory::desc a, b, c, scratchpad;
};

// C [m, n] (rows ldc apart) = op(A) op(B) (+ C), A stored [m, k] or, transposed, [k, m] with rows
// lda apart; B likewise [k, n] or [n, k] with rows ldb apart. oneDNN reads a transposed operand
// through its strides, as sgemm does through its flags.
dnnl::matmul::primitive_desc describe(const Shape3& s) {
    using dims = dnnl::memory::dims;
    const dt operands = s.float32 ? dt::f32 : dt::bf16;
    const dnnl::memory::desc a({s.m, s.k}, operands, s.ta ? dims{1, s.lda} : dims{s.lda, 1});
    const dnnl::memory::desc b({s.k, s.n}, operands, s.tb ? dims{1, s.ldb} : dims{s.ldb, 1});
    const dnnl::memory::desc c({s.m, s.n}, dt::f32, dims{s.ldc, 1});
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);  // each thread its own, so calls can overlap
    if (s.accumulate) {
        dnnl::post_ops sum;
        sum.append_sum(1.0f);
        attr.set_post_ops(sum);
    }
    return dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, c), attr, detail::onednn_engine());
}

constexpr size_t kMaxKernels = 512;  // then the table starts over (sequence lengths vary by batch)

std::shared_ptr<const Kernel> kernel(const Shape3& s) {
    static std::mutex mutex;
    static std::map<Shape3, std::shared_ptr<const Kernel>> kernels;
    {
        std::lock_guard<std::mutex> lock(mutex);
        auto found = kernels.find(s);
        if (found != kernels.end()) return found->second;
    }
    const auto pd = describe(s);  // outside the lock: two threads may both make one, and one is kept
    auto made = std::make_shared<const Kernel>(Kernel{dnnl::matmul(pd), pd.src_desc(), pd.weights_desc(), pd.dst_desc(),
                                                      pd.scratchpad_desc()});
    std::lock_guard<std::mutex> lock(mutex);
    if (kernels.size() >= kMaxKernels) kernels.clear();
    return kernels.emplace(s, made).first->second;
}

// The implementation oneDNN picks for a typical product of training, or "none (why)".
std::string onednn_kernel(bool float32) {
    try {
        Shape3 s{64, 512, 512, 512, 512, 512, false, true, false};
        s.float32 = float32;
        return std::string(describe(s).impl_info_str());
    } catch (const dnnl::error& e) {
        return std::string("none (oneDNN: ") + e.what() + ")";
    }
}

const std::string& onednn_float32_kernel() {
    static const std::string name = onednn_kernel(true);
    return name;
}

bool onednn_float32_is_avx512() { return onednn_float32_kernel().find("avx512") != std::string::npos; }

// Runs one block through oneDNN: a and b point at float32 or bfloat16 operands as s says.
void run_block(const Shape3& s, const void* a, const void* b, float* c) {
    detail::onednn_on_this_thread();
    thread_local detail::Scratch<uint8_t> scratch;
    thread_local dnnl::stream stream(detail::onednn_engine());
    const std::shared_ptr<const Kernel> kern = kernel(s);
    uint8_t* pad = scratch.get(std::max<int64_t>(static_cast<int64_t>(kern->scratchpad.get_size()), 1));
    const dnnl::engine& engine = detail::onednn_engine();
    kern->matmul.execute(stream, {{DNNL_ARG_SRC, dnnl::memory(kern->a, engine, const_cast<void*>(a))},
                                  {DNNL_ARG_WEIGHTS, dnnl::memory(kern->b, engine, const_cast<void*>(b))},
                                  {DNNL_ARG_DST, dnnl::memory(kern->c, engine, c)},
                                  {DNNL_ARG_SCRATCHPAD, dnnl::memory(kern->scratchpad, engine, pad)}});
    stream.wait();
}

std::string product_error(const char* what, int64_t m, int64_t n, int64_t k, const dnnl::error& e) {
    return std::string(what) + " matrix product [" + std::to_string(m) + ", " + std::to_string(k) + "] x [" +
           std::to_string(k) + ", " + std::to_string(n) + "]: oneDNN: " + e.what();
}

}  // namespace

std::string bf16_kernel_name() {
    static const std::string name = onednn_kernel(false);
    return name;
}

std::string float32_products_kernel() {
    if (float32_choice_now() == kOnednn) return "oneDNN " + onednn_float32_kernel();
    return "OpenBLAS sgemm (" + blas_core_name() + ")";
}

namespace detail {

void gemm_block_bf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda,
                     const uint16_t* b, int64_t ldb, float* c, int64_t ldc, bool accumulate) {
    try {
        run_block(Shape3{m, n, k, lda, ldb, ldc, ta, tb, accumulate}, a, b, c);
    } catch (const dnnl::error& e) {
        throw Error(product_error("bf16", m, n, k, e));
    }
}

void gemm_block_onednn(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                       int64_t ldb, float* c, int64_t ldc, bool accumulate) {
    onednn_float32_blocks.fetch_add(1, std::memory_order_relaxed);
    Shape3 s{m, n, k, lda, ldb, ldc, ta, tb, accumulate};
    s.float32 = true;
    try {
        run_block(s, a, b, c);
    } catch (const dnnl::error& e) {
        throw Error(product_error("float32", m, n, k, e));
    }
}

}  // namespace detail

#else  // no oneDNN

std::string bf16_kernel_name() { return "none (built without oneDNN: install libdnnl-dev and rebuild)"; }

namespace {
bool onednn_float32_is_avx512() { return false; }
}  // namespace

std::string float32_products_kernel() { return "OpenBLAS sgemm (" + blas_core_name() + ")"; }

namespace detail {

void gemm_block_bf16(bool, bool, int64_t, int64_t, int64_t, const uint16_t*, int64_t, const uint16_t*, int64_t, float*,
                     int64_t, bool) {
    throw Error("bf16 matrix products need oneDNN, and seqgrad was built without it");
}

void gemm_block_onednn(bool, bool, int64_t, int64_t, int64_t, const float*, int64_t, const float*, int64_t, float*,
                       int64_t, bool) {
    throw Error("float32 products on oneDNN need oneDNN, and seqgrad was built without it");
}

}  // namespace detail

#endif

}  // namespace seqgrad
