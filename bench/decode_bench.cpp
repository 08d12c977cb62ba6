// Decoding a Transformer-base with beam search, measured as CTranslate2 measures CPU decoding
// (bench/torch_decode.py is the PyTorch side, on the same weights and sources):
//
//   decode/transformer_base/beam4       32 sentences of 25 tokens decoded together, beam 4, GNMT
//                                       length penalty 0.6, exactly 30 steps (</s> barred before the
//                                       30th token: random weights rarely end a sentence)
//   decode/transformer_base/beam4_eos   the same, ending hypotheses at </s> (at most 30 steps)
//   decode/transformer_base/beam1_latency  one sentence, greedy, 30 steps: the latency
//
// The weights are packed for oneDNN's kernels as seqgrad's Translator packs them, in float32
// (core/packed.h; where oneDNN has no such kernel for the CPU, or the build has no oneDNN, the
// products stay on sgemm and the label says so). Variants: `_sgemm` never packs (every product
// through OpenBLAS's sgemm), `_int8` packs int8 weights (the option `seqgrad predict --int8`),
// `_bf16` bfloat16 ones (`seqgrad predict --bf16`; skipped, saying why, on a CPU without
// AVX512_BF16 or AMX).
//
// The model: d_model 512, 8 heads, 6 + 6 layers, d_ff 2048, Post-LN, ReLU, 32,000 symbols on each
// side, no dropout (eval mode). Weights and sources come from transformer_base.safetensors beside
// the program (or $SEQGRAD_DECODE_WEIGHTS): parameters under their parity names (docs/parity.md)
// and the sources as `bench.src` [32, 25], so that torch_decode.py decodes the same model; the
// first run writes the file.
//
//   decode/gathered_attention/length   one step's self-attention over cached keys (128 rows, 8 heads
//                                       of 64), GFLOP/s
//   decode/gathered_attention/one_row/length  a sampled token's self-attention over its cache (the
//                                       GPT's baby shape: one row, 6 heads of 64, 256 positions
//                                       kept), read from memory, GFLOP/s
//   decode/log_softmax_top_k            128 rows' 8 best log-probabilities over 32,000 symbols
//   decode/linear/{packed,sgemm}/rows/in/out  one product x W^T + b at a decoding step's shapes
//                                       (128 rows: 32 sentences x beam 4), GFLOP/s, packed float32 as
//                                       the decoder runs it and through sgemm (linear()), to see what
//                                       each layer's product gets of the machine
//
// Counters: tokens_per_second (target tokens of the best hypotheses, </s> excluded, per second;
// CTranslate2's "target tokens per second"), ms_per_batch (for beam1_latency: one sentence),
// gflops and mfu on the fixed-length rows (the products of weights a decode cannot skip, over the
// time, and that rate over the sgemm peak of the same run: how close decoding is to the machine's
// limit, whatever PyTorch does),
// system_allocs_per_step (blocks the allocator took from the system per decoding step after a
// warm-up decode: 0 in a steady state) and tensor_allocs_per_step (every tensor allocation,
// cached or not, per step: what a decoder with preallocated buffers would bring to 0).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bench_common.h"
#include "seqgrad/core/allocator.h"
#include "seqgrad/core/autograd.h"
#include "seqgrad/core/ops.h"
#include "seqgrad/core/packed.h"
#include "seqgrad/core/random.h"
#include "seqgrad/core/safetensors.h"
#include "seqgrad/models/search.h"
#include "seqgrad/models/registry.h"
#include "seqgrad/models/transformer.h"

