// seqgrad_bench: Google Benchmark measurements of seqgrad's hot operations on this machine
// (this file), and of whole training steps and decoding of the three models (model_bench.cpp).
//
// What each benchmark measures (all timed in wall-clock time, since seqgrad's thread pool
// works on several threads):
//   matmul/sgemm/N                    raw cblas_sgemm, C = A B, N x N x N, preallocated buffers.
//   matmul/seqgrad_forward/N          seqgrad::matmul(a, b), inputs not requiring grad: sgemm plus
//                                     seqgrad's per-call cost (checks, output allocation, handles).
//   matmul/sgemm_forward_backward/N   raw sgemm doing the three products of a training step:
//                                     C = A B, dA = dC B^T, dB = A^T dC (the same transpose flags
//                                     seqgrad's backward passes to sgemm).
//   matmul/seqgrad_forward_backward/N matmul(a, b).backward(dC) with a and b requiring grad: the
//                                     same three products plus graph recording and the engine.
//   The GFLOP/s column counts 2 N^3 per product (3 products for forward+backward).
//
//   softmax/{forward,forward_backward}/R/C        softmax over the last axis of [R, C]
//   layer_norm/{forward,forward_backward}/R/D     layer_norm of [R, D] with gamma, beta [D]
//   cross_entropy/{forward,forward_backward}/R/V  fused cross_entropy of logits [R, V], with
//                                                 ignore_index 0 on every 8th position and label
//                                                 smoothing 0.1
//   attention/forward_backward/B/H/T/S   the fused attention() of a causal self-attention, batch B,
//                                        H heads of S, T positions, dropout 0.2 on the weights (the
//                                        baby GPT's shape is 64/6/256/64, the GPT CPU recipe's
//                                        12/4/64/32, the g2p Transformer's decoder's 256/4/12/64:
//                                        short texts, many pairs); GFLOP/s counts the six
//                                        products' operations (two forward, four backward) over the
//                                        scores a causal mask keeps, T (T + 1) / 2 per head: against
//                                        the sgemm peak, the rest is attention's own work
//   attention/forward/B/H/T/S            the fused attention() of a bidirectional self-attention
//                                        without a gradient, as a BERT classifying full texts runs
//                                        it (no mask, no dropout; 64/4/64/32 is the langid
//                                        recipe's); GFLOP/s counts its two products, 4 T^2 S per head
//   lstm/forward_backward/B/T/H          one LSTM layer's recurrence over T steps of B rows, hidden H
//                                        (lstm_sequence, time-major, as training runs it: the
//                                        attention LSTM's encoder at `small` is 64/32/256, at `seed`
//                                        32/10/512, at `g2p` 256/12/256); GFLOP/s counts the
//                                        recurrent products, h W_hh^T forward, then d gates W_hh
//                                        and W_hh's gradient (3 x 8 B T H^2): against the sgemm
//                                        peak, the rest is the gates' own work and the waits
//   dropout/forward_backward/N           dropout(p = 0.2) of N floats and its backward; GB/s counts
//                                        the input read and the output written each way (16 N)
//   gelu/forward_backward/N              gelu of N floats and its backward; GB/s counts x read and
//                                        y written, then x and dy read and dx written (20 N)
//   memory/sweep/N                       a plain read of N bytes on seqgrad's threads: the memory's
//                                        rate, which generate/gpt/baby's weights_GB_per_second
//                                        (every weight read once a token) can at best reach
//   The GB/s column counts compulsory memory traffic only: each input read once, each output
//   written once (the byte counts are spelled out beside each benchmark below). Rows are small
//   enough to stay in cache between an operation's passes over them, so this is the traffic
//   that has to reach memory.
//
// At start-up the program prints (and records in the benchmark context) OpenBLAS's core name,
// the thread count, and OPENBLAS_CORETYPE. OPENBLAS_CORETYPE=Haswell forces OpenBLAS's AVX2
// kernels, about half the sgemm speed of its AVX-512 ones on an AVX-512 machine: unset it. Where
// OpenBLAS does not recognise the CPU (Debian's on an Intel Xeon with AMX) and would run its generic
// kernels, the program starts itself again with the CPU's core named, as `seqgrad` does
// (restart_with_blas_core, threads.h). `--print-blas-core` prints the OPENBLAS_CORETYPE it runs
// with (empty: OpenBLAS's own choice) and exits: the comparison scripts hand PyTorch the same.
//
// How to run:
//   cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build --target seqgrad_bench
//   env -u OPENBLAS_CORETYPE ./build/bench/seqgrad_bench --benchmark_filter=matmul
//   env -u OPENBLAS_CORETYPE ./build/bench/seqgrad_bench --threads 1 --benchmark_min_time=0.2
// Threads: `--threads N` (or `--threads=N`), else the SEQGRAD_THREADS environment variable, else
// seqgrad's default (the number of cores). It sets OpenBLAS's threads and seqgrad's alike.
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "seqgrad/core/autograd.h"
#include "seqgrad/core/cpu.h"
#include "seqgrad/core/isa_dispatch.h"
#include "seqgrad/core/ops.h"
#include "seqgrad/core/precision.h"
#include "seqgrad/core/random.h"
#include "seqgrad/core/tensor.h"
#include "seqgrad/core/threads.h"
#include "seqgrad/nn/attention.h"
#include "seqgrad/nn/distributed.h"
#include "bench_common.h"

