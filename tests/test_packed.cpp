// Packed weights (core/packed.h) and modules that pack theirs (Module::pack_weights). Float32 packed
// products are checked against linear(); int8 ones against the same quantization done here by hand
// with exact integer sums, so a wrong weight layout, block, scale or rounding fails; the modules
// against their unpacked selves; and, with packing turned off as on a CPU without oneDNN's
// kernels, the sgemm fallback on every machine. The first test tagged [packed] in a run prints the
// kernels this machine runs (main.cpp).
#include "helpers.h"

#include <cmath>
#include <cstdlib>
#include <map>

#include "seqgrad/models/registry.h"

using namespace seqgrad;
using namespace seqgrad::testing;

namespace {

// Whether this build packs weights (oneDNN); if not, the calling case skips and returns. int8 is
// asked: it packs wherever oneDNN is, float32 only where oneDNN's kernel pays.
bool have_onednn() {
    if (packing_available(Precision::int8)) return true;
    skip_test("this build has no oneDNN: nothing is packed (" + packed_kernel_name(Precision::int8) + ")");
    return false;
}

struct Quantized {
    std::vector<int8_t> q;
    std::vector<float> scales;
};

// packed.h's rule, row by row: s = max |row| / levels, q = round(row * levels / max |row|).
Quantized quantize_rows(const Tensor& m, int levels) {
    const int64_t rows = m.numel() / m.size(-1), cols = m.size(-1);
    Quantized out{std::vector<int8_t>(static_cast<size_t>(rows * cols)), std::vector<float>(static_cast<size_t>(rows))};
    for (int64_t r = 0; r < rows; ++r) {
        const float* row = m.data() + r * cols;
        float peak = 0;
        for (int64_t c = 0; c < cols; ++c) peak = std::max(peak, std::fabs(row[c]));
        const auto top = static_cast<float>(levels);
        out.scales[r] = peak / top;
        for (int64_t c = 0; c < cols; ++c)
            out.q[r * cols + c] = peak == 0 ? 0 : static_cast<int8_t>(std::nearbyint(row[c] * (top / peak)));
    }
    return out;
}

// The int8 product by hand: exact integer sums, then the scales and the bias.
Tensor reference(const Tensor& x, const Tensor& w, const Tensor& bias) {
    const int64_t in = w.size(1), out = w.size(0), rows = x.numel() / in;
    const Quantized qx = quantize_rows(x, 127), qw = quantize_rows(w, int8_weight_levels());
    Tensor y = Tensor::zeros({rows, out});
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t r = 0; r < out; ++r) {
            int64_t sum = 0;
            for (int64_t k = 0; k < in; ++k) sum += int64_t{qx.q[i * in + k]} * int64_t{qw.q[r * in + k]};
            y.data()[i * out + r] = static_cast<float>(static_cast<double>(sum) * qx.scales[i] * qw.scales[r] +
                                                       (bias.defined() ? bias.data()[r] : 0.0f));
        }
    return y;
}

// |a - b| <= tolerance relative to the largest |b|, element by element.
void require_close(const Tensor& a, const Tensor& b, float relative) {
    REQUIRE(a.numel() == b.numel());
    float scale = 0;
    for (int64_t i = 0; i < b.numel(); ++i) scale = std::max(scale, std::fabs(b.data()[i]));
    for (int64_t i = 0; i < a.numel(); ++i) REQUIRE(std::fabs(a.data()[i] - b.data()[i]) <= relative * scale + 1e-6f);
}

std::shared_ptr<models::Model> fixture_model(const std::string& name, IntTensor& src, IntTensor& tgt_in) {
    const SafetensorsFile file = SafetensorsFile::load(std::string(SEQGRAD_FIXTURES_DIR) + "/" + name);
    Generator gen(0);
    auto model = models::make_model(models::ModelConfig::from_json(file.metadata("config"), false), gen);
    std::map<std::string, Tensor> state;
    for (const std::string& n : file.names())
        if (n.rfind("input.", 0) != 0 && n.rfind("expect.", 0) != 0) state.emplace(n, file.tensor(n));
    model->load_state_dict(state);
    model->eval();
    src = file.int_tensor("input.src");
    tgt_in = file.int_tensor("input.tgt");
    return model;
}

// [out, in] of the weights: odd sizes, several column blocks, 256 x 512 by one row, which oneDNN's
// fast int8 kernels refuse (the rows are padded then), and inputs in three of the stretches that
// seqgrad's own float32 panels sum more rows over.
const std::vector<std::pair<int64_t, int64_t>> kShapes{{37, 53}, {512, 96}, {5, 1}, {256, 512}, {40, 1100}};

}  // namespace

