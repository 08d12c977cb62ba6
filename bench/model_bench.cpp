// Whole training steps and greedy decoding of the three sequence-to-sequence models, at three
// shapes, the GPT's training step and generation at nanoGPT's two Shakespeare shapes, and the
// BERT's two training steps (classification, masked language model) and classification of texts.
//
//   train_step/<model>/<shape>   one training step: zero_grad, forward, the loss (cross-entropy
//                                with label smoothing 0.1, ignoring padding), backward, Adam
//                                (lr 1e-4). model: transformer, attn_seq2seq, seq2seq.
//   train_step/<model>/<shape>/bf16  the same step with "precision": "bf16" (the products'
//                                operands in bfloat16, float32 sums; everything else float32), for
//                                the Transformer and the GPT; skipped, saying why, on a CPU without
//                                AVX512_BF16 or AMX. mfu stays relative to the float32 sgemm peak,
//                                so it can pass 100%.
//   train_step/gpt/<cpu|baby>    one step of the GPT on random windows of context + 1 tokens:
//                                zero_grad, forward, the loss, backward, gradient clipping at 1,
//                                AdamW (lr 1e-3, betas 0.9 and 0.99, weight decay 0.1 on the
//                                matrices and embeddings). Counters as train_step's.
//   evaluate/gpt/<cpu|baby>      the validation loss as training computes it (text_loss): 32
//                                random windows of context + 1 tokens, eval mode, no gradient;
//                                tokens_per_second, gflops and mfu of the forward pass.
//   generate/gpt/baby            the baby shape continuing a one-token prompt by 256 tokens,
//                                sampled at temperature 0.8, batch 1, weights packed as the
//                                TextGenerator packs them: tokens_per_second, and the weights a
//                                token reads per second (weights_GB_per_second; memory/sweep is a
//                                plain read's rate); `/bf16` with bfloat16 weights
//                                (`seqgrad generate --bf16`)
//   phases/<model>/<shape>, phases/gpt/<cpu|baby>   the same steps timed by phase (zero_grad,
//                                forward, backward, clipping and the optimizer) and by operation
//                                inside the passes (core/profile.h); bench/phases.py prints the
//                                table of where the time goes
// GPT shapes (batch, context, width, heads, d_ff, layers, dropout), nanoGPT's, with the 65
// characters of tinyshakespeare (and seqgrad's four special tokens: a vocabulary of 69):
//   cpu     12,  64, 128, 4,  512, 4, 0     (its CPU recipe)
//   baby    64, 256, 384, 6, 1536, 6, 0.2   (its "baby GPT")
//   train_step/bert/<langid|small|mini>        one fine-tuning step of a BERT classifying texts: zero_grad,
//                                forward_first(tokens) (the last layer for <cls> alone), class_loss,
//                                backward, gradient clipping at 1, AdamW (lr 1e-4, weight decay
//                                0.01 on the matrices and embeddings). Counters as train_step's
//                                (tokens: batch x length), FLOPs of the layers and the classifier.
//   train_step/bert/<langid|small|mini>/mlm    the masked language model's step: the same with mlm_loss,
//                                about 15% of the positions labelled (kPad elsewhere); FLOPs of
//                                the layers and the MLM head at the labelled positions (as it runs).
//   train_step/bert/<langid|small|mini>[/mlm]/bf16  the same steps with bfloat16 products, as the
//                                Transformer's /bf16 (skipped without AVX512_BF16 or AMX).
//   classify/bert/<langid|small|mini>  inference of 64 texts: NoGradGuard, eval mode,
//                                forward_first, class_logits and a softmax. texts_per_second, tokens_per_second,
//                                gflops and mfu. `/bf16` with the weights packed in bfloat16
//                                (pack_weights, as `seqgrad generate --bf16` packs them), `/int8`
//                                in int8 (as --int8 packs them).
//   phases/bert/<langid|small|mini>[/mlm]      the two training steps timed by phase, as phases/gpt's.
// BERT shapes (batch, length, width, heads, d_ff, layers, vocabulary, classes): Post-LN, GELU,
// learned positions, two segment types (every text segment 0), dropout 0.1 (BERT's) in training;
// every text full length, <s> (the <cls>) first, then random ids. bench/torch_bert.py is the
// PyTorch side.
//   langid  32,  64, 128, 4,  512, 2, 8004, 11   (the recipe, configs/bert-langid.json, on the
//                                                 language-identification set: 8000 pieces)
//   small   32, 128, 256, 4, 1024, 4,  300, 12   (four layers of 256 over rows of 128 characters)
//   mini    64,  64, 128, 2,  512, 2, 1000,  2   (a two-layer BERT of word pieces: the MLM head
//                                                 over 1000 symbols is a quarter of its FLOPs)
//   decode/transformer/<shape>/cached      greedy decoding of the batch's sources for tgt_len
//   decode/transformer/<shape>/recompute   steps: with the incremental decoder (cached keys and
//                                          values), or by running the whole prefix through
//                                          forward() at every step, as a decoder without a cache
//                                          does. Both always take exactly tgt_len steps.
//
// Shapes (batch, source length, target length, width, heads, d_ff, layers, vocabularies):
//   seed    32, 10, 12, 512, 8, 2048, 6, 10000 / 12000   (the paper-sized shape walk-through)
//   small   64, 32, 32, 256, 4, 1024, 3,  1000 /  1000
//   g2p    256, 12, 12, 256, 4, 1024, 3,    40 /    44
// The Transformer is Post-LN with dropout 0.1 and ReLU; the LSTM models have hidden size =
// width and 2 layers, the `init_state` decoder (seq2seq) and `dot` attention (attn_seq2seq).
// Batches are random ids, every sequence full length (no padding). bench/torch_bench.py builds
// the same models and batches in PyTorch.
//
// Counters of train_step:
//   tokens_per_second       target tokens (batch x tgt_len) per second
//   gflops                  model FLOPs per second, in billions: 3x the forward pass's matrix
//                           products (backward costs two products per forward one), counted
//                           from the shapes by forward_flops() (model_flops.h); elementwise work, the
//                           softmaxes and Adam are not counted
//   mfu                     gflops over the sgemm peak measured at start-up (bench_common.h)
//   peak_mib                the most tensor memory in use during the timed steps (parameters,
//                           gradients, Adam's state and activations), from seqgrad's allocator
//   system_allocs_per_step  blocks the allocator took from the system per timed step (0 in a
//                           steady state)
//   max_rss_mib             the process's peak resident memory so far; it covers everything run
//                           before it, so read it from a process that runs one benchmark
//                           (bench/compare.py does)
//
// Data-parallel training (nn/distributed.h), run as one process or under mpirun (each rank runs
// the same fixed number of iterations, as its collectives need; rank 0 reports):
//   distributed/allreduce/transformer/<shape>   all_reduce_gradients() of the Transformer's
//                            gradients (16 MiB buckets): gradient_mib, ms_per_call, and
//                            bus_gb_per_second = 2 (N-1)/N x the gradient bytes / time, the bytes
//                            a ring all-reduce moves over each rank's link (0 for one rank, where
//                            only the scaling and copies are left)
//   distributed/train_step/transformer/<shape>/{blocking,overlap}  one step of the global batch
//                            (the shape's), each rank on its share of the rows: forward, backward,
//                            the all-reduce, Adam; the all-reduce after the backward pass
//                            (all_reduce_gradients) or bucket by bucket during it
//                            (GradientReducer). tokens_per_second (the global batch's target
//                            tokens), allreduce_ms and allreduce_fraction (of the step: the
//                            all-reduce's time, or for overlap the wait it did not hide), ranks
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "bench_common.h"
#include "model_flops.h"
#include "seqgrad/core/allocator.h"
#include "seqgrad/core/autograd.h"
#include "seqgrad/core/ops.h"
#include "seqgrad/core/precision.h"
#include "seqgrad/core/profile.h"
#include "seqgrad/core/random.h"
#include "seqgrad/core/tensor.h"
#include "seqgrad/models/attn_seq2seq.h"
#include "seqgrad/models/bert.h"
#include "seqgrad/models/gpt.h"
#include "seqgrad/models/model.h"
#include "seqgrad/models/registry.h"
#include "seqgrad/models/search.h"
#include "seqgrad/models/seq2seq.h"
#include "seqgrad/models/transformer.h"
#include "seqgrad/nn/distributed.h"
#include "seqgrad/nn/optim.h"