extern "C" {
// OpenBLAS's own controls (also in its cblas.h; declared here so any CBLAS header will do).
char* openblas_get_corename(void);
int openblas_get_num_threads(void);
void openblas_set_num_threads(int num_threads);
// Stops OpenBLAS's threads until a call next needs them; weak, null in a BLAS without it.
int blas_thread_shutdown_(void) __attribute__((weak));
}

namespace seqgrad_bench {
namespace {

using seqgrad::Generator;
using seqgrad::IntTensor;
using seqgrad::Shape;
using seqgrad::Tensor;

// ---- helpers ----

// A 64-byte aligned float buffer (as seqgrad's allocator gives), for the raw sgemm baselines.
struct AlignedFloats {
    explicit AlignedFloats(int64_t n)
        : data(static_cast<float*>(::operator new[](static_cast<size_t>(n) * sizeof(float), std::align_val_t{64}))),
          size(n) {}
    ~AlignedFloats() { ::operator delete[](data, std::align_val_t{64}); }
    AlignedFloats(const AlignedFloats&) = delete;
    AlignedFloats& operator=(const AlignedFloats&) = delete;

    float* data;
    int64_t size;
};

void fill_uniform(float* p, int64_t n, Generator& gen) {
    for (int64_t i = 0; i < n; ++i) p[i] = gen.uniform(-1.0f, 1.0f);
}

Tensor random_tensor(const Shape& shape, Generator& gen, bool requires_grad = false) {
    return Tensor::uniform(shape, -1.0f, 1.0f, gen, requires_grad);
}

// C[m, n] = op(A) op(B), row-major, as seqgrad's gemm calls it.
void sgemm(bool ta, bool tb, int n, const float* a, const float* b, float* c) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, n, n, n, 1.0f, a, n, b,
                n, 0.0f, c, n);
}

// ---- matrix products ----

double product_flops(int64_t n) {
    return 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
}

void matmul_sgemm(benchmark::State& state) {
    const int64_t n = state.range(0);
    Generator gen(1);
    AlignedFloats a(n * n), b(n * n), c(n * n);
    fill_uniform(a.data, a.size, gen);
    fill_uniform(b.data, b.size, gen);
    for (auto _ : state) {
        sgemm(false, false, static_cast<int>(n), a.data, b.data, c.data);
        benchmark::DoNotOptimize(c.data);
        benchmark::ClobberMemory();
    }
    set_rate_counter(state, "GFLOP/s", product_flops(n));
}

void matmul_seqgrad_forward(benchmark::State& state) {
    const int64_t n = state.range(0);
    Generator gen(1);
    const Tensor a = random_tensor({n, n}, gen);
    const Tensor b = random_tensor({n, n}, gen);
    for (auto _ : state) {
        Tensor c = seqgrad::matmul(a, b);
        benchmark::DoNotOptimize(c.data());
        benchmark::ClobberMemory();
    }
    set_rate_counter(state, "GFLOP/s", product_flops(n));
}