TEST_CASE("without packing, float32 layers stay on sgemm and int8 is refused", "[packed]") {
    Generator gen(1);
    nn::Linear layer(64, 48, gen);
    const Tensor x = random_tensor({5, 64}, 2, -1.0f, 1.0f, false);
    NoGradGuard no_grad;
    const Tensor exact = layer.forward(x);
    {
        const PackingDisabled off;  // what a CPU without oneDNN's kernels, or a build without oneDNN, does
        REQUIRE_FALSE(packing_available(Precision::float32));
        REQUIRE_FALSE(packing_available(Precision::int8));
        REQUIRE(error_of([&] { layer.pack_weights(Precision::int8); }).find("oneDNN") != std::string::npos);
        REQUIRE_FALSE(layer.weights_packed());
        layer.pack_weights(Precision::float32);  // nothing to pack with: the layer stays on sgemm
        REQUIRE_FALSE(layer.weights_packed());
        REQUIRE(max_abs_diff(layer.forward(x), exact) == 0);
    }
    // Packing back as this machine has it: float32 packed where oneDNN has a kernel that pays.
    layer.pack_weights(Precision::float32);
    REQUIRE(layer.weights_packed() == packing_available(Precision::float32));
    REQUIRE(max_abs_diff(layer.forward(x), exact) < 1e-5f);
    if (!packing_available(Precision::int8)) {  // a build without oneDNN: it says what to install
        REQUIRE(packed_kernel_name(Precision::int8).find("none") != std::string::npos);
        REQUIRE(error_of([] {
                    PackedMatrix m(Tensor::ones({2, 2}), Precision::int8);
                }).find("libdnnl-dev") != std::string::npos);
    }
}

// Each weight of kShapes packed on one and two threads (one and two column blocks), then multiplied
// by row counts below, at and across the 16-row tiles, with and without bias: linear_packed against
// expected(x, w, bias) within `tolerance`. on_matrix(w, packed) checks each packed matrix first.
template <typename Expected, typename OnMatrix>
void check_every_packing(Precision precision, const Expected& expected, float tolerance, const OnMatrix& on_matrix) {
    NoGradGuard no_grad;
    const ThreadCountScope restore;
    for (int pack_threads : {1, 2}) {
        set_num_threads(pack_threads);  // one column block per thread
        for (const auto& [out, in] : kShapes) {
            const Tensor w = random_tensor({out, in}, 11, -0.5f, 0.5f, false);
            const Tensor bias = random_tensor({out}, 12, -1.0f, 1.0f, false);
            const PackedMatrix packed(w, precision);
            REQUIRE(packed.precision() == precision);
            REQUIRE(packed.out_features() == out);
            REQUIRE(packed.in_features() == in);
            on_matrix(w, packed);
            // 258: a chunk of 256 rows, then 2 (int8 without VNNI: bytes shifted for oneDNN, its pairs after);
            // 700 on two blocks: by rows, 350 a thread, a chunk of 256 and one of 94 each
            for (int64_t rows : {1, 2, 3, 4, 5, 16, 17, 64, 130, 258, 300, 700}) {
                INFO(out << " x " << in << ", " << rows << " rows, packed on " << pack_threads << " threads");
                const Tensor x = random_tensor({rows, in}, static_cast<uint64_t>(rows), -2.0f, 2.0f, false);
                require_close(linear_packed(x, packed, bias), expected(x, w, bias), tolerance);
                require_close(linear_packed(x, packed, Tensor()), expected(x, w, Tensor()), tolerance);
            }
        }
    }
}

// Where oneDNN's float32 kernel would not pay (no AVX-512) layers are not packed, but a PackedMatrix
// still runs whatever kernel oneDNN has: checked here on every machine with oneDNN.
TEST_CASE("float32 packed products equal linear to float rounding", "[packed]") {
    if (!have_onednn()) return;
    check_every_packing(
        Precision::float32, [](const Tensor& x, const Tensor& w, const Tensor& b) { return linear(x, w, b); }, 1e-5f,
        [](const Tensor&, const PackedMatrix& packed) { REQUIRE(packed.scales() == nullptr); });
}

