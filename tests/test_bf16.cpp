// bfloat16 (core/precision.h): the rounding, the matrix products of "precision": "bf16" against
// the same products done here in double on the rounded operands (so a wrong rounding, transpose,
// split or accumulation fails), the parity models' gradients within the stated bound of PyTorch's
// float32 ones, training in bf16, packed bf16 weights, and the refusals where bfloat16 is missing.
// The numerical cases need a CPU with AVX512_BF16 or AMX and say loudly when they skip.
#include "helpers.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

#include "seqgrad/models/parity.h"
#include "seqgrad/training.h"

using namespace seqgrad;
using namespace seqgrad::testing;
namespace fs = std::filesystem;

namespace {

float bits_to_float(uint32_t u) {
    float x;
    std::memcpy(&x, &u, sizeof x);
    return x;
}

// Whether this machine runs bfloat16 products; if not, the calling case skips (before its first
// check) and returns.
bool have_bf16() {
    if (bf16_available()) return true;
    skip_test("no bfloat16 products here (" + bf16_unavailable_reason() + ")");
    return false;
}

// x with every element rounded to bfloat16.
Tensor rounded(const Tensor& x) {
    std::vector<float> v = x.to_vector();
    for (float& e : v) e = from_bf16(to_bf16(e));
    return Tensor::from_vector(v, x.shape());
}

// op(a) op(b) in double, a [m, k] (or [k, m] when ta), b [k, n] (or [n, k] when tb).
std::vector<double> product(const Tensor& a, const Tensor& b, bool ta, bool tb, int64_t m, int64_t n, int64_t k) {
    std::vector<double> c(static_cast<size_t>(m * n), 0.0);
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
            double sum = 0;
            for (int64_t p = 0; p < k; ++p)
                sum += static_cast<double>(a.data()[ta ? p * m + i : i * k + p]) *
                       static_cast<double>(b.data()[tb ? j * k + p : p * n + j]);
            c[static_cast<size_t>(i * n + j)] = sum;
        }
    return c;
}

// The largest |actual - expected| relative to the largest |expected|.
double worst_relative(const Tensor& actual, const std::vector<double>& expected) {
    REQUIRE(static_cast<size_t>(actual.numel()) == expected.size());
    double scale = 0, worst = 0;
    for (double e : expected) scale = std::max(scale, std::fabs(e));
    for (size_t i = 0; i < expected.size(); ++i)
        worst = std::max(worst, std::fabs(static_cast<double>(actual.data()[i]) - expected[i]));
    return worst / std::max(scale, 1e-30);
}

struct Bf16Disabled {
    Bf16Disabled() { set_bf16_enabled(false); }
    ~Bf16Disabled() { set_bf16_enabled(true); }
    Bf16Disabled(const Bf16Disabled&) = delete;
    Bf16Disabled& operator=(const Bf16Disabled&) = delete;
};

training::TrainingOptions reverse_task() {
    training::TrainingOptions o = reverse_words(2000, 50, 32);
    o.warmup_steps = 50;
    o.lr = 0.5;
    return o;
}

models::ModelConfig tiny_model() { return small_transformer(32, 2, 1, 64, 16); }

}  // namespace

TEST_CASE("to_bf16 rounds to the nearest bfloat16, ties to even, and keeps NaN and infinities", "[bf16]") {
    CHECK(to_bf16(1.0f) == 0x3f80);
    CHECK(to_bf16(-2.0f) == 0xc000);
    CHECK(to_bf16(-0.0f) == 0x8000);
    // Between 1 (0x3f80, even) and the next bfloat16 1 + 2^-7 (0x3f81): halfway goes to the even one,
    // anything above halfway up.
    CHECK(to_bf16(bits_to_float(0x3f808000u)) == 0x3f80);
    CHECK(to_bf16(bits_to_float(0x3f808001u)) == 0x3f81);
    CHECK(to_bf16(bits_to_float(0x3f807fffu)) == 0x3f80);
    // Between 0x3f81 (odd) and 0x3f82: halfway goes up, to the even one.
    CHECK(to_bf16(bits_to_float(0x3f818000u)) == 0x3f82);
    CHECK(to_bf16(std::numeric_limits<float>::infinity()) == 0x7f80);
    CHECK(to_bf16(-std::numeric_limits<float>::infinity()) == 0xff80);
    CHECK(to_bf16(std::numeric_limits<float>::max()) == 0x7f80);  // past bfloat16's largest
    CHECK(std::isnan(from_bf16(to_bf16(std::nanf("")))));
    CHECK(std::isnan(from_bf16(to_bf16(bits_to_float(0x7f800001u)))));  // a NaN whose payload would carry
    CHECK(from_bf16(0x3f81) == 1.0f + 1.0f / 128);
    for (float x : {0.1f, -3.3f, 1e-20f, 6.5e4f})
        CHECK(std::fabs(from_bf16(to_bf16(x)) - x) <= std::fabs(x) * (1.0f / 256));
}