// The three products of a forward and backward pass through C = A B, with seqgrad's flags:
// C = A B (NN), dA = dC B^T (NT), dB = A^T dC (TN).
void matmul_sgemm_forward_backward(benchmark::State& state) {
    const int64_t n = state.range(0);
    const int ni = static_cast<int>(n);
    Generator gen(1);
    AlignedFloats a(n * n), b(n * n), c(n * n), grad_c(n * n), grad_a(n * n), grad_b(n * n);
    fill_uniform(a.data, a.size, gen);
    fill_uniform(b.data, b.size, gen);
    fill_uniform(grad_c.data, grad_c.size, gen);
    for (auto _ : state) {
        sgemm(false, false, ni, a.data, b.data, c.data);
        sgemm(false, true, ni, grad_c.data, b.data, grad_a.data);
        sgemm(true, false, ni, a.data, grad_c.data, grad_b.data);
        benchmark::DoNotOptimize(c.data);
        benchmark::DoNotOptimize(grad_a.data);
        benchmark::DoNotOptimize(grad_b.data);
        benchmark::ClobberMemory();
    }
    set_rate_counter(state, "GFLOP/s", 3 * product_flops(n));
}

void matmul_seqgrad_forward_backward(benchmark::State& state) {
    const int64_t n = state.range(0);
    Generator gen(1);
    Tensor a = random_tensor({n, n}, gen, /*requires_grad=*/true);
    Tensor b = random_tensor({n, n}, gen, /*requires_grad=*/true);
    const Tensor grad_c = random_tensor({n, n}, gen);
    for (auto _ : state) {
        {
            Tensor c = seqgrad::matmul(a, b);
            c.backward(grad_c);
        }
        benchmark::DoNotOptimize(a.grad().data());
        benchmark::DoNotOptimize(b.grad().data());
        benchmark::ClobberMemory();
        a.zero_grad();  // drop the gradients, so each iteration computes them afresh (no += pass)
        b.zero_grad();
    }
    set_rate_counter(state, "GFLOP/s", 3 * product_flops(n));
}

// One operation of one operand, forward then backward, over and over: x of `shape` requiring grad
// (from Generator(seed), which `op` may draw from too), a fixed gradient; the gradient is dropped
// after each iteration so that none accumulates. GB/s counts bytes_per_element times x's elements.
template <typename Op>
void forward_backward(benchmark::State& state, const Shape& shape, uint64_t seed, double bytes_per_element, Op op) {
    Generator gen(seed);
    Tensor x = random_tensor(shape, gen, /*requires_grad=*/true);
    const Tensor grad_y = random_tensor(shape, gen);
    for (auto _ : state) {
        {
            Tensor y = op(x, gen);
            y.backward(grad_y);
        }
        benchmark::DoNotOptimize(x.grad().data());
        benchmark::ClobberMemory();
        x.zero_grad();
    }
    set_rate_counter(state, "GB/s", bytes_per_element * static_cast<double>(x.numel()));
}

// ---- softmax over the last axis of [rows, cols] ----
// N = rows * cols floats.
//   forward:          read x, write y                                   8 N bytes
//   forward+backward: forward, then read y and dy, write dx             8 N + 12 N = 20 N bytes

void softmax_forward(benchmark::State& state) {
    const int64_t rows = state.range(0), cols = state.range(1);
    Generator gen(2);
    const Tensor x = random_tensor({rows, cols}, gen);
    for (auto _ : state) {
        Tensor y = seqgrad::softmax(x);
        benchmark::DoNotOptimize(y.data());
        benchmark::ClobberMemory();
    }
    set_rate_counter(state, "GB/s", 8.0 * static_cast<double>(rows * cols));
}

void softmax_forward_backward(benchmark::State& state) {
    forward_backward(state, {state.range(0), state.range(1)}, 2, 20.0,
                     [](const Tensor& x, Generator&) { return seqgrad::softmax(x); });
}

// ---- layer_norm of [rows, d] ----
// N = rows * d floats.
//   forward:  read x (4N), gamma and beta (8d); write y (4N), mean and rstd (8 rows)
//             = 8 N + 8 d + 8 rows bytes
//   backward: read x and dy (8N), gamma (4d), mean and rstd (8 rows); write dx (4N),
//             dgamma and dbeta (8d)  = 12 N + 12 d + 8 rows bytes
//   forward+backward = 20 N + 20 d + 16 rows bytes