// The activation is applied in the product's own pass over its results, wherever they come from:
// seqgrad's panels (one to four rows, and tiles of more, each input stretch), oneDNN's kernels in
// chunks of 256 rows, int8's scaling back (its pairs below five rows, oneDNN's above). Each must
// give what relu() and gelu() give on the product's output.
TEST_CASE("a packed product's activation equals relu or gelu of its output", "[packed]") {
    if (!have_onednn()) return;
    NoGradGuard no_grad;
    std::vector<Precision> precisions{Precision::float32, Precision::int8};
    if (bf16_available()) precisions.push_back(Precision::bf16);
    for (const Precision precision : precisions)
        for (const auto& [out, in] : kShapes) {
            const Tensor w = random_tensor({out, in}, 21, -0.5f, 0.5f, false);
            const Tensor bias = random_tensor({out}, 22, -1.0f, 1.0f, false);
            const PackedMatrix packed(w, precision);
            for (int64_t rows : {1, 3, 4, 5, 17, 300, 700}) {
                INFO(precision_name(precision) << ", " << out << " x " << in << ", " << rows << " rows");
                const Tensor x = random_tensor({rows, in}, static_cast<uint64_t>(rows + 40), -2.0f, 2.0f, false);
                for (const Tensor& b : {bias, Tensor()}) {
                    const Tensor plain = linear_packed(x, packed, b);
                    REQUIRE(max_abs_diff(linear_packed(x, packed, b, PackedActivation::none), plain) == 0);
                    REQUIRE(max_abs_diff(linear_packed(x, packed, b, PackedActivation::relu), relu(plain)) == 0);
                    REQUIRE(max_abs_diff(linear_packed(x, packed, b, PackedActivation::gelu), gelu(plain)) <= 1e-6f);
                }
            }
        }
}

// One input for several products (a self-attention's queries, keys and values): rounded or
// quantized once, each product must be the one linear_packed gives alone, bit for bit.
TEST_CASE("products sharing one input equal each product on its own", "[packed]") {
    if (!have_onednn()) return;
    NoGradGuard no_grad;
    std::vector<Precision> precisions{Precision::float32, Precision::int8};
    if (bf16_available()) precisions.push_back(Precision::bf16);
    const int64_t in = 96;
    const Tensor w1 = random_tensor({40, in}, 31, -0.5f, 0.5f, false);
    const Tensor w2 = random_tensor({64, in}, 32, -0.5f, 0.5f, false);
    const Tensor w3 = random_tensor({17, in}, 33, -0.5f, 0.5f, false);
    const Tensor b1 = random_tensor({40}, 34, -1.0f, 1.0f, false), b3 = random_tensor({17}, 35, -1.0f, 1.0f, false);
    for (const Precision precision : precisions) {
        const PackedMatrix p1(w1, precision), p2(w2, precision), p3(w3, precision);
        for (int64_t rows : {1, 4, 5, 300}) {
            INFO(precision_name(precision) << ", " << rows << " rows");
            const Tensor x = random_tensor({rows, in}, static_cast<uint64_t>(rows + 50), -2.0f, 2.0f, false);
            const std::vector<Tensor> ys = linear_packed(x, {&p1, &p2, &p3}, {b1, Tensor(), b3});
            REQUIRE(ys.size() == 3);
            REQUIRE(max_abs_diff(ys[0], linear_packed(x, p1, b1)) == 0);
            REQUIRE(max_abs_diff(ys[1], linear_packed(x, p2, Tensor())) == 0);
            REQUIRE(max_abs_diff(ys[2], linear_packed(x, p3, b3)) == 0);
        }
    }
    const Tensor x = random_tensor({3, in}, 7, -1.0f, 1.0f, false);
    const PackedMatrix f(w1, Precision::float32), q(w2, Precision::int8);
    const PackedMatrix narrow(random_tensor({8, 5}, 8, -1.0f, 1.0f, false), Precision::int8);
    REQUIRE(error_of([&] {
                linear_packed(x, {&f, &q}, {Tensor(), Tensor()});
            }).find("cannot share one input") != std::string::npos);
    REQUIRE(error_of([&] { linear_packed(x, {&q}, {}); }).find("one bias") != std::string::npos);
    REQUIRE(error_of([&] {
                linear_packed(x, {&q, &narrow}, {Tensor(), Tensor()});
            }).find("in_features") != std::string::npos);
}