namespace seqgrad_bench {
namespace {

using seqgrad::IntTensor;
using seqgrad::Tensor;

constexpr int64_t kSentences = 32, kSourceLength = 25, kSteps = 30, kVocab = 32000;

seqgrad::models::ModelConfig base_config() {
    seqgrad::models::ModelConfig c = seqgrad::models::model_kind("transformer").defaults();
    c.src_vocab = c.tgt_vocab = kVocab;
    c.dropout = 0;
    seqgrad::models::TransformerKeys& t = c.keys<seqgrad::models::TransformerKeys>();
    t.d_model = 512;
    t.n_heads = 8;
    t.n_layers = t.n_enc_layers = t.n_dec_layers = 6;
    t.d_ff = 2048;
    t.max_seq_len = 512;
    t.norm = "post";
    t.activation = "relu";
    return c;
}

std::string weights_path() {
    if (const char* env = std::getenv("SEQGRAD_DECODE_WEIGHTS"); env && *env) return env;
    std::error_code ec;
    const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    return ((ec ? std::filesystem::path(".") : exe.parent_path()) / "transformer_base.safetensors").string();
}

struct Workload {
    std::shared_ptr<seqgrad::models::Model> model;
    IntTensor src;  // [32, 25]
};

// The model and sources from the shared file, written first if there is none.
const Workload& workload() {
    static const Workload w = [] {
        const std::string path = weights_path();
        seqgrad::Generator gen(1234);
        Workload out;
        out.model = seqgrad::models::make_model(base_config(), gen);
        out.model->eval();
        if (!std::filesystem::exists(path)) {
            std::vector<int64_t> ids(static_cast<size_t>(kSentences * kSourceLength));
            for (int64_t& id : ids) id = 4 + static_cast<int64_t>(gen.below(kVocab - 4));
            seqgrad::SafetensorsFile file;
            for (const auto& [name, tensor] : out.model->state_dict()) file.put(name, tensor);
            file.put("bench.src", IntTensor::from_vector(ids, {kSentences, kSourceLength}));
            file.save(path);
        }
        const seqgrad::SafetensorsFile file = seqgrad::SafetensorsFile::load(path);
        std::map<std::string, Tensor> state;
        for (const std::string& name : file.names())
            if (name != "bench.src") state[name] = file.tensor(name);
        out.model->load_state_dict(state);
        out.src = file.int_tensor("bench.src");
        return out;
    }();
    return w;
}

// The multiply-adds x 2 of the products of weights in one decode of `sentences` sources that runs
// exactly kSteps steps with `beam` beams (attention's own products, a few percent, aside): the
// encoder's projections and feed-forward layers over every source token, the cross-attention's
// keys and values once, and for each decoder row its self-attention projections, the cross
// attention's query and output, the feed-forward layer and the output layer. Rows: one per source
// for the first token (search starts from one hypothesis), then `beam` per source for the rest.
double decode_products_flops(int64_t sentences, int64_t beam) {
    const seqgrad::models::ModelConfig config = base_config();
    const seqgrad::models::TransformerKeys& c = config.keys<seqgrad::models::TransformerKeys>();
    const double d = static_cast<double>(c.d_model), ff = static_cast<double>(c.d_ff);
    const double source_tokens = static_cast<double>(sentences * kSourceLength);
    const double encoder = source_tokens * static_cast<double>(c.n_enc_layers) * (4 * d * d + 2 * d * ff);
    const double cross_keys_values = source_tokens * static_cast<double>(c.n_dec_layers) * 2 * d * d;
    const double rows = static_cast<double>(sentences + (kSteps - 1) * sentences * beam);
    const double per_row =
        static_cast<double>(c.n_dec_layers) * (6 * d * d + 2 * d * ff) + d * static_cast<double>(config.tgt_vocab);
    return 2 * (encoder + cross_keys_values + rows * per_row);
}

// How the model's weights are held while decoding: packed as the Translator packs them (float32 by
// default), packed in int8 or bf16, or not packed (every product through sgemm).
enum class Weights { packed, int8, bf16, sgemm };

// Puts the shared model's weights back unpacked when a benchmark ends.
struct UnpackAtEnd {
    seqgrad::nn::Module& model;
    ~UnpackAtEnd() { model.unpack_weights(); }
};

void decode_base(benchmark::State& state, int64_t beam, bool fixed_length, int64_t sentences,
                 Weights weights = Weights::packed) {
    using seqgrad::Precision;
    const Workload& w = workload();
    if (weights == Weights::int8 && !seqgrad::packing_available(Precision::int8)) {
        state.SkipWithError("int8 needs oneDNN: install libdnnl-dev and rebuild");
        for (auto _ : state) {}
        return;
    }
    if (weights == Weights::bf16 && !seqgrad::packing_available(Precision::bf16)) {
        state.SkipWithError(seqgrad::bf16_unavailable_reason().c_str());
        for (auto _ : state) {}
        return;
    }
    const UnpackAtEnd unpack{*w.model};
    if (weights != Weights::sgemm) {
        const Precision precision = weights == Weights::int8   ? Precision::int8
                                    : weights == Weights::bf16 ? Precision::bf16
                                                               : Precision::float32;
        w.model->pack_weights(precision);
        state.SetLabel(w.model->weights_packed() ? seqgrad::packed_kernel_name(precision) : "sgemm");
    } else {
        state.SetLabel("sgemm");
    }
    IntTensor src = w.src;
    if (sentences < src.size(0)) {
        std::vector<int64_t> ids(src.data(), src.data() + sentences * src.size(1));
        src = IntTensor::from_vector(ids, {sentences, src.size(1)});
    }
    seqgrad::models::DecodingOptions options;
    options.beam_size = beam;
    options.max_len = kSteps;
    options.min_len = fixed_length ? kSteps : 0;
    options.length_penalty = 0.6f;
    int64_t tokens = 0;
    seqgrad::models::search(*w.model, src, options);  // the allocator's cache warm
    const seqgrad::AllocatorStats before = seqgrad::allocator_stats();
    const auto start = std::chrono::steady_clock::now();
    for (auto _ : state) {
        const auto out = seqgrad::models::search(*w.model, src, options);
        tokens = 0;
        for (const auto& list : out) tokens += list.empty() ? 0 : static_cast<int64_t>(list.front().tokens.size());
        benchmark::DoNotOptimize(tokens);
    }
    set_plain_rate_counter(state, "tokens_per_second", static_cast<double>(tokens));
    state.counters["target_tokens"] = static_cast<double>(tokens);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const seqgrad::AllocatorStats after = seqgrad::allocator_stats();
    const double steps =
        static_cast<double>(kSteps) * static_cast<double>(std::max<benchmark::IterationCount>(1, state.iterations()));
    state.counters["system_allocs_per_step"] =
        static_cast<double>(after.system_allocations - before.system_allocations) / steps;
    state.counters["tensor_allocs_per_step"] =
        static_cast<double>(after.system_allocations - before.system_allocations + after.cache_hits -
                            before.cache_hits) /
        steps;
    state.counters["ms_per_batch"] =
        1e3 * seconds / static_cast<double>(std::max<benchmark::IterationCount>(1, state.iterations()));
    if (fixed_length) {
        const double flops = decode_products_flops(sentences, beam);
        set_rate_counter(state, "gflops", flops);
        state.counters["mfu"] =
            benchmark::Counter(flops / sgemm_peak_flops(), benchmark::Counter::kIsIterationInvariantRate);
    }
}

// One product at a decoding step's shape: rows x in times [out, in]^T, plus a bias.
void linear_at(benchmark::State& state, bool packed) {
    const int64_t rows = state.range(0), in = state.range(1), out = state.range(2);
    seqgrad::Generator gen(5);
    const Tensor x = Tensor::uniform({rows, in}, -1, 1, gen), w = Tensor::uniform({out, in}, -1, 1, gen),
                 bias = Tensor::uniform({out}, -1, 1, gen);
    const seqgrad::NoGradGuard no_grad;
    std::unique_ptr<seqgrad::PackedMatrix> matrix;
    if (packed) {
        if (!seqgrad::packing_available(seqgrad::Precision::float32)) {
            state.SkipWithError("no packed float32 kernel here (see packed_kernel_name)");
            for (auto _ : state) {}
            return;
        }
        matrix = std::make_unique<seqgrad::PackedMatrix>(w, seqgrad::Precision::float32);
        state.SetLabel(seqgrad::packed_kernel_name(seqgrad::Precision::float32));
    } else {
        state.SetLabel("sgemm");
    }
    for (auto _ : state) {
        const Tensor y = packed ? seqgrad::linear_packed(x, *matrix, bias) : seqgrad::linear(x, w, bias);
        benchmark::DoNotOptimize(y.data());
    }
    const double flops = 2.0 * static_cast<double>(rows) * static_cast<double>(in) * static_cast<double>(out);
    set_rate_counter(state, "GFLOP/s", flops);
    state.counters["mfu"] =
        benchmark::Counter(flops / sgemm_peak_flops(), benchmark::Counter::kIsIterationInvariantRate);
}

// Self-attention of one decoding step over cached keys and values, as the Transformer-base's
// decoder runs it: 128 rows (32 sources x beam 4), 8 heads of 64, `length` positions, each row's
// history spread over the rows of its source's beams (as beam search leaves it). GFLOP/s of the
// scores and the weighted sum, and GB/s of the keys and values read.
void gathered_attention_at(benchmark::State& state) {
    const int64_t n = 128, group = 4, width = 512, heads = 8, capacity = 32, length = state.range(0);
    seqgrad::Generator gen(7);
    const Tensor q = Tensor::uniform({n, 1, width}, -1, 1, gen), k = Tensor::uniform({n, capacity, width}, -1, 1, gen),
                 v = Tensor::uniform({n, capacity, width}, -1, 1, gen);
    std::vector<int64_t> table(static_cast<size_t>(n * capacity));
    for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < capacity; ++j)
            table[static_cast<size_t>(i * capacity + j)] = i / group * group + static_cast<int64_t>(gen.below(group));
    const IntTensor rows = IntTensor::from_vector(table, {n, capacity});
    const seqgrad::NoGradGuard no_grad;
    for (auto _ : state) {
        const Tensor context = seqgrad::gathered_attention(q, k, v, rows, length, heads, IntTensor());
        benchmark::DoNotOptimize(context.data());
    }
    set_rate_counter(state, "GFLOP/s", 4.0 * static_cast<double>(n * length * width));
    set_rate_counter(state, "GB/s", 2.0 * 4.0 * static_cast<double>(n * length * width));
}

// Self-attention of one sampled token over its cache, as the GPT's baby shape runs it: one row,
// 6 heads of 64, a cache of 256 positions of which `length` are filled; GFLOP/s and GB/s as above.
// At one row the heads are shared out between the threads. With one cache for every call the
// keys and values stay in L2 and the loop's arithmetic shows (28 -> 41 GFLOP/s at the avx2 level
// when the positions went eight at a time); in the model they come from memory.
void gathered_attention_one_row(benchmark::State& state) {
    const int64_t width = 384, heads = 6, capacity = 256, length = state.range(0);
    // Caches of 64 layers (50 MB), one a call, so that each is read from memory as a token's
    // attention reads it after the weights' products have passed through the caches.
    const int64_t layers = 64;
    seqgrad::Generator gen(9);
    const Tensor q = Tensor::uniform({1, 1, width}, -1, 1, gen);
    std::vector<Tensor> k, v;
    for (int64_t l = 0; l < layers; ++l) {
        k.push_back(Tensor::uniform({1, capacity, width}, -1, 1, gen));
        v.push_back(Tensor::uniform({1, capacity, width}, -1, 1, gen));
    }
    const IntTensor rows = IntTensor::from_vector(std::vector<int64_t>(capacity, 0), {1, capacity});
    const seqgrad::NoGradGuard no_grad;
    size_t l = 0;
    for (auto _ : state) {
        const Tensor context = seqgrad::gathered_attention(q, k[l], v[l], rows, length, heads, IntTensor());
        benchmark::DoNotOptimize(context.data());
        l = (l + 1) % k.size();
    }
    set_rate_counter(state, "GFLOP/s", 4.0 * static_cast<double>(length * width));
    set_rate_counter(state, "GB/s", 2.0 * 4.0 * static_cast<double>(length * width));
}

// A beam-search step's choice: each of 128 rows' 8 best log-probabilities over a 32,000-symbol
// vocabulary (log_softmax_top_k), GB/s of logits read.
void log_softmax_top_k_at(benchmark::State& state) {
    const int64_t rows = 128, k = 8;
    seqgrad::Generator gen(8);
    const Tensor logits = Tensor::normal({rows, kVocab}, 0, 2, gen);
    for (auto _ : state) {
        const seqgrad::TopK top = seqgrad::log_softmax_top_k(logits, k);
        benchmark::DoNotOptimize(top.values.data());
    }
    set_rate_counter(state, "GB/s", 4.0 * static_cast<double>(rows * kVocab));
}

}  // namespace