void layer_norm_forward(benchmark::State& state) {
    const int64_t rows = state.range(0), d = state.range(1);
    Generator gen(3);
    const Tensor x = random_tensor({rows, d}, gen);
    const Tensor gamma = random_tensor({d}, gen);
    const Tensor beta = random_tensor({d}, gen);
    for (auto _ : state) {
        Tensor y = seqgrad::layer_norm(x, gamma, beta, 1e-5f);
        benchmark::DoNotOptimize(y.data());
        benchmark::ClobberMemory();
    }
    set_rate_counter(state, "GB/s", 8.0 * static_cast<double>(rows * d) + 8.0 * static_cast<double>(d + rows));
}

void layer_norm_forward_backward(benchmark::State& state) {
    const int64_t rows = state.range(0), d = state.range(1);
    Generator gen(3);
    Tensor x = random_tensor({rows, d}, gen, /*requires_grad=*/true);
    Tensor gamma = random_tensor({d}, gen, /*requires_grad=*/true);
    Tensor beta = random_tensor({d}, gen, /*requires_grad=*/true);
    const Tensor grad_y = random_tensor({rows, d}, gen);
    for (auto _ : state) {
        {
            Tensor y = seqgrad::layer_norm(x, gamma, beta, 1e-5f);
            y.backward(grad_y);
        }
        benchmark::DoNotOptimize(x.grad().data());
        benchmark::ClobberMemory();
        x.zero_grad();
        gamma.zero_grad();
        beta.zero_grad();
    }
    set_rate_counter(state, "GB/s",
                     20.0 * static_cast<double>(rows * d) + 20.0 * static_cast<double>(d) +
                         16.0 * static_cast<double>(rows));
}

// ---- cross_entropy of logits [rows, vocab] against targets [rows] ----
// N = rows * vocab floats; targets are int64.
//   forward:  read logits (4N) and targets (8 rows); write the log-sum-exp saved for backward
//             (4 rows) = 4 N + 12 rows bytes
//   backward: read logits (4N), targets (8 rows), log-sum-exp (4 rows); write dlogits (4N)
//             = 8 N + 12 rows bytes
//   forward+backward = 12 N + 24 rows bytes

// Targets in [1, vocab), with every 8th position set to the ignored id 0.
IntTensor make_targets(int64_t rows, int64_t vocab, Generator& gen) {
    std::vector<int64_t> ids(static_cast<size_t>(rows));
    for (int64_t i = 0; i < rows; ++i)
        ids[static_cast<size_t>(i)] =
            i % 8 == 7 ? 0 : 1 + static_cast<int64_t>(gen.below(static_cast<uint64_t>(vocab - 1)));
    return IntTensor::from_vector(std::move(ids), {rows});
}

constexpr int64_t kIgnoreIndex = 0;
constexpr float kLabelSmoothing = 0.1f;

void cross_entropy_forward(benchmark::State& state) {
    const int64_t rows = state.range(0), vocab = state.range(1);
    Generator gen(4);
    const Tensor logits = random_tensor({rows, vocab}, gen);
    const IntTensor targets = make_targets(rows, vocab, gen);
    for (auto _ : state) {
        Tensor loss = seqgrad::cross_entropy(logits, targets, kIgnoreIndex, kLabelSmoothing);
        benchmark::DoNotOptimize(loss.data());
        benchmark::ClobberMemory();
    }
    set_rate_counter(state, "GB/s", 4.0 * static_cast<double>(rows * vocab) + 12.0 * static_cast<double>(rows));
}

void cross_entropy_forward_backward(benchmark::State& state) {
    const int64_t rows = state.range(0), vocab = state.range(1);
    Generator gen(4);
    Tensor logits = random_tensor({rows, vocab}, gen, /*requires_grad=*/true);
    const IntTensor targets = make_targets(rows, vocab, gen);
    for (auto _ : state) {
        {
            Tensor loss = seqgrad::cross_entropy(logits, targets, kIgnoreIndex, kLabelSmoothing);
            loss.backward();
        }
        benchmark::DoNotOptimize(logits.grad().data());
        benchmark::ClobberMemory();
        logits.zero_grad();
    }
    set_rate_counter(state, "GB/s", 12.0 * static_cast<double>(rows * vocab) + 24.0 * static_cast<double>(rows));
}