// A feed-forward block's two products in a row: many rows go through both a chunk at a time, the
// rows between them quantized or rounded on the thread that made them. They must give what the two
// products give one after the other, bit for bit, on one thread and on two.
TEST_CASE("two packed products in a row equal the two one after the other", "[packed]") {
    if (!have_onednn()) return;
    NoGradGuard no_grad;
    std::vector<Precision> precisions{Precision::float32, Precision::int8};
    if (bf16_available()) precisions.push_back(Precision::bf16);
    const int64_t in = 96, hidden = 384;
    const Tensor w1 = random_tensor({hidden, in}, 71, -0.5f, 0.5f, false);
    const Tensor w2 = random_tensor({in, hidden}, 72, -0.5f, 0.5f, false);
    const Tensor b1 = random_tensor({hidden}, 73, -1.0f, 1.0f, false), b2 = random_tensor({in}, 74, -1.0f, 1.0f, false);
    {
        const ThreadCountScope restore;
        for (const int pack_threads : {1, 2}) {
            set_num_threads(pack_threads);
            for (const Precision precision : precisions) {
                const PackedMatrix p1(w1, precision), p2(w2, precision);
                // 700 and 1100 rows: chunk by chunk through both (by rows); fewer: one product, then the other
                for (const int64_t rows : {3, 300, 700, 1100})
                    for (const PackedActivation between :
                         {PackedActivation::none, PackedActivation::relu, PackedActivation::gelu})
                        for (const bool biased : {true, false}) {
                            INFO(precision_name(precision)
                                 << ", " << rows << " rows, " << pack_threads << " threads, activation "
                                 << static_cast<int>(between) << (biased ? ", biases" : ""));
                            const Tensor x =
                                random_tensor({rows, in}, static_cast<uint64_t>(rows + 75), -2.0f, 2.0f, false);
                            const Tensor c1 = biased ? b1 : Tensor(), c2 = biased ? b2 : Tensor();
                            const Tensor pair = linear_packed(x, p1, c1, between, p2, c2);
                            REQUIRE(pair.shape() == Shape{rows, in});
                            REQUIRE(max_abs_diff(pair, linear_packed(linear_packed(x, p1, c1, between), p2, c2)) == 0);
                        }
            }
        }
    }
    const PackedMatrix f(w1, Precision::float32), q(w2, Precision::int8), f2(w1, Precision::float32);
    const Tensor x = random_tensor({3, in}, 7, -1.0f, 1.0f, false);
    REQUIRE(error_of([&] {
                linear_packed(x, f, Tensor(), PackedActivation::none, q, Tensor());
            }).find("cannot run one after the other") != std::string::npos);
    REQUIRE(error_of([&] {
                linear_packed(x, f, Tensor(), PackedActivation::none, f2, Tensor());
            }).find("is not the first's out_features") != std::string::npos);
    const PackedMatrix g(w2, Precision::float32);
    REQUIRE(error_of([&] {
                linear_packed(x, f, b1, PackedActivation::none, g, b1);
            }).find("second weight's out_features") != std::string::npos);
}

// A feed-forward block whose dropout changes nothing runs its packed layers as one pair: the same
// values as its layers one after the other, with its own activation and both biases.
TEST_CASE("a packed feed-forward block gives its layers' values one after the other", "[packed]") {
    if (!have_onednn()) return;
    NoGradGuard no_grad;
    Generator gen(5);
    for (const nn::Activation activation : {nn::Activation::relu, nn::Activation::gelu}) {
        nn::FeedForward block(64, 256, gen, activation, 0.1f);
        block.eval();
        block.pack_weights(Precision::int8);
        const Tensor x = random_tensor({2, 350, 64}, 91, -2.0f, 2.0f, false);
        INFO("activation " << static_cast<int>(activation));
        REQUIRE(max_abs_diff(block.forward(x), block.w2->forward(block.w1->forward(x, activation))) == 0);
    }
}

TEST_CASE("int8 products equal the same quantization with exact integer sums", "[packed][int8]") {
    if (!have_onednn()) return;
    check_every_packing(Precision::int8, reference, 1e-6f, [](const Tensor& w, const PackedMatrix& packed) {
        const Quantized by_hand = quantize_rows(w, int8_weight_levels());
        for (int64_t r = 0; r < w.size(0); ++r) REQUIRE(packed.scales()[r] == by_hand.scales[static_cast<size_t>(r)]);
    });
}