namespace seqgrad_bench {
namespace {

using seqgrad::MatmulPrecisionScope;
using seqgrad::Precision;
using seqgrad::bf16_available;
using seqgrad::bf16_unavailable_reason;
using seqgrad::Generator;
using seqgrad::IntTensor;
using seqgrad::Tensor;
using seqgrad::models::ModelConfig;

struct BenchShape {
    const char* name;
    int64_t batch, src_len, tgt_len;
    int64_t width, heads, d_ff, layers;
    int64_t src_vocab, tgt_vocab;
};

constexpr BenchShape kShapes[] = {
    {"seed", 32, 10, 12, 512, 8, 2048, 6, 10000, 12000},
    {"small", 64, 32, 32, 256, 4, 1024, 3, 1000, 1000},
    {"g2p", 256, 12, 12, 256, 4, 1024, 3, 40, 44},
};
struct GptShape {
    const char* name;
    int64_t batch, context, width, heads, d_ff, layers;
    float dropout;
};

constexpr GptShape kGptShapes[] = {
    {"cpu", 12, 64, 128, 4, 512, 4, 0.0f},
    {"baby", 64, 256, 384, 6, 1536, 6, 0.2f},
};
constexpr int64_t kGptVocab = 65 + 4;
constexpr int64_t kGeneratedTokens = 256;
constexpr int64_t kEvaluatedWindows = 32;  // training::text_loss's batch

struct BertShape {
    const char* name;
    int64_t batch, length, width, heads, d_ff, layers, vocab, classes;
};

constexpr BertShape kBertShapes[] = {
    {"langid", 32, 64, 128, 4, 512, 2, 8004, 11},
    {"small", 32, 128, 256, 4, 1024, 4, 300, 12},
    {"mini", 64, 64, 128, 2, 512, 2, 1000, 2},
};
constexpr int64_t kClassifiedTexts = 64;
constexpr uint64_t kMaskedPercent = 15;

constexpr int64_t kLstmLayers = 2;
constexpr float kLabelSmoothing = 0.1f;
constexpr int64_t kFirstRealToken = 4;  // after <pad>, <s>, </s>, <unk>

ModelConfig bench_config(const std::string& model, const BenchShape& s) {
    ModelConfig c = seqgrad::models::model_kind(model).defaults();
    c.src_vocab = s.src_vocab;
    c.tgt_vocab = s.tgt_vocab;
    c.dropout = 0.1f;
    if (model == "transformer") {
        seqgrad::models::TransformerKeys& t = c.keys<seqgrad::models::TransformerKeys>();
        t.d_model = s.width;
        t.n_heads = s.heads;
        t.n_layers = t.n_enc_layers = t.n_dec_layers = s.layers;
        t.d_ff = s.d_ff;
        t.max_seq_len = 64;
        t.norm = "post";
        t.activation = "relu";
    } else if (model == "seq2seq") {
        seqgrad::models::Seq2SeqKeys& l = c.keys<seqgrad::models::Seq2SeqKeys>();
        l.hidden_size = s.width;
        l.num_layers = kLstmLayers;
        l.decoder = "init_state";
    } else {
        seqgrad::models::AttnSeq2SeqKeys& l = c.keys<seqgrad::models::AttnSeq2SeqKeys>();
        l.hidden_size = s.width;
        l.num_layers = kLstmLayers;
        l.attention = "dot";
    }
    return c;
}

struct Batch {
    IntTensor src, tgt_in, tgt_out;
};

Batch random_batch(const BenchShape& s, Generator& gen) {
    std::vector<int64_t> src(static_cast<size_t>(s.batch * s.src_len));
    for (auto& id : src)
        id = kFirstRealToken + static_cast<int64_t>(gen.below(static_cast<uint64_t>(s.src_vocab - kFirstRealToken)));
    const int64_t t = s.tgt_len + 1;
    std::vector<int64_t> tgt(static_cast<size_t>(s.batch * t));
    for (int64_t i = 0; i < s.batch * t; ++i)
        tgt[static_cast<size_t>(i)] =
            i % t == 0 ? seqgrad::models::kSos
                       : kFirstRealToken +
                             static_cast<int64_t>(gen.below(static_cast<uint64_t>(s.tgt_vocab - kFirstRealToken)));
    const IntTensor full = IntTensor::from_vector(std::move(tgt), {s.batch, t});
    return {IntTensor::from_vector(std::move(src), {s.batch, s.src_len}), full.slice_last(0, t - 1),
            full.slice_last(1, t)};
}

double max_rss_mib() {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    return static_cast<double>(usage.ru_maxrss) / 1024.0;  // Linux reports KiB
}

// Times `step` (one training step, returning its loss) under `state` after two untimed ones (the
// optimizer's state exists and the allocator's cache is warm), and sets the counters every
// training step reports from its FLOPs and its tokens.
template <typename Step>
void time_training_steps(benchmark::State& state, Step& step, double flops, int64_t tokens) {
    for (int i = 0; i < 2; ++i) step();
    const seqgrad::AllocatorStats before = seqgrad::allocator_stats();
    seqgrad::reset_peak_bytes_in_use();
    for (auto _ : state) {
        float loss = step();
        benchmark::DoNotOptimize(loss);
    }
    const seqgrad::AllocatorStats after = seqgrad::allocator_stats();
    set_plain_rate_counter(state, "tokens_per_second", static_cast<double>(tokens));
    set_rate_counter(state, "gflops", flops);
    state.counters["mfu"] =
        benchmark::Counter(flops / sgemm_peak_flops(), benchmark::Counter::kIsIterationInvariantRate);
    state.counters["peak_mib"] = static_cast<double>(after.peak_bytes_in_use) / (1024.0 * 1024.0);
    state.counters["system_allocs_per_step"] =
        static_cast<double>(after.system_allocations - before.system_allocations) /
        static_cast<double>(std::max<benchmark::IterationCount>(1, state.iterations()));
    state.counters["max_rss_mib"] = max_rss_mib();
}

// Whether the step can run in `precision`; if not, the benchmark is skipped with the reason.
bool precision_runs(benchmark::State& state, Precision precision) {
    if (precision != Precision::bf16 || bf16_available()) return true;
    state.SkipWithError(bf16_unavailable_reason().c_str());
    for (auto _ : state) {}
    return false;
}

// One training step of a model, in the phases the phases/ benchmarks time apart.
struct TrainingStep {
    std::shared_ptr<seqgrad::models::Model> model;
    std::unique_ptr<seqgrad::nn::Optimizer> optimizer;
    std::function<Tensor()> loss;  // the forward pass and the loss
    float clip = 0;                // clip the gradients' norm to this first (0: never)
    std::vector<Tensor> clipped;   // the parameters clipping reads
    double flops = 0;              // model FLOPs of the step (3x the forward products)
    int64_t tokens = 0;            // target tokens of the step