TEST_CASE("precision names parse, and the precision scope refuses int8 and restores the previous one", "[bf16]") {
    CHECK(parse_precision("bf16", "x") == Precision::bf16);
    CHECK(parse_precision("float32", "x") == Precision::float32);
    CHECK(error_of([] { parse_precision("fp16", "--precision"); }).find("fp16") != std::string::npos);
    CHECK(error_of([] { MatmulPrecisionScope s(Precision::int8); }).find("int8") != std::string::npos);
    CHECK(matmul_precision() == Precision::float32);
}

TEST_CASE("bf16 precision scopes nest and restore the previous precision", "[bf16]") {
    if (!have_bf16()) return;
    {
        const MatmulPrecisionScope outer(Precision::bf16);
        CHECK(matmul_precision() == Precision::bf16);
        {
            const MatmulPrecisionScope inner(Precision::float32);
            CHECK(matmul_precision() == Precision::float32);
        }
        CHECK(matmul_precision() == Precision::bf16);
    }
    CHECK(matmul_precision() == Precision::float32);
}

TEST_CASE("bf16 products equal the products of the rounded operands summed in float32", "[bf16]") {
    if (!have_bf16()) return;
    INFO("oneDNN kernel: " << bf16_kernel_name());
    const auto shapes = std::vector<std::array<int64_t, 3>>{{3, 5, 7}, {1, 40, 33}, {150, 130, 140}, {17, 300, 260}};
    for (const auto& [m, n, k] : shapes)
        for (bool ta : {false, true})
            for (bool tb : {false, true}) {
                INFO("m " << m << " n " << n << " k " << k << " ta " << ta << " tb " << tb);
                const Tensor a = random_tensor(ta ? Shape{k, m} : Shape{m, k}, 11, -1, 1, false);
                const Tensor b = random_tensor(tb ? Shape{n, k} : Shape{k, n}, 12, -1, 1, false);
                const std::vector<double> exact = product(rounded(a), rounded(b), ta, tb, m, n, k);
                const std::vector<double> unrounded = product(a, b, ta, tb, m, n, k);
                Tensor c;
                {
                    const MatmulPrecisionScope bf16(Precision::bf16);
                    c = matmul(a, b, ta, tb);
                }
                // Float32 sums of k products: a few float32 roundings of the scale, never bfloat16's.
                CHECK(worst_relative(c, exact) < 1e-5);
                if (k > 8) CHECK(worst_relative(c, unrounded) > 1e-4);          // the operands were rounded
                CHECK(worst_relative(matmul(a, b, ta, tb), unrounded) < 1e-5);  // and float32 is back after
            }
}

TEST_CASE("bf16 linear layers add the bias, and their gradients pass gradcheck's bf16 analogue", "[bf16]") {
    if (!have_bf16()) return;
    const int64_t rows = 70, in = 48, out = 36;  // large enough to be split over the threads
    const Tensor x = random_tensor({rows, in}, 21);
    const Tensor w = random_tensor({out, in}, 22);
    const Tensor bias = random_tensor({out}, 23);
    const Tensor g = random_tensor({rows, out}, 24, -1, 1, false);
    Tensor y;
    {
        const MatmulPrecisionScope bf16(Precision::bf16);
        y = linear(x, w, bias);
        sum(mul(y, g)).backward();
    }
    // y = x w^T + b on the rounded operands; dx = g w, dw = g^T x (the products accumulate in float32).
    std::vector<double> expect = product(rounded(x), rounded(w), false, true, rows, out, in);
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t r = 0; r < out; ++r) expect[static_cast<size_t>(i * out + r)] += bias.data()[r];
    CHECK(worst_relative(y, expect) < 1e-5);
    CHECK(worst_relative(x.grad(), product(rounded(g), rounded(w), false, false, rows, in, out)) < 1e-5);
    CHECK(worst_relative(w.grad(), product(rounded(g), rounded(x), true, false, out, in, rows)) < 1e-5);
}

// The median relative L2 error of a fixture's gradients.
double median_gradient_error(const models::FixtureResult& result) {
    std::vector<double> errors;
    for (const models::TensorCheck& c : result.checks)
        if (c.name.rfind("expect.grad.", 0) == 0) errors.push_back(c.rel_l2_error);
    REQUIRE(!errors.empty());
    std::sort(errors.begin(), errors.end());
    return errors[errors.size() / 2];
}