// The largest sums there can be: every product at the top of both ranges, of one sign along a row
// or alternating, where 16-bit pair sums would saturate if the weights had too many levels for the
// CPU's instructions (tests/CMakeLists.txt also runs the [int8] tests with oneDNN held to AVX2 and
// to AVX-512 without VNNI).
TEST_CASE("int8 products at the extremes of both ranges are exact", "[packed][int8]") {
    if (!have_onednn()) return;
    NoGradGuard no_grad;
    INFO("int8 kernel " << packed_kernel_name(Precision::int8) << ", weights in " << int8_weight_levels()
                        << " levels each side of zero");
    // Held by oneDNN's ONEDNN_MAX_CPU_ISA to instructions without VNNI (tests/CMakeLists.txt), it
    // must know to use fewer levels.
    const char* isa = std::getenv("ONEDNN_MAX_CPU_ISA");
    if (isa != nullptr && (std::string(isa) == "AVX2" || std::string(isa) == "AVX512_CORE"))
        REQUIRE(int8_weight_levels() == 63);
    constexpr int64_t in = 256, out = 32;
    Tensor w = Tensor::empty({out, in});
    for (int64_t r = 0; r < out; ++r)
        for (int64_t k = 0; k < in; ++k) w.data()[r * in + k] = r % 2 == 0 ? 1.0f : (k % 2 == 0 ? 1.0f : -1.0f);
    const PackedMatrix packed(w, Precision::int8);
    for (int64_t rows : {4, 12}) {  // seqgrad's own pairs, then oneDNN's kernels (bytes shifted without VNNI)
        INFO(rows << " rows");
        Tensor x = Tensor::empty({rows, in});
        for (int64_t i = 0; i < rows; ++i)
            for (int64_t k = 0; k < in; ++k) {
                const float alternating = k % 2 == i % 2 ? 3.0f : -3.0f;
                x.data()[i * in + k] = i % 4 == 0 ? 1.0f : i % 4 == 1 ? -1.0f : alternating;
            }
        const Tensor y = linear_packed(x, packed, Tensor());
        require_close(y, reference(x, w, Tensor()), 1e-6f);
        require_close(y, linear(x, w, Tensor()), 1e-5f);  // these values quantize without rounding
    }
}

TEST_CASE("int8 products are close to float32 and keep the input's leading shape", "[packed][int8]") {
    if (!have_onednn()) return;
    NoGradGuard no_grad;
    Generator gen(3);
    const Tensor w = Tensor::normal({256, 128}, 0.0f, 0.1f, gen);
    const Tensor bias = Tensor::normal({256}, 0.0f, 0.1f, gen);
    const Tensor x = Tensor::normal({4, 7, 128}, 0.0f, 1.0f, gen);
    const Tensor y = linear_packed(x, PackedMatrix(w, Precision::int8), bias);
    REQUIRE(y.shape() == Shape{4, 7, 256});
    // Rounding to 255 levels per row (127 for W without VNNI): about 1% of the output's spread.
    require_close(y, linear(x, w, bias), 0.02f);
    REQUIRE(max_abs_diff(y, linear(x, w, bias)) > 0);  // it did run in int8
}

TEST_CASE("packed products do not depend on the number of threads they run on", "[packed][threads]") {
    if (!have_onednn()) return;
    NoGradGuard no_grad;
    const Tensor w = random_tensor({384, 256}, 5, -1.0f, 1.0f, false);
    // 200 rows: a column block per thread; 700: by rows on two threads (the second thread's chunks
    // start at row 350), by chunks of 256 on one
    for (const int64_t rows : {200, 700}) {
        INFO(rows << " rows");
        const Tensor x = random_tensor({rows, 256}, 6, -1.0f, 1.0f, false);
        const ThreadCountScope restore(2);
        const PackedMatrix q(w, Precision::int8), f(w, Precision::float32);
        const Tensor few = random_tensor({3, 256}, 7, -1.0f, 1.0f, false);  // a beam's rows
        const Tensor q2 = linear_packed(x, q, Tensor()), f2 = linear_packed(x, f, Tensor());
        const Tensor few2 = linear_packed(few, f, Tensor());
        set_num_threads(1);
        const Tensor q1 = linear_packed(x, q, Tensor()), f1 = linear_packed(x, f, Tensor());
        const Tensor few1 = linear_packed(few, f, Tensor());
        // Packed on one thread (one block): int8 sums are exact, so the blocks cannot change them.
        const Tensor q_one_block = linear_packed(x, PackedMatrix(w, Precision::int8), Tensor());
        REQUIRE(max_abs_diff(q1, q2) == 0);
        REQUIRE(max_abs_diff(few1, few2) == 0);
        // Beyond four rows seqgrad's own float32 panels (below AVX-512) hand the product to sgemm,
        // whose sums may be ordered by its blocks; oneDNN's packed kernel keeps them.
        if (packed_kernel_name(Precision::float32).rfind("seqgrad", 0) == 0) REQUIRE(max_abs_diff(f1, f2) < 1e-4f);
        else REQUIRE(max_abs_diff(f1, f2) == 0);
        REQUIRE(max_abs_diff(q_one_block, q2) == 0);
    }
}