// ---- attention and dropout ----

void attention_forward_backward(benchmark::State& state) {
    const int64_t batch = state.range(0), heads = state.range(1), length = state.range(2), size = state.range(3);
    Generator gen(6);
    const Shape shape{batch, length, heads * size};
    Tensor q = random_tensor(shape, gen, /*requires_grad=*/true);
    Tensor k = random_tensor(shape, gen, /*requires_grad=*/true);
    Tensor v = random_tensor(shape, gen, /*requires_grad=*/true);
    const Tensor grad_context = random_tensor(shape, gen);
    const IntTensor causal = seqgrad::nn::causal_mask(length);
    for (auto _ : state) {
        {
            Tensor context = seqgrad::attention(q, k, v, heads, causal, 0.2f, true, &gen);
            context.backward(grad_context);
        }
        benchmark::DoNotOptimize(q.grad().data());
        benchmark::ClobberMemory();
        for (Tensor* t : {&q, &k, &v}) t->zero_grad();
    }
    const double scores = static_cast<double>(batch * heads) * static_cast<double>(length * (length + 1) / 2);
    set_rate_counter(state, "GFLOP/s", 6 * 2 * scores * static_cast<double>(size));
}

void lstm_forward_backward(benchmark::State& state) {
    const int64_t batch = state.range(0), steps = state.range(1), hidden = state.range(2);
    Generator gen(7);
    Tensor gates = random_tensor({steps, batch, 4 * hidden}, gen, /*requires_grad=*/true);
    Tensor h0 = random_tensor({batch, hidden}, gen, /*requires_grad=*/true);
    Tensor c0 = random_tensor({batch, hidden}, gen, /*requires_grad=*/true);
    Tensor w_hh = random_tensor({4 * hidden, hidden}, gen, /*requires_grad=*/true);
    const Tensor grad_out = random_tensor({steps, batch, hidden}, gen);
    for (auto _ : state) {
        {
            const seqgrad::LstmSequence run = seqgrad::lstm_sequence(gates, h0, c0, w_hh, {}, false, true);
            run.outputs.backward(grad_out);
        }
        benchmark::DoNotOptimize(w_hh.grad().data());
        benchmark::ClobberMemory();
        for (Tensor* t : {&gates, &h0, &c0, &w_hh}) t->zero_grad();
    }
    set_rate_counter(state, "GFLOP/s",
                     3.0 * 8.0 * static_cast<double>(batch * steps) * static_cast<double>(hidden * hidden));
}

void attention_forward(benchmark::State& state) {
    const int64_t batch = state.range(0), heads = state.range(1), length = state.range(2), size = state.range(3);
    Generator gen(6);
    const Shape shape{batch, length, heads * size};
    const Tensor q = random_tensor(shape, gen), k = random_tensor(shape, gen), v = random_tensor(shape, gen);
    const seqgrad::NoGradGuard no_grad;
    for (auto _ : state) {
        Tensor context = seqgrad::attention(q, k, v, heads, IntTensor(), 0.0f, false, nullptr);
        benchmark::DoNotOptimize(context.data());
    }
    const double scores = static_cast<double>(batch * heads) * static_cast<double>(length * length);
    set_rate_counter(state, "GFLOP/s", 2 * 2 * scores * static_cast<double>(size));
}

void dropout_forward_backward(benchmark::State& state) {
    forward_backward(state, {state.range(0)}, 7, 16.0,
                     [](const Tensor& x, Generator& gen) { return seqgrad::dropout(x, 0.2f, true, gen); });
}

void gelu_forward_backward(benchmark::State& state) {
    forward_backward(state, {state.range(0)}, 8, 20.0, [](const Tensor& x, Generator&) { return seqgrad::gelu(x); });
}