TEST_CASE("the parity models' gradients in bf16 stay within the stated bounds of PyTorch's float32", "[bf16][parity]") {
    if (!have_bf16()) return;
    // docs/parity.md: every tensor within 0.25 relative L2 (or float noise), the median gradient
    // of each fixture within 3%.
    int compared = 0;
    for (const auto& entry : fs::directory_iterator(SEQGRAD_FIXTURES_DIR)) {
        if (entry.path().extension() != ".safetensors") continue;
        const std::string path = entry.path().string();
        const models::FixtureResult result = models::check_fixture(path, models::bf16_tolerance(), Precision::bf16);
        for (const models::TensorCheck& c : result.checks) {
            INFO(path << ": " << c.name << " relative L2 error " << c.rel_l2_error);
            CHECK(c.ok);
            ++compared;
        }
        const double median_bf16 = median_gradient_error(result);
        // The same fixture in float32 is far closer: bf16 did change the products.
        const double median_float32 =
            median_gradient_error(models::check_fixture(path, models::Tolerance{}, Precision::float32));
        INFO(path << ": median relative L2 error of the gradients: float32 " << median_float32 << ", bf16 "
                  << median_bf16);
        CHECK(median_bf16 <= 3e-2);
        CHECK(median_bf16 > 4 * median_float32);
    }
    CHECK(compared > 1000);
}

TEST_CASE("a Transformer trained in bf16 learns as the float32 one does", "[bf16][training]") {
    if (!have_bf16()) return;
    static const TempDir root("bf16_training");
    training::TrainingOptions o = reverse_task();
    o.max_steps = 400;
    double final_loss[2] = {0, 0};
    for (int i = 0; i < 2; ++i) {
        o.precision = i == 0 ? "float32" : "bf16";
        std::vector<double> losses;
        training::train(tiny_model(), o, (root.path / o.precision).string(), [&](const training::TrainingEvent& e) {
            if (e.kind == training::TrainingEvent::Kind::step) losses.push_back(e.loss);
        });
        REQUIRE(losses.size() == 400);
        double tail = 0;
        for (size_t s = 350; s < 400; ++s) tail += losses[s] / 50;
        final_loss[i] = tail;
        CHECK(tail < 0.5 * losses.front());  // it learned
    }
    INFO("mean loss of the last 50 steps: float32 " << final_loss[0] << ", bf16 " << final_loss[1]);
    CHECK(final_loss[0] != final_loss[1]);  // the products did run in bf16
    CHECK(std::fabs(final_loss[1] - final_loss[0]) < 0.1 * final_loss[0] + 0.02);
    // The checkpoint records the precision, so that a resumed run keeps it.
    CHECK(training::load_training_state((root.path / "bf16" / "training.safetensors").string()).options.precision ==
          "bf16");
}

TEST_CASE("without bfloat16 instructions, bf16 training, packing and checking are refused, nothing written",
          "[bf16][errors]") {
    const Bf16Disabled off;
    CHECK_FALSE(bf16_available());
    CHECK_FALSE(packing_available(Precision::bf16));
    static const TempDir root("bf16_refused");
    training::TrainingOptions o = reverse_task();
    o.max_steps = 5;
    o.precision = "bf16";
    const std::string out = (root.path / "run").string();
    const std::string message = error_of([&] { training::train(tiny_model(), o, out); });
    CHECK(message.find("bf16") != std::string::npos);
    CHECK(message.find("float32") != std::string::npos);
    CHECK_FALSE(fs::exists(out));
    CHECK(error_of([] { MatmulPrecisionScope s(Precision::bf16); }).find("turned off") != std::string::npos);
    models::ModelConfig config = tiny_model();
    config.src_vocab = config.tgt_vocab = 10;
    Generator gen(1);
    auto model = models::make_model(config, gen);
    model->train(false);
    CHECK(error_of([&] { model->pack_weights(Precision::bf16); }).find("bf16") != std::string::npos);
    o.precision = "fp16";
    CHECK(error_of([&] { o.validate(); }).find("precision") != std::string::npos);
}

TEST_CASE("bf16 packed weights give the rounded operands' products, with the bias", "[bf16][packed]") {
    if (!have_bf16()) return;
    REQUIRE(packing_available(Precision::bf16));
    INFO("packed bf16 kernel: " << packed_kernel_name(Precision::bf16));
    const NoGradGuard no_grad;
    for (int64_t rows : {1, 3, 64, 100}) {
        const int64_t in = 96, out = 80;
        const Tensor x = random_tensor({rows, in}, 31, -1, 1, false);
        const Tensor w = random_tensor({out, in}, 32, -1, 1, false);
        const Tensor bias = random_tensor({out}, 33, -1, 1, false);
        const Tensor y = linear_packed(x, PackedMatrix(w, Precision::bf16), bias);
        std::vector<double> expect = product(rounded(x), rounded(w), false, true, rows, out, in);
        for (int64_t i = 0; i < rows; ++i)
            for (int64_t r = 0; r < out; ++r) expect[static_cast<size_t>(i * out + r)] += bias.data()[r];
        INFO("rows " << rows);
        CHECK(worst_relative(y, expect) < 1e-5);
    }
}