TEST_CASE("products of one to four rows give one thread's results on several, whichever takes a chunk",
          "[packed][threads]") {
    // Up to four rows, each thread reads its block of columns a chunk at a time and then takes the
    // last chunks of a block whose thread has not reached them: each column is still computed by
    // one thread with the same code, so two or three threads give one thread's results exactly,
    // for blocks of any width (not whole chunks, not whole panels).
    if (!have_onednn()) return;
    NoGradGuard no_grad;
    for (const auto& [out, in] : std::vector<std::pair<int64_t, int64_t>>{{37, 53}, {1100, 40}, {400, 384}}) {
        const Tensor w = random_tensor({out, in}, 11, -1.0f, 1.0f, false);
        const Tensor bias = random_tensor({out}, 12, -1.0f, 1.0f, false);
        for (const int threads : {2, 3}) {
            const ThreadCountScope scope(threads);
            const PackedMatrix f(w, Precision::float32);  // a block of columns a thread
            for (int64_t rows = 1; rows <= 4; ++rows) {
                CAPTURE(out, in, threads, rows);
                const Tensor x = random_tensor({rows, in}, 13 + rows, -1.0f, 1.0f, false);
                std::vector<Tensor> many;
                for (int repeat = 0; repeat < 20; ++repeat)
                    many.push_back(linear_packed(x, f, bias, PackedActivation::relu));
                set_num_threads(1);
                const Tensor one = linear_packed(x, f, bias, PackedActivation::relu);
                set_num_threads(threads);
                for (const Tensor& y : many) REQUIRE(max_abs_diff(y, one) == 0);
                require_close(one, relu(linear(x, w, bias)), 1e-5f);
            }
        }
    }
}

TEST_CASE("one to four rows through several weights in one job equal each product on its own", "[packed][threads]") {
    // Weights large enough to be shared out between the threads, of widths that are not whole
    // chunks or panels, one without a bias: the three products run as one job whose shares are
    // every weight's blocks, and each must be what linear_packed gives for that weight alone, bit
    // for bit, whichever thread takes which columns; packed at one thread count and run at another
    // too (blocks not one a thread).
    if (!have_onednn()) return;
    NoGradGuard no_grad;
    const int64_t in = 384;
    const Tensor w1 = random_tensor({384, in}, 41, -0.5f, 0.5f, false);
    const Tensor w2 = random_tensor({200, in}, 42, -0.5f, 0.5f, false);
    const Tensor w3 = random_tensor({1000, in}, 43, -0.5f, 0.5f, false);
    const Tensor b1 = random_tensor({384}, 44, -1.0f, 1.0f, false), b3 = random_tensor({1000}, 45, -1.0f, 1.0f, false);
    for (const auto& [packed_at, run_at] : std::vector<std::pair<int, int>>{{2, 2}, {3, 3}, {3, 2}, {2, 1}}) {
        std::unique_ptr<PackedMatrix> p1, p2, p3;
        {
            const ThreadCountScope scope(packed_at);
            p1 = std::make_unique<PackedMatrix>(w1, Precision::float32);
            p2 = std::make_unique<PackedMatrix>(w2, Precision::float32);
            p3 = std::make_unique<PackedMatrix>(w3, Precision::float32);
        }
        const ThreadCountScope scope(run_at);
        for (int64_t rows = 1; rows <= 4; ++rows) {
            CAPTURE(packed_at, run_at, rows);
            const Tensor x = random_tensor({rows, in}, static_cast<uint64_t>(rows + 60), -1.0f, 1.0f, false);
            const Tensor y1 = linear_packed(x, *p1, b1), y2 = linear_packed(x, *p2, Tensor()),
                         y3 = linear_packed(x, *p3, b3);
            for (int repeat = 0; repeat < 20; ++repeat) {
                const std::vector<Tensor> ys = linear_packed(x, {p1.get(), p2.get(), p3.get()}, {b1, Tensor(), b3});
                REQUIRE(ys.size() == 3);
                REQUIRE(max_abs_diff(ys[0], y1) == 0);
                REQUIRE(max_abs_diff(ys[1], y2) == 0);
                REQUIRE(max_abs_diff(ys[2], y3) == 0);
            }
            require_close(y3, linear(x, w3, b3), 1e-5f);
        }
    }
}