// A plain read of N bytes of floats, summed at seqgrad's kernel level and split over seqgrad's
// threads as a packed product splits its weights: the rate at which memory hands over data that
// is not in the caches (the array is larger than them), which decoding one token at a time, reading
// every weight once, can at best reach.
// The sum of x[0, n): 64 running sums side by side (4 to 16 vector registers), so that the loads,
// not the additions waiting for each other, set the pace.
float sum_of(const float* __restrict x, int64_t n) {
    float lanes[64] = {};
    int64_t i = 0;
    for (; i + 64 <= n; i += 64)
#pragma omp simd
        for (int64_t j = 0; j < 64; ++j) lanes[j] += x[i + j];
    float total = 0;
    for (; i < n; ++i) total += x[i];
    for (const float lane : lanes) total += lane;
    return total;
}

void memory_sweep(benchmark::State& state) {
    const int64_t n = state.range(0) / static_cast<int64_t>(sizeof(float));
    std::vector<float> data(static_cast<size_t>(n), 1.0f);
    const int threads = seqgrad::get_num_threads();
    std::vector<float> sums(static_cast<size_t>(threads));
    const float* pd = data.data();
    float* ps = sums.data();
    for (auto _ : state) {
        seqgrad::parallel_for(threads, 1, [&](int64_t begin, int64_t end) {
            for (int64_t t = begin; t < end; ++t) {
                const int64_t first = n * t / threads, last = n * (t + 1) / threads;
                seqgrad::with_isa_level([&](auto) { ps[t] = sum_of(pd + first, last - first); });
            }
        });
        benchmark::DoNotOptimize(sums.data());
        benchmark::ClobberMemory();
    }
    state.counters["GB_per_second"] =
        benchmark::Counter(static_cast<double>(state.range(0)) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// ---- registration and start-up ----

using BenchmarkFn = void (*)(benchmark::State&);

void register_matmul(const char* name, BenchmarkFn fn) {
    benchmark::RegisterBenchmark(name, fn)->RangeMultiplier(2)->Range(64, 1024)->UseRealTime()->Unit(
        benchmark::kMicrosecond);
}

// Softmax and cross-entropy shapes [rows, classes]: attention scores (256 x 12 heads, 44 keys),
// a 1000-class output (64 x 32 positions) and a 12,000-word vocabulary (32 x 12 positions).
const std::vector<std::vector<int64_t>> kRowShapes = {{256 * 12, 44}, {64 * 32, 1000}, {32 * 12, 12000}};
// Layer-norm shapes [rows, d].
const std::vector<std::vector<int64_t>> kNormShapes = {{4096, 256}, {384, 512}};

void register_rows(const char* name, BenchmarkFn fn, const std::vector<std::vector<int64_t>>& shapes) {
    auto* b = benchmark::RegisterBenchmark(name, fn);
    for (const auto& shape : shapes) b->Args(shape);
    b->UseRealTime()->Unit(benchmark::kMicrosecond);
}

}  // namespace

void register_op_benchmarks() {
    register_matmul("matmul/sgemm", matmul_sgemm);
    register_matmul("matmul/seqgrad_forward", matmul_seqgrad_forward);
    register_matmul("matmul/sgemm_forward_backward", matmul_sgemm_forward_backward);
    register_matmul("matmul/seqgrad_forward_backward", matmul_seqgrad_forward_backward);
    register_rows("softmax/forward", softmax_forward, kRowShapes);
    register_rows("softmax/forward_backward", softmax_forward_backward, kRowShapes);
    register_rows("layer_norm/forward", layer_norm_forward, kNormShapes);
    register_rows("layer_norm/forward_backward", layer_norm_forward_backward, kNormShapes);
    register_rows("cross_entropy/forward", cross_entropy_forward, kRowShapes);
    register_rows("cross_entropy/forward_backward", cross_entropy_forward_backward, kRowShapes);
    register_rows("attention/forward_backward", attention_forward_backward,
                  {{64, 6, 256, 64}, {12, 4, 64, 32}, {256, 4, 12, 64}});
    register_rows("attention/forward", attention_forward, {{64, 4, 64, 32}, {64, 6, 256, 64}});
    register_rows("lstm/forward_backward", lstm_forward_backward, {{64, 32, 256}, {32, 10, 512}, {256, 12, 256}});
    // a baby GPT's [64, 256, 384] activation; one that stays in the caches
    register_rows("dropout/forward_backward", dropout_forward_backward, {{64 * 256 * 384}, {64 * 1024}});
    // the baby GPT's feed-forward activation [64, 256, 1536]; one that stays in the caches
    register_rows("gelu/forward_backward", gelu_forward_backward, {{64 * 256 * 1536}, {64 * 1024}});
    // the baby GPT's weights (about 42 MB) and twice that, past the caches of the machines measured
    register_rows("memory/sweep", memory_sweep, {{42 << 20}, {84 << 20}});
}

double sgemm_peak_flops() {
    static const double peak = [] {
        constexpr int n = 2048;
        Generator gen(5);
        AlignedFloats a(int64_t{n} * n), b(int64_t{n} * n), c(int64_t{n} * n);
        fill_uniform(a.data, a.size, gen);
        fill_uniform(b.data, b.size, gen);
        // seqgrad keeps OpenBLAS at one thread and splits products itself; here OpenBLAS gets
        // all of seqgrad's threads for its own best.
        const int blas_threads = openblas_get_num_threads();
        openblas_set_num_threads(seqgrad::get_num_threads());
        sgemm(false, false, n, a.data, b.data, c.data);  // warm up
        double best = 0;
        for (int run = 0; run < 3; ++run) {
            const auto t0 = std::chrono::steady_clock::now();
            sgemm(false, false, n, a.data, b.data, c.data);
            const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            best = std::max(best, product_flops(n) / seconds);
        }
        openblas_set_num_threads(blas_threads);
        // The threads it ran on would poll for work for about a second more, beside the first
        // benchmark's: stopped here, as seqgrad stops them at start (threads.cpp).
        if (blas_thread_shutdown_ != nullptr) blas_thread_shutdown_();
        return best;
    }();
    return peak;
}

namespace {

// Parses a positive thread count; exits with a message on anything else.
int parse_threads(const char* text, const char* source) {
    char* end = nullptr;
    const long n = std::strtol(text, &end, 10);
    if (end == text || *end != '\0' || n < 1 || n > 4096) {
        std::fprintf(stderr, "seqgrad_bench: %s must be a positive integer, got '%s'\n", source, text);
        std::exit(2);
    }
    return static_cast<int>(n);
}

// Removes `--threads N` / `--threads=N` from argv (before Google Benchmark sees the arguments)
// and returns the count, or 0 when absent.
int take_threads_flag(int& argc, char** argv) {
    int threads = 0;
    int kept = 1;
    for (int i = 1; i < argc; ++i) {
        const char* arg = argv[i];
        if (std::strcmp(arg, "--threads") == 0) {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "seqgrad_bench: --threads needs a value\n");
                std::exit(2);
            }
            threads = parse_threads(argv[++i], "--threads");
        } else if (std::strncmp(arg, "--threads=", 10) == 0) {
            threads = parse_threads(arg + 10, "--threads");
        } else {
            argv[kept++] = argv[i];
        }
    }
    argc = kept;
    argv[argc] = nullptr;
    return threads;
}