    void update() {
        if (clip > 0) seqgrad::nn::clip_grad_norm(clipped, clip);
        optimizer->step();
    }
    float operator()() {
        optimizer->zero_grad();
        Tensor value = loss();
        value.backward();
        update();
        return value.item();
    }
};

// A sequence-to-sequence model's step: cross-entropy with label smoothing 0.1, Adam at 1e-4.
TrainingStep seq2seq_step(const std::string& model_name, const BenchShape& shape) {
    Generator gen(7);
    const ModelConfig config = bench_config(model_name, shape);
    TrainingStep step;
    step.model = seqgrad::models::make_model(config, gen);
    step.model->train();
    seqgrad::nn::AdamOptions adam;
    adam.lr = 1e-4;
    step.optimizer = std::make_unique<seqgrad::nn::Adam>(step.model->named_parameters(), adam);
    step.loss = [model = step.model.get(), batch = random_batch(shape, gen)] {
        return seqgrad::models::sequence_loss(model->logits(batch.src, batch.tgt_in), batch.tgt_out, kLabelSmoothing);
    };
    step.flops = 3 * forward_flops(config, shape.batch, shape.src_len, shape.tgt_len);
    step.tokens = shape.batch * shape.tgt_len;
    return step;
}

void train_step(benchmark::State& state, const std::string& model_name, const BenchShape& shape, Precision precision) {
    if (!precision_runs(state, precision)) return;
    const MatmulPrecisionScope products(precision);
    TrainingStep step = seq2seq_step(model_name, shape);
    time_training_steps(state, step, step.flops, step.tokens);
}

// Greedy decoding for `steps` steps (never stopping early), the incremental way.
std::vector<int64_t> decode_cached(seqgrad::models::Model& model, const IntTensor& src, int64_t steps) {
    const int64_t batch = src.size(0);
    auto decoding = model.start_decoding(src);
    IntTensor tokens = IntTensor::full({batch}, seqgrad::models::kSos);
    std::vector<int64_t> out;
    out.reserve(static_cast<size_t>(batch * steps));
    for (int64_t t = 0; t < steps; ++t) {
        tokens = seqgrad::argmax(model.decode_step(*decoding, tokens), -1);
        out.insert(out.end(), tokens.data(), tokens.data() + batch);
    }
    return out;
}

// The same, running forward() over the whole prefix at every step and reading its last position.
std::vector<int64_t> decode_recompute(seqgrad::models::Model& model, const IntTensor& src, int64_t steps) {
    const int64_t batch = src.size(0);
    std::vector<std::vector<int64_t>> prefixes(static_cast<size_t>(batch), {seqgrad::models::kSos});
    for (int64_t t = 0; t < steps; ++t) {
        std::vector<int64_t> flat;
        flat.reserve(static_cast<size_t>(batch * (t + 1)));
        for (const auto& p : prefixes) flat.insert(flat.end(), p.begin(), p.end());
        const Tensor logits = model.logits(src, IntTensor::from_vector(std::move(flat), {batch, t + 1}));
        const int64_t vocab = logits.size(-1);
        for (int64_t b = 0; b < batch; ++b) {
            const float* row = logits.data() + (b * (t + 1) + t) * vocab;
            prefixes[static_cast<size_t>(b)].push_back(std::max_element(row, row + vocab) - row);
        }
    }
    std::vector<int64_t> out;
    for (const auto& p : prefixes) out.insert(out.end(), p.begin() + 1, p.end());
    return out;
}

void decode(benchmark::State& state, const BenchShape& shape, bool cached) {
    Generator gen(11);
    auto model = seqgrad::models::make_model(bench_config("transformer", shape), gen);
    model->eval();
    const Batch batch = random_batch(shape, gen);
    seqgrad::NoGradGuard no_grad;
    for (auto _ : state) {
        std::vector<int64_t> out = cached ? decode_cached(*model, batch.src, shape.tgt_len)
                                          : decode_recompute(*model, batch.src, shape.tgt_len);
        benchmark::DoNotOptimize(out.data());
    }
    set_plain_rate_counter(state, "words_per_second", static_cast<double>(shape.batch));
    set_plain_rate_counter(state, "tokens_per_second", static_cast<double>(shape.batch * shape.tgt_len));
}

ModelConfig gpt_config(const GptShape& s) {
    ModelConfig c = seqgrad::models::model_kind("gpt").defaults();
    c.vocab = kGptVocab;
    c.dropout = s.dropout;
    seqgrad::models::GptKeys& g = c.keys<seqgrad::models::GptKeys>();
    g.context = s.context;
    g.d_model = s.width;
    g.n_heads = s.heads;
    g.n_layers = s.layers;
    g.d_ff = s.d_ff;
    g.bias = false;  // nanoGPT's default, and bench/torch_gpt.py's
    return c;
}

// The GPT's step on random windows: AdamW (lr 1e-3, betas 0.9 and 0.99, weight decay 0.1 on the
// matrices and embeddings), gradients clipped at 1.
TrainingStep gpt_step(const GptShape& shape) {
    Generator gen(7);
    const ModelConfig config = gpt_config(shape);
    TrainingStep step;
    step.model = seqgrad::models::make_model(config, gen);
    step.model->train();
    seqgrad::nn::AdamOptions adam;
    adam.lr = 1e-3;
    adam.beta2 = 0.99;
    adam.weight_decay = 0.1;
    adam.decay_matrices_only = true;
    step.optimizer = std::make_unique<seqgrad::nn::AdamW>(step.model->named_parameters(), adam);
    std::vector<int64_t> ids(static_cast<size_t>(shape.batch * (shape.context + 1)));
    for (auto& id : ids)
        id = kFirstRealToken + static_cast<int64_t>(gen.below(static_cast<uint64_t>(kGptVocab - kFirstRealToken)));
    step.loss = [model = step.model.get(),
                 windows = IntTensor::from_vector(std::move(ids), {shape.batch, shape.context + 1}),
                 no_source = IntTensor::zeros({shape.batch, 0})] { return model->loss(no_source, windows, 0.0f); };
    step.clip = 1.0f;
    step.clipped = step.model->parameters();
    step.flops = 3 * forward_flops(config, shape.batch, 0, shape.context);
    step.tokens = shape.batch * shape.context;
    return step;
}

void gpt_train_step(benchmark::State& state, const GptShape& shape, Precision precision) {
    if (!precision_runs(state, precision)) return;
    const MatmulPrecisionScope products(precision);
    TrainingStep step = gpt_step(shape);
    time_training_steps(state, step, step.flops, step.tokens);
}

ModelConfig bert_config(const BertShape& s) {
    ModelConfig c = seqgrad::models::model_kind("bert").defaults();  // Post-LN, GELU, learned positions
    c.vocab = s.vocab;
    c.dropout = 0.1f;
    seqgrad::models::BertKeys& k = c.keys<seqgrad::models::BertKeys>();
    k.d_model = s.width;
    k.n_heads = s.heads;
    k.n_layers = s.layers;
    k.d_ff = s.d_ff;
    k.max_seq_len = s.length;
    k.n_classes = s.classes;
    return c;
}

// A token id other than the special ones, uniformly.
int64_t random_id(int64_t vocab, Generator& gen) {
    return kFirstRealToken + static_cast<int64_t>(gen.below(static_cast<uint64_t>(vocab - kFirstRealToken)));
}

// `rows` texts of the shape's length: <s> (the <cls>) first, then random ids, no padding.
IntTensor random_texts(const BertShape& s, int64_t rows, Generator& gen) {
    std::vector<int64_t> ids;
    ids.reserve(static_cast<size_t>(rows * s.length));
    for (int64_t i = 0; i < rows * s.length; ++i)
        ids.push_back(i % s.length == 0 ? seqgrad::models::kSos : random_id(s.vocab, gen));
    return IntTensor::from_vector(std::move(ids), {rows, s.length});
}

// The BERT's fine-tuning step (classes of the texts) or its masked language model's (mlm): AdamW
// (lr 1e-4, weight decay 0.01 on the matrices and embeddings), gradients clipped at 1.
TrainingStep bert_step(const BertShape& shape, bool mlm) {
    Generator gen(7);
    const ModelConfig config = bert_config(shape);
    TrainingStep step;
    step.model = seqgrad::models::make_model(config, gen);
    step.model->train();
    seqgrad::nn::AdamOptions adam;
    adam.lr = 1e-4;
    adam.weight_decay = 0.01;
    adam.decay_matrices_only = true;
    step.optimizer = std::make_unique<seqgrad::nn::AdamW>(step.model->named_parameters(), adam);
    auto* bert = dynamic_cast<seqgrad::models::EncoderModel*>(step.model.get());
    const IntTensor tokens = random_texts(shape, shape.batch, gen);
    int64_t labelled = 0;  // the positions the MLM head predicts
    if (mlm) {
        std::vector<int64_t> labels(static_cast<size_t>(tokens.numel()), seqgrad::models::kPad);
        for (auto& label : labels)
            if (gen.below(100) < kMaskedPercent) {
                label = random_id(shape.vocab, gen);
                ++labelled;
            }
        step.loss = [bert, tokens, labels = IntTensor::from_vector(std::move(labels), tokens.shape())] {
            return bert->mlm_loss(bert->forward(tokens), labels);
        };
    } else {
        std::vector<int64_t> classes(static_cast<size_t>(shape.batch));
        for (auto& c : classes) c = static_cast<int64_t>(gen.below(static_cast<uint64_t>(shape.classes)));
        step.loss = [bert, tokens, classes = IntTensor::from_vector(std::move(classes), {shape.batch})] {
            return bert->class_loss(bert->forward_first(tokens), classes);
        };
    }
    step.clip = 1.0f;
    step.clipped = step.model->parameters();
    step.flops = 3 * bert_flops(config, shape.batch, shape.length, labelled, !mlm);
    step.tokens = shape.batch * shape.length;
    return step;
}

void bert_train_step(benchmark::State& state, const BertShape& shape, bool mlm, Precision precision) {
    if (!precision_runs(state, precision)) return;
    const MatmulPrecisionScope products(precision);
    TrainingStep step = bert_step(shape, mlm);
    time_training_steps(state, step, step.flops, step.tokens);
}

// Classifying kClassifiedTexts texts: the class probabilities of each.
void bert_classify(benchmark::State& state, const BertShape& shape, Precision precision) {
    if (precision == Precision::bf16 && !seqgrad::packing_available(precision)) {
        state.SkipWithError(bf16_unavailable_reason().c_str());
        for (auto _ : state) {}
        return;
    }
    Generator gen(11);
    const ModelConfig config = bert_config(shape);
    auto model = seqgrad::models::make_model(config, gen);
    model->eval();
    if (precision != Precision::float32) model->pack_weights(precision);
    auto& bert = dynamic_cast<seqgrad::models::EncoderModel&>(*model);
    const IntTensor texts = random_texts(shape, kClassifiedTexts, gen);
    const seqgrad::NoGradGuard no_grad;
    const auto classify = [&] { return seqgrad::softmax(bert.class_logits(bert.forward_first(texts)), -1); };
    classify();  // the allocator's cache is warm
    for (auto _ : state) {
        Tensor probabilities = classify();
        benchmark::DoNotOptimize(probabilities.data());
    }
    const double flops = bert_flops(config, kClassifiedTexts, shape.length, 0, true);
    set_plain_rate_counter(state, "texts_per_second", static_cast<double>(kClassifiedTexts));
    set_plain_rate_counter(state, "tokens_per_second", static_cast<double>(kClassifiedTexts * shape.length));
    set_rate_counter(state, "gflops", flops);
    state.counters["mfu"] =
        benchmark::Counter(flops / sgemm_peak_flops(), benchmark::Counter::kIsIterationInvariantRate);
}

// The step's time by phase (zero_grad, forward, backward, clipping and the optimizer) and, inside
// the forward and backward passes, by operation (core/profile.h). Counters, in milliseconds per
// step: step_ms, zero_grad_ms, forward_ms, backward_ms, update_ms (clipping and the optimizer),
// and one per operation and pass, named "<fwd|bwd>/<kind>/<operation>_ms" (kind: op_kind());
// the backward pass's sums of gradients are "bwd/accumulate/accumulate_ms". Forward time not
// inside any operation (the loss's last steps, the model's set-up) is "fwd/other/unattributed_ms",
// and likewise for backward (the engine's walk of the graph). mfu as train_step's.
// bench/phases.py prints the counters as a table.
void phases(benchmark::State& state, TrainingStep& step) {
    for (int i = 0; i < 2; ++i) step();
    seqgrad::OpProfile profile;
    double zero_grad = 0, forward = 0, backward = 0, update = 0;
    for (auto _ : state) {
        const double t0 = seqgrad::profile_clock();
        step.optimizer->zero_grad();
        const double t1 = seqgrad::profile_clock();
        Tensor loss;
        double t2 = 0;
        {
            const seqgrad::OpProfileGuard guard(profile);
            loss = step.loss();
            t2 = seqgrad::profile_clock();
            loss.backward();
        }
        const double t3 = seqgrad::profile_clock();
        step.update();
        const double t4 = seqgrad::profile_clock();
        zero_grad += t1 - t0;
        forward += t2 - t1;
        backward += t3 - t2;
        update += t4 - t3;
        benchmark::DoNotOptimize(loss.item());
    }
    const double steps = static_cast<double>(std::max<benchmark::IterationCount>(1, state.iterations()));
    const auto ms = [&](double seconds) { return 1e3 * seconds / steps; };
    state.counters["step_ms"] = ms(zero_grad + forward + backward + update);
    state.counters["zero_grad_ms"] = ms(zero_grad);
    state.counters["forward_ms"] = ms(forward);
    state.counters["backward_ms"] = ms(backward);
    state.counters["update_ms"] = ms(update);
    double forward_ops = 0, backward_ops = profile.accumulate().seconds;
    for (const auto& [name, timing] : profile.forward()) {
        state.counters["fwd/" + std::string(seqgrad::op_kind(name)) + "/" + name + "_ms"] = ms(timing.seconds);
        forward_ops += timing.seconds;
    }
    for (const auto& [name, timing] : profile.backward()) {
        state.counters["bwd/" + std::string(seqgrad::op_kind(name)) + "/" + name + "_ms"] = ms(timing.seconds);
        backward_ops += timing.seconds;
    }
    state.counters["bwd/accumulate/accumulate_ms"] = ms(profile.accumulate().seconds);
    state.counters["fwd/other/unattributed_ms"] = ms(forward - forward_ops);
    state.counters["bwd/other/unattributed_ms"] = ms(backward - backward_ops);
    state.counters["mfu"] = step.flops * steps / (zero_grad + forward + backward + update) / sgemm_peak_flops();
    state.counters["products_gflop"] = step.flops * 1e-9;
}

// The loss over a validation text as training evaluates it (training::text_loss): batches of
// kEvaluatedWindows windows of context + 1 tokens, in eval mode, without a gradient.
void gpt_evaluate(benchmark::State& state, const GptShape& shape) {
    Generator gen(11);
    const ModelConfig config = gpt_config(shape);
    auto model = seqgrad::models::make_model(config, gen);
    model->eval();
    std::vector<int64_t> ids(static_cast<size_t>(kEvaluatedWindows * (shape.context + 1)));
    for (auto& id : ids) id = random_id(kGptVocab, gen);
    const IntTensor windows = IntTensor::from_vector(std::move(ids), {kEvaluatedWindows, shape.context + 1});
    const IntTensor no_source = IntTensor::zeros({kEvaluatedWindows, 0});
    const seqgrad::NoGradGuard no_grad;
    model->loss(no_source, windows, 0.0f);  // the allocator's cache is warm
    for (auto _ : state) {
        Tensor loss = model->loss(no_source, windows, 0.0f);
        benchmark::DoNotOptimize(loss.data());
    }
    const double flops = forward_flops(config, kEvaluatedWindows, 0, shape.context);
    set_plain_rate_counter(state, "tokens_per_second", static_cast<double>(kEvaluatedWindows * shape.context));
    set_rate_counter(state, "gflops", flops);
    state.counters["mfu"] =
        benchmark::Counter(flops / sgemm_peak_flops(), benchmark::Counter::kIsIterationInvariantRate);
}

void gpt_generate(benchmark::State& state, const GptShape& shape, Precision precision) {
    if (precision == Precision::bf16 && !seqgrad::packing_available(precision)) {
        state.SkipWithError(bf16_unavailable_reason().c_str());
        for (auto _ : state) {}
        return;
    }
    Generator gen(11);
    auto model = seqgrad::models::make_model(gpt_config(shape), gen);
    model->eval();
    model->pack_weights(precision);  // as the TextGenerator does (float32, or `generate --bf16`)
    seqgrad::models::DecodingOptions sampling;
    sampling.max_len = kGeneratedTokens;
    sampling.min_len = kGeneratedTokens;  // every iteration writes all of them
    sampling.temperature = 0.8f;
    sampling.barred.assign(std::begin(seqgrad::models::kNotInText),  // as the TextGenerator bars them
                           std::end(seqgrad::models::kNotInText));
    const IntTensor prompt = IntTensor::full({1, 1}, kFirstRealToken);
    const IntTensor no_source = IntTensor::zeros({1, 0});
    int64_t tokens = 0;
    for (auto _ : state) {
        const auto found = seqgrad::models::search(*model, no_source, prompt, sampling);
        tokens = static_cast<int64_t>(found.front().front().tokens.size());
        benchmark::DoNotOptimize(tokens);
    }
    set_plain_rate_counter(state, "tokens_per_second", static_cast<double>(tokens));
    // Every token reads each weight matrix once (the token embedding whole, as the tied output's;
    // one row of the positions'): the bytes a token streams from memory, against memory/sweep.
    double bytes = 0;
    for (const auto& [name, p] : model->named_parameters())
        if (p.dim() == 2 && name.find("position") == std::string::npos)
            bytes += static_cast<double>(p.numel()) * (precision == Precision::bf16 ? 2.0 : 4.0);
    state.counters["weights_GB_per_second"] =
        benchmark::Counter(bytes * static_cast<double>(tokens) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

// Rows [begin, end) of `ids`.
IntTensor rows_of(const IntTensor& ids, int64_t begin, int64_t end) {
    const int64_t width = ids.size(1);
    std::vector<int64_t> values(ids.data() + begin * width, ids.data() + end * width);
    return IntTensor::from_vector(std::move(values), {end - begin, width});
}

void allreduce(benchmark::State& state, const BenchShape& shape) {
    const seqgrad::nn::Distributed& group = seqgrad::nn::Distributed::current();
    Generator gen(7);
    auto model = seqgrad::models::make_model(bench_config("transformer", shape), gen);
    const std::vector<Tensor> params = model->parameters();
    double bytes = 0;
    for (Tensor p : params) {
        p.set_grad(Tensor::full(p.shape(), 1e-3f));
        bytes += 4.0 * static_cast<double>(p.numel());
    }
    const float scale = 1.0f / static_cast<float>(group.size());
    seqgrad::nn::all_reduce_gradients(params, group, scale);  // warm: buffers, connections
    const auto start = std::chrono::steady_clock::now();
    for (auto _ : state) seqgrad::nn::all_reduce_gradients(params, group, scale);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double n = group.size();
    state.counters["gradient_mib"] = bytes / (1024.0 * 1024.0);
    state.counters["ms_per_call"] =
        1e3 * seconds / static_cast<double>(std::max<benchmark::IterationCount>(1, state.iterations()));
    set_rate_counter(state, "bus_gb_per_second", 2 * (n - 1) / n * bytes);
    state.counters["ranks"] = n;
}

void train_step_distributed(benchmark::State& state, const BenchShape& shape, bool overlap) {
    using Clock = std::chrono::steady_clock;
    const seqgrad::nn::Distributed& group = seqgrad::nn::Distributed::current();
    Generator gen(7);
    auto model = seqgrad::models::make_model(bench_config("transformer", shape), gen);
    model->train();
    seqgrad::nn::broadcast_parameters(model->parameters(), group);
    seqgrad::nn::AdamOptions adam;
    adam.lr = 1e-4;
    seqgrad::nn::Adam optimizer(model->named_parameters(), adam);
    const Batch batch = random_batch(shape, gen);  // the global batch, the same on every rank
    const int64_t begin = shape.batch * group.rank() / group.size(),
                  end = shape.batch * (group.rank() + 1) / group.size();
    const Batch share{rows_of(batch.src, begin, end), rows_of(batch.tgt_in, begin, end),
                      rows_of(batch.tgt_out, begin, end)};
    const float weight = static_cast<float>(end - begin) / static_cast<float>(shape.batch);  // every row full length
    seqgrad::nn::GradientReducer reducer(model->parameters(), group);
    double reduce_seconds = 0;
    const auto step = [&] {
        optimizer.zero_grad();
        Tensor loss =
            seqgrad::models::sequence_loss(model->logits(share.src, share.tgt_in), share.tgt_out, kLabelSmoothing);
        if (overlap) {
            reducer.backward(loss, weight);
            reduce_seconds += reducer.last_wait_seconds();
        } else {
            loss.backward();
            const auto t0 = Clock::now();
            seqgrad::nn::all_reduce_gradients(model->parameters(), group, weight);
            reduce_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
        }
        optimizer.step();
        return loss.item();
    };
    for (int i = 0; i < 2; ++i) step();
    reduce_seconds = 0;
    const auto start = Clock::now();
    for (auto _ : state) {
        float loss = step();
        benchmark::DoNotOptimize(loss);
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    const double steps = static_cast<double>(std::max<benchmark::IterationCount>(1, state.iterations()));
    set_plain_rate_counter(state, "tokens_per_second", static_cast<double>(shape.batch * shape.tgt_len));
    state.counters["allreduce_ms"] = 1e3 * reduce_seconds / steps;
    state.counters["allreduce_fraction"] = reduce_seconds / seconds;
    state.counters["ranks"] = group.size();
}

void register_model_benchmarks() {
    for (const BenchShape& shape : kShapes) {
        for (const seqgrad::models::ModelKind& kind : seqgrad::models::model_kinds()) {
            if (kind.vocabularies.size() != 2) continue;  // the GPT has shapes of its own, below
            const std::string name = "train_step/" + kind.name + "/" + shape.name, model = kind.name;
            for (const Precision precision : {Precision::float32, Precision::bf16}) {
                if (precision == Precision::bf16 && model != "transformer") continue;
                const std::string suffix = precision == Precision::bf16 ? "/bf16" : "";
                benchmark::RegisterBenchmark(
                    (name + suffix).c_str(),
                    [model, &shape, precision](benchmark::State& state) { train_step(state, model, shape, precision); })
                    ->UseRealTime()
                    ->Unit(benchmark::kMillisecond);
            }
        }
    }
    for (const BenchShape& shape : kShapes) {
        for (const bool cached : {true, false}) {
            const std::string name =
                std::string("decode/transformer/") + shape.name + (cached ? "/cached" : "/recompute");
            benchmark::RegisterBenchmark(name.c_str(),
                                         [cached, &shape](benchmark::State& state) { decode(state, shape, cached); })
                ->UseRealTime()
                ->Unit(benchmark::kMillisecond);
        }
    }
    for (const GptShape& shape : kGptShapes) {
        for (const Precision precision : {Precision::float32, Precision::bf16})
            benchmark::RegisterBenchmark(
                (std::string("train_step/gpt/") + shape.name + (precision == Precision::bf16 ? "/bf16" : "")).c_str(),
                [&shape, precision](benchmark::State& state) { gpt_train_step(state, shape, precision); })
                ->UseRealTime()
                ->Unit(benchmark::kMillisecond);
        benchmark::RegisterBenchmark((std::string("evaluate/gpt/") + shape.name).c_str(),
                                     [&shape](benchmark::State& state) { gpt_evaluate(state, shape); })
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond);
        if (std::string(shape.name) == "baby")
            for (const Precision precision : {Precision::float32, Precision::bf16})
                benchmark::RegisterBenchmark(
                    precision == Precision::bf16 ? "generate/gpt/baby/bf16" : "generate/gpt/baby",
                    [&shape, precision](benchmark::State& state) { gpt_generate(state, shape, precision); })
                    ->UseRealTime()
                    ->Unit(benchmark::kMillisecond);
    }
    for (const BertShape& shape : kBertShapes) {
        const std::string name = std::string("train_step/bert/") + shape.name;
        for (const bool mlm : {false, true})
            for (const Precision precision : {Precision::float32, Precision::bf16})
                benchmark::RegisterBenchmark(
                    (name + (mlm ? "/mlm" : "") + (precision == Precision::bf16 ? "/bf16" : "")).c_str(),
                    [&shape, mlm, precision](benchmark::State& state) {
                    bert_train_step(state, shape, mlm, precision);
                    })
                    ->UseRealTime()
                    ->Unit(benchmark::kMillisecond);
        for (const Precision precision : {Precision::float32, Precision::bf16, Precision::int8})
            benchmark::RegisterBenchmark(
                (std::string("classify/bert/") + shape.name +
                 (precision == Precision::float32 ? "" : std::string("/") + seqgrad::precision_name(precision)))
                    .c_str(),
                [&shape, precision](benchmark::State& state) { bert_classify(state, shape, precision); })
                ->UseRealTime()
                ->Unit(benchmark::kMillisecond);
    }
    const auto register_phases = [](const std::string& name, std::function<TrainingStep()> make) {
        benchmark::RegisterBenchmark(
            name.c_str(),
            [make](benchmark::State& state) {
            TrainingStep step = make();
            phases(state, step);
            })
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond);
    };
    for (const char* model : {"transformer", "attn_seq2seq", "seq2seq"})
        for (const BenchShape& shape : kShapes)
            register_phases(std::string("phases/") + model + "/" + shape.name,
                            [model, &shape] { return seq2seq_step(model, shape); });
    for (const GptShape& shape : kGptShapes)
        register_phases(std::string("phases/gpt/") + shape.name, [&shape] { return gpt_step(shape); });
    for (const BertShape& shape : kBertShapes)
        for (const bool mlm : {false, true})
            register_phases(std::string("phases/bert/") + shape.name + (mlm ? "/mlm" : ""),
                            [&shape, mlm] { return bert_step(shape, mlm); });
    // Fixed iteration counts: every rank must make the same collective calls.
    for (const BenchShape& shape : kShapes) {
        if (std::string(shape.name) == "small") continue;
        const bool seed = std::string(shape.name) == "seed";
        benchmark::RegisterBenchmark((std::string("distributed/allreduce/transformer/") + shape.name).c_str(),
                                     [&shape](benchmark::State& state) { allreduce(state, shape); })
            ->Iterations(seed ? 5 : 20)
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond);
        for (const bool overlap : {false, true}) {
            const std::string name =
                std::string("distributed/train_step/transformer/") + shape.name + (overlap ? "/overlap" : "/blocking");
            benchmark::RegisterBenchmark(
                name.c_str(),
                [&shape, overlap](benchmark::State& state) { train_step_distributed(state, shape, overlap); })
                ->Iterations(seed ? 4 : 10)
                ->UseRealTime()
                ->Unit(benchmark::kMillisecond);
        }
    }
}

}  // namespace seqgrad_bench