TEST_CASE("int8 rows of zeros and NaN, and bad weights and shapes are errors", "[packed][errors]") {
    if (!have_onednn()) return;
    NoGradGuard no_grad;
    const Tensor w = random_tensor({8, 4}, 7, -1.0f, 1.0f, false);
    const Tensor bias = random_tensor({8}, 8, -1.0f, 1.0f, false);
    const PackedMatrix q(w, Precision::int8);
    for (int64_t rows : {3, 6}) {  // seqgrad's own pairs, then oneDNN's kernels
        INFO(rows << " rows");
        Tensor x = random_tensor({rows, 4}, 9, -1.0f, 1.0f, false);
        for (int64_t k = 0; k < 4; ++k) x.data()[k] = 0.0f;  // row 0: zeros
        x.data()[4 + 2] = std::nanf("");                     // row 1: a NaN
        const Tensor y = linear_packed(x, q, bias);
        for (int64_t r = 0; r < 8; ++r) {
            REQUIRE(y.data()[r] == bias.data()[r]);
            REQUIRE(std::isnan(y.data()[8 + r]));
            for (int64_t i = 2; i < rows; ++i) REQUIRE(std::isfinite(y.data()[i * 8 + r]));
        }
    }
    const Tensor x = random_tensor({3, 4}, 9, -1.0f, 1.0f, false);
    Tensor bad = w.clone();
    bad.data()[5] = INFINITY;
    REQUIRE(error_of([&] { PackedMatrix m(bad, Precision::int8); }).find("row 1") != std::string::npos);
    REQUIRE(error_of([&] { PackedMatrix m(Tensor::ones({4}), Precision::int8); }).find("2-D") != std::string::npos);
    REQUIRE(error_of([&] { linear_packed(Tensor::ones({2, 5}), q, bias); }).find("in_features 4") != std::string::npos);
    REQUIRE(error_of([&] { linear_packed(x, q, Tensor::ones({7})); }).find("bias") != std::string::npos);
    const Tensor empty = linear_packed(Tensor::zeros({0, 4}), q, bias);
    REQUIRE(empty.shape() == Shape{0, 8});
}

// Each input row is quantized by its largest magnitude: found at every level's vector loop (four
// maxima in turn over 64 or 32 values, then a remainder), wherever in the row it lies, of either
// sign; an infinity or a NaN anywhere makes the row's outputs NaN.
TEST_CASE("int8 inputs quantize by their largest magnitude wherever it lies", "[packed][int8]") {
    if (!have_onednn()) return;
    NoGradGuard no_grad;
    for (const int64_t in : {7, 64, 100, 200}) {
        const Tensor w = random_tensor({24, in}, 81, -0.5f, 0.5f, false);
        const PackedMatrix q(w, Precision::int8);
        const int64_t rows = 2 * in + 2;  // the peak at each position, of each sign; then two bad rows
        Tensor x = random_tensor({rows, in}, 82, -1.0f, 1.0f, false);
        for (int64_t i = 0; i < 2 * in; ++i) x.data()[i * in + i / 2] = i % 2 == 0 ? 9.0f : -9.0f;
        x.data()[2 * in * in + in / 2] = INFINITY;
        x.data()[(2 * in + 1) * in + in - 1] = std::nanf("");
        const Tensor y = linear_packed(x, q, Tensor());
        INFO(in << " inputs");
        const Tensor good = slice(y, 0, 0, 2 * in), expected = reference(slice(x, 0, 0, 2 * in), w, Tensor());
        require_close(good, expected, 1e-6f);
        for (int64_t r = 0; r < 24; ++r) {
            REQUIRE(std::isnan(y.data()[2 * in * 24 + r]));
            REQUIRE(std::isnan(y.data()[(2 * in + 1) * 24 + r]));
        }
    }
}

TEST_CASE("packed products have no gradient so inputs that require grad are refused", "[packed][errors]") {
    if (!have_onednn()) return;
    const PackedMatrix q(random_tensor({3, 2}, 1, -1.0f, 1.0f, false), Precision::int8);
    const Tensor x = random_tensor({2, 2}, 2);  // requires grad
    REQUIRE(error_of([&] { linear_packed(x, q, Tensor()); }).find("NoGradGuard") != std::string::npos);
    NoGradGuard no_grad;
    REQUIRE(linear_packed(x, q, Tensor()).shape() == Shape{2, 3});
}