// Whether a thread of this process other than the caller is running or waiting for a core: state
// R in /proc/self/task/<tid>/stat (the field after the name's closing parenthesis).
bool other_thread_runnable() {
    const std::string self = std::to_string(gettid());
    std::error_code error;
    for (const auto& task : std::filesystem::directory_iterator("/proc/self/task", error)) {
        if (task.path().filename() == self) continue;
        std::ifstream stat(task.path() / "stat");
        std::string line;
        std::getline(stat, line);
        const size_t close = line.rfind(')');
        if (close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'R') return true;
    }
    return false;
}

// OpenBLAS's own threads (seqgrad keeps OpenBLAS at one thread, but the library starts them when it
// loads, and the sgemm peak runs on them) poll for work in a loop of sched_yield for about a second
// before they sleep: a third runnable thread beside seqgrad's two, for the first second of every
// benchmark. sgemm_peak_flops stops them; with a BLAS that cannot, this waits until no other
// thread of the process runs, three polls 10 ms apart, at most 5 s.
// (On an AMD EPYC at the avx2 cap, `train_step/transformer/g2p` timed for half a second ran 3.7%
// faster, four alternating pairs, with those threads told to sleep at once.)
void wait_for_other_threads_to_sleep() {
    using namespace std::chrono_literals;
    for (int quiet = 0, polls = 0; quiet < 3 && polls < 500; ++polls) {
        quiet = other_thread_runnable() ? 0 : quiet + 1;
        std::this_thread::sleep_for(10ms);
    }
}

