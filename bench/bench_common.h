// What seqgrad_bench's files share: the rate counters, the sgemm peak that MFU is measured
// against, and the registration functions each file provides to main().
#pragma once

#include <benchmark/benchmark.h>

namespace seqgrad_bench {

// Reports `per_iteration` units per iteration as a rate in billions per second (the console
// shows the value followed by "/s", e.g. GFLOP/s=150.2/s).
inline void set_rate_counter(benchmark::State& state, const char* name, double per_iteration) {
    state.counters[name] = benchmark::Counter(per_iteration * 1e-9, benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::OneK::kIs1000);
}

// Reports `per_iteration` units per iteration as a plain rate per second (e.g. tokens per second).
inline void set_plain_rate_counter(benchmark::State& state, const char* name, double per_iteration) {
    state.counters[name] = benchmark::Counter(per_iteration, benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::OneK::kIs1000);
}

// The machine's sgemm throughput in FLOP/s: OpenBLAS's own cblas_sgemm on 2048^3 with as many
// OpenBLAS threads as seqgrad uses, the best of a few runs. Measured once, on first use.
double sgemm_peak_flops();

void register_op_benchmarks();      // seqgrad_bench.cpp: matmul, softmax, layer_norm, cross_entropy
void register_model_benchmarks();   // model_bench.cpp: train_step, decode
void register_data_benchmarks();    // data_bench.cpp: reading a corpus of a million pairs
void register_decode_benchmarks();  // decode_bench.cpp: beam search of a Transformer-base

}  // namespace seqgrad_bench