void register_decode_benchmarks() {
    benchmark::RegisterBenchmark("decode/log_softmax_top_k", log_softmax_top_k_at)
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark("decode/gathered_attention", gathered_attention_at)
        ->Arg(8)
        ->Arg(30)
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark("decode/gathered_attention/one_row", gathered_attention_one_row)
        ->Arg(64)
        ->Arg(128)
        ->Arg(256)
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
    // A decoder layer's products (Q, K, V and output; Q, K and V as one; the feed-forward's two) and
    // the output projection, for the 128 rows of beam 4 over 32 sentences.
    const std::vector<std::vector<int64_t>> shapes = {
        {128, 512, 512}, {128, 512, 1536}, {128, 512, 2048}, {128, 2048, 512}, {128, 512, kVocab}};
    for (const bool packed : {true, false}) {
        auto* b = benchmark::RegisterBenchmark(packed ? "decode/linear/packed" : "decode/linear/sgemm",
                                               [packed](benchmark::State& s) { linear_at(s, packed); });
        for (const auto& shape : shapes) b->Args(shape);
        b->UseRealTime()->Unit(benchmark::kMicrosecond);
    }
    benchmark::RegisterBenchmark("decode/transformer_base/beam4",
                                 [](benchmark::State& s) { decode_base(s, 4, true, kSentences); })
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark("decode/transformer_base/beam4_int8",
                                 [](benchmark::State& s) { decode_base(s, 4, true, kSentences, Weights::int8); })
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark("decode/transformer_base/beam4_bf16",
                                 [](benchmark::State& s) { decode_base(s, 4, true, kSentences, Weights::bf16); })
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark("decode/transformer_base/beam4_sgemm",
                                 [](benchmark::State& s) { decode_base(s, 4, true, kSentences, Weights::sgemm); })
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark("decode/transformer_base/beam4_eos",
                                 [](benchmark::State& s) { decode_base(s, 4, false, kSentences); })
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark("decode/transformer_base/beam1_latency",
                                 [](benchmark::State& s) { decode_base(s, 1, true, 1); })
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark("decode/transformer_base/beam1_latency_int8",
                                 [](benchmark::State& s) { decode_base(s, 1, true, 1, Weights::int8); })
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
}

}  // namespace seqgrad_bench