// Applies the requested thread count, then reports the setup to stderr and the benchmark context.
void configure_and_describe(int requested_threads) {
    if (requested_threads == 0) {
        if (const char* env = std::getenv("SEQGRAD_THREADS"); env && *env)
            requested_threads = parse_threads(env, "SEQGRAD_THREADS");
    }
    if (requested_threads > 0) seqgrad::set_num_threads(requested_threads);

    const char* corename = openblas_get_corename();
    const std::string core = corename ? corename : "(unknown)";
    const char* coretype = std::getenv("OPENBLAS_CORETYPE");
    const std::string coretype_text = coretype ? coretype : "(unset)";
    const int threads = seqgrad::get_num_threads();

    for (const seqgrad::RuntimePart& part : seqgrad::nn::runtime_parts())
        benchmark::AddCustomContext(part.name, part.value);
    benchmark::AddCustomContext("openblas_core", core);
    benchmark::AddCustomContext("OPENBLAS_CORETYPE", coretype_text);
    benchmark::AddCustomContext("seqgrad_threads", std::to_string(threads));
    benchmark::AddCustomContext("openblas_threads", std::to_string(openblas_get_num_threads()));
    const double peak_gflops = sgemm_peak_flops() * 1e-9;
    wait_for_other_threads_to_sleep();
    benchmark::AddCustomContext("sgemm_peak_gflops", std::to_string(peak_gflops));
    benchmark::AddCustomContext("bf16_kernel", seqgrad::bf16_available() ? seqgrad::bf16_kernel_name()
                                                                         : seqgrad::bf16_unavailable_reason());

    std::fprintf(stderr, "%s\nseqgrad_bench: %d thread(s), OPENBLAS_CORETYPE %s, sgemm peak %.0f GFLOP/s (2048^3)\n",
                 seqgrad::nn::runtime_line().c_str(), threads, coretype_text.c_str(), peak_gflops);
    if (coretype && !seqgrad::blas_core_set_by_restart())
        std::fprintf(stderr,
                     "seqgrad_bench: warning: OPENBLAS_CORETYPE=%s overrides OpenBLAS's own choice of kernels "
                     "(Haswell = AVX2, about half the sgemm speed here); run with `env -u OPENBLAS_CORETYPE`\n",
                     coretype);
}

}  // namespace
}  // namespace seqgrad_bench

// What ranks other than 0 report under mpirun: nothing.
class SilentReporter : public benchmark::BenchmarkReporter {
public:
    bool ReportContext(const Context&) override { return true; }
    void ReportRuns(const std::vector<Run>&) override {}
};

int main(int argc, char** argv) {
    using namespace seqgrad_bench;
    seqgrad::restart_with_blas_core(argv);  // before MPI or OpenBLAS's threads start
    if (argc == 2 && std::strcmp(argv[1], "--print-blas-core") == 0) {
        const char* core = std::getenv("OPENBLAS_CORETYPE");
        std::printf("%s\n", core ? core : "");
        return 0;
    }
    seqgrad::nn::Distributed group(&argc, &argv);  // under mpirun: the distributed/ benchmarks' ranks
    const std::vector<std::string> argv_copy(argv, argv + argc);
    const int requested_threads = take_threads_flag(argc, argv);
    configure_and_describe(requested_threads);
    register_op_benchmarks();
    register_model_benchmarks();
    register_data_benchmarks();
    register_decode_benchmarks();
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    if (group.is_root()) {
        benchmark::RunSpecifiedBenchmarks();
    } else {
        // Google Benchmark wants a file reporter exactly when --benchmark_out names a file.
        const bool out_file = std::any_of(argv_copy.begin(), argv_copy.end(),
                                          [](const std::string& a) { return a.starts_with("--benchmark_out="); });
        SilentReporter display, file;
        benchmark::RunSpecifiedBenchmarks(&display, out_file ? &file : nullptr);
    }
    benchmark::Shutdown();
    return 0;
}