TEST_CASE("a packed Transformer uses its packed weights without grad and float32 with grad", "[packed][models]") {
    if (!have_onednn()) return;
    IntTensor src, tgt_in;
    auto model = fixture_model("transformer_post_relu.safetensors", src, tgt_in);
    Tensor exact;
    {
        NoGradGuard no_grad;
        exact = model->logits(src, tgt_in);
    }
    model->pack_weights();
    if (packing_available(Precision::float32)) {
        REQUIRE(model->weights_packed());
        REQUIRE(model->packed_precision() == Precision::float32);
        NoGradGuard no_grad;
        REQUIRE(max_abs_diff(model->logits(src, tgt_in), exact) < 1e-5f);
    } else {  // no float32 kernel that pays on this CPU: sgemm, the same logits
        REQUIRE_FALSE(model->weights_packed());
        NoGradGuard no_grad;
        REQUIRE(max_abs_diff(model->logits(src, tgt_in), exact) == 0);
    }
    model->pack_weights(Precision::int8);
    REQUIRE(model->packed_precision() == Precision::int8);
    Tensor int8_logits;
    {
        NoGradGuard no_grad;
        int8_logits = model->logits(src, tgt_in);
    }
    // Close (the logits of the fixture's random weights span a few units), but not the same.
    REQUIRE(max_abs_diff(int8_logits, exact) > 0);
    REQUIRE(max_abs_diff(int8_logits, exact) < 0.1f);
    // With grad on (training), float32 weights: the same logits as before packing.
    REQUIRE(max_abs_diff(model->logits(src, tgt_in), exact) == 0);

    // load_state_dict packs the new weights: the same as packing a model loaded with them.
    std::map<std::string, Tensor> scaled;
    for (const auto& [name, t] : model->state_dict()) scaled.emplace(name, mul(t, 1.5f));
    model->load_state_dict(scaled);
    IntTensor src2, tgt2;
    auto fresh = fixture_model("transformer_post_relu.safetensors", src2, tgt2);
    fresh->load_state_dict(scaled);
    fresh->pack_weights(Precision::int8);
    {
        NoGradGuard no_grad;
        REQUIRE(max_abs_diff(model->logits(src, tgt_in), fresh->logits(src, tgt_in)) == 0);
    }

    // Training mode drops the packed weights: float32 again, even without grad.
    model->train();
    REQUIRE_FALSE(model->weights_packed());
    model->eval();
    NoGradGuard no_grad;
    fresh->unpack_weights();
    REQUIRE(max_abs_diff(model->logits(src, tgt_in), fresh->logits(src, tgt_in)) == 0);
}

TEST_CASE("a packed GPT gives its float32 logits, and nearly them in int8 and bf16", "[packed][models][gpt]") {
    if (!have_onednn()) return;
    for (const char* fixture : {"gpt_learned.safetensors", "gpt_rope_nobias.safetensors"}) {
        INFO(fixture);
        IntTensor src, window;
        auto model = fixture_model(fixture, src, window);
        const IntTensor tokens = window.slice_last(0, window.size(1) - 1);  // the model reads all but the last
        NoGradGuard no_grad;
        const Tensor exact = model->logits(src, tokens);
        model->pack_weights(Precision::float32);
        REQUIRE(model->weights_packed());  // every CPU: oneDNN's panels, or seqgrad's own
        REQUIRE(max_abs_diff(model->logits(src, tokens), exact) < 1e-5f);
        // A row at a time, as sampling reads it: the products of one row go through rows_by_hand or
        // panel_rows, not the many-row kernel the whole batch takes.
        const IntTensor one =
            IntTensor::from_vector(std::vector<int64_t>(tokens.data(), tokens.data() + tokens.size(1)),
                                   {1, tokens.size(1)});
        const Tensor row_exact = slice(exact, 0, 0, 1);
        REQUIRE(max_abs_diff(model->logits(IntTensor::zeros({1, 0}), one), row_exact) < 1e-5f);
        model->pack_weights(Precision::int8);
        const float int8_error = max_abs_diff(model->logits(src, tokens), exact);
        CHECK(int8_error > 0);
        CHECK(int8_error < 0.1f);
        if (packing_available(Precision::bf16)) {
            model->pack_weights(Precision::bf16);
            const float bf16_error = max_abs_diff(model->logits(src, tokens), exact);
            CHECK(bf16_error > 0);
            CHECK(bf16_error < 0.1f);
        } else {
            CHECK_THAT(error_of([&] { model->pack_weights(Precision::bf16); }), Catch::Contains("bf16"));
        }
    }
}
