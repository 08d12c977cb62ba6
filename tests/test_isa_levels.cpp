// seqgrad's kernels at each instruction-set level (core/include/seqgrad/core/cpu.h): every kernel
// family computed at every level this process may run agrees with the portable level's result, and
// the level is chosen, capped and refused as cpu.h says.
//
// The tolerance: |level - portable| <= 1e-6 + 2e-5 |portable| per element. The levels differ only
// in rounding: fused multiply-adds above the portable level, and sums added in another order
// (sixteen lanes at a time against four); over these shapes the largest relative difference seen
// is about 1e-6, so the bound leaves room for rounding and none for a wrong element, lane or tail.
#include "helpers.h"

#include <cstdlib>
#include <functional>
#include <limits>

#include "../core/ops/small_product.h"
#include "seqgrad/nn/optim.h"

using namespace seqgrad;
using namespace seqgrad::testing;

namespace {

constexpr float kAbsolute = 1e-6f;
constexpr float kRelative = 2e-5f;

// Sets the level for its lifetime, then puts back the highest.
struct LevelScope {
    explicit LevelScope(IsaLevel level) { set_isa_level(level); }
    ~LevelScope() { set_isa_level(max_isa_level()); }
    LevelScope(const LevelScope&) = delete;
    LevelScope& operator=(const LevelScope&) = delete;
};

std::vector<IsaLevel> levels_above_portable() {
    std::vector<IsaLevel> out;
    for (IsaLevel l : {IsaLevel::avx2, IsaLevel::avx512})
        if (static_cast<int>(l) <= static_cast<int>(max_isa_level())) out.push_back(l);
    return out;
}

// The outputs of `compute` (fresh inputs each call) at every level agree with the portable level's.
// Skips (before any check) where the portable level is the only one.
void agree_across_levels(const std::function<std::vector<Tensor>()>& compute) {
    const std::vector<IsaLevel> levels = levels_above_portable();
    if (levels.empty()) {
        skip_test("this process runs the portable level only: there is no other level to compare");
        return;
    }
    std::vector<Tensor> portable;
    {
        const LevelScope scope(IsaLevel::portable);
        portable = compute();
    }
    for (IsaLevel level : levels) {
        const LevelScope scope(level);
        const std::vector<Tensor> got = compute();
        REQUIRE(got.size() == portable.size());
        for (size_t i = 0; i < got.size(); ++i) {
            INFO("level " << isa_level_name(level) << ", output " << i << " of shape " << got[i].shape());
            REQUIRE(got[i].shape() == portable[i].shape());
            float worst = 0;
            int64_t at = -1;
            for (int64_t j = 0; j < got[i].numel(); ++j) {
                const float a = got[i].data()[j], b = portable[i].data()[j];
                const float excess = std::fabs(a - b) - (kAbsolute + kRelative * std::fabs(b));
                if (!(excess <= worst)) {  // NaN counts as a failure
                    worst = std::isnan(excess) ? std::numeric_limits<float>::infinity() : excess;
                    at = j;
                }
            }
            INFO("element " << at << ": " << (at >= 0 ? got[i].data()[at] : 0.0f) << " against portable "
                            << (at >= 0 ? portable[i].data()[at] : 0.0f));
            CHECK(at == -1);
        }
    }
}

// The input's gradient (and the output) of f at x, the upstream gradient fixed.
std::vector<Tensor> with_gradient(const Tensor& x, const std::function<Tensor(const Tensor&)>& f) {
    Tensor y = f(x);
    (y * random_tensor(y.shape(), 99, -1, 1, false)).sum().backward();
    return {y.detach(), x.grad()};
}

}  // namespace

TEST_CASE("the kernel level is the CPU's, capped, chosen and refused as cpu.h says", "[cpu]") {
    const IsaLevel top = max_isa_level();
    CHECK(static_cast<int>(top) <= static_cast<int>(cpu_isa_level()));
    CHECK(isa_level() == top);
    const char* cap = std::getenv("SEQGRAD_MAX_CPU_ISA");
    if (cap != nullptr && *cap != '\0') CHECK(std::string(isa_level_name(top)) == cap);
    else CHECK(top == cpu_isa_level());
    CHECK_THAT(isa_description(), Catch::StartsWith(isa_level_name(top)));
    {
        const LevelScope scope(IsaLevel::portable);
        CHECK(isa_level() == IsaLevel::portable);
        CHECK_THAT(isa_description(), Catch::StartsWith("portable"));
    }
    CHECK(isa_level() == top);
    if (top != IsaLevel::avx512) {
        const IsaLevel above = static_cast<IsaLevel>(static_cast<int>(top) + 1);
        CHECK_THAT(error_of([&] { set_isa_level(above); }), Catch::Contains("above this process's highest"));
        CHECK(isa_level() == top);
    }
}

TEST_CASE("activations and their gradients agree at every kernel level", "[cpu][ops]") {
    // 1,003 elements: whole vectors of every width and a tail.
    agree_across_levels([] {
        std::vector<Tensor> out;
        for (const auto& f : std::vector<std::function<Tensor(const Tensor&)>>{
                 [](const Tensor& x) { return gelu(x); }, [](const Tensor& x) { return tanh(x); },
                 [](const Tensor& x) { return sigmoid(x); }, [](const Tensor& x) { return exp(x); },
                 [](const Tensor& x) { return relu(x); },
                 [](const Tensor& x) {
            return x * random_tensor({17, 59}, 5, -2, 2, false) + 0.5f;
                 }}) {
            for (const Tensor& t : with_gradient(random_tensor({17, 59}, 4, -6, 6), f)) out.push_back(t);
        }
        // gelu without a gradient: its value alone, in a loop of its own
        out.push_back(gelu(random_tensor({17, 59}, 8, -6, 6, false)));
        // broadcasting: a row added to every row
        const Tensor a = random_tensor({17, 59}, 6), b = random_tensor({59}, 7);
        Tensor y = a * b + b;
        y.sum().backward();
        out.push_back(y.detach());
        out.push_back(a.grad());
        out.push_back(b.grad());
        return out;
    });
}

TEST_CASE("softmax, log_softmax, the loss and top-k agree at every kernel level", "[cpu][ops]") {
    agree_across_levels([] {
        std::vector<Tensor> out;
        for (int64_t n : {7, 33, 1000}) {  // a tail alone, one vector and a tail, many blocks
            for (const Tensor& t :
                 with_gradient(random_tensor({5, n}, 10 + n, -8, 8), [](const Tensor& x) { return softmax(x); }))
                out.push_back(t);
            for (const Tensor& t :
                 with_gradient(random_tensor({5, n}, 20 + n, -8, 8), [](const Tensor& x) { return log_softmax(x); }))
                out.push_back(t);
            // along an axis that is not the last
            for (const Tensor& t :
                 with_gradient(random_tensor({3, n, 2}, 30 + n, -8, 8), [](const Tensor& x) { return softmax(x, 1); }))
                out.push_back(t);
            const Tensor logits = random_tensor({6, n}, 40 + n, -8, 8);
            std::vector<int64_t> targets;
            for (int64_t i = 0; i < 6; ++i) targets.push_back(i == 2 ? -100 : (i * 5) % n);
            Tensor loss = cross_entropy(logits, IntTensor::from_vector(targets, {6}), -100, 0.1f);
            loss.backward();
            out.push_back(loss.detach());
            out.push_back(logits.grad());
            // Rows of -50 with one 50: a maximum taken from the wrong lanes would overflow the sums.
            Tensor peaks = Tensor::full({4, n}, -50.0f);
            const int64_t at[4] = {std::min<int64_t>(n - 1, 8), std::min<int64_t>(n - 1, 31), n - 1,
                                   std::min<int64_t>(n - 1, 16 * 9 + 3)};
            for (int64_t i = 0; i < 4; ++i) peaks.data()[i * n + at[i]] = 50.0f;
            out.push_back(softmax(peaks));
            for (const Tensor& x : {random_tensor({4, n}, 50 + n, -8, 8, false), peaks}) {
                const TopK top = log_softmax_top_k(x, 3);
                out.push_back(top.values);
                std::vector<float> indices;
                for (int64_t i = 0; i < top.indices.numel(); ++i)
                    indices.push_back(static_cast<float>(top.indices.data()[i]));
                out.push_back(Tensor::from_vector(indices, top.indices.shape()));
            }
        }
        return out;
    });
}

TEST_CASE("layer norm and its three gradients agree at every kernel level", "[cpu][ops]") {
    agree_across_levels([] {
        std::vector<Tensor> out;
        for (int64_t d : {5, 64, 387}) {
            const Tensor x = random_tensor({9, d}, 60 + d, -3, 3), gamma = random_tensor({d}, 61 + d, 0.5f, 1.5f),
                         beta = random_tensor({d}, 62 + d);
            Tensor y = layer_norm(x, gamma, beta, 1e-5f);
            (y * random_tensor(y.shape(), 63, -1, 1, false)).sum().backward();
            for (const Tensor& t : {y.detach(), x.grad(), gamma.grad(), beta.grad()}) out.push_back(t);
        }
        return out;
    });
}

TEST_CASE("attention, dropout and the LSTM agree at every kernel level", "[cpu][ops]") {
    agree_across_levels([] {
        std::vector<Tensor> out;
        // training's attention with a causal mask and dropout, and its gradients
        const Tensor q = random_tensor({2, 37, 32}, 70), k = random_tensor({2, 37, 32}, 71),
                     v = random_tensor({2, 37, 32}, 72);
        std::vector<int64_t> causal;
        for (int64_t i = 0; i < 37; ++i)
            for (int64_t j = 0; j < 37; ++j) causal.push_back(j <= i);
        Generator gen(73);
        Tensor context = attention(q, k, v, 4, IntTensor::from_vector(causal, {1, 1, 37, 37}), 0.1f, true, &gen);
        (context * random_tensor(context.shape(), 74, -1, 1, false)).sum().backward();
        for (const Tensor& t : {context.detach(), q.grad(), k.grad(), v.grad()}) out.push_back(t);
        // without gradients, a padding mask over keys (the second text's last 4, 21 and all 37
        // keys padded across its three pairs of batch rows: rows that attend to nothing), and a mask
        // broadcast along the keys (its entries 0 apart: every query row attends to all or none)
        std::vector<int64_t> padding;
        for (int64_t b = 0; b < 6; ++b)
            for (int64_t j = 0; j < 37; ++j)
                padding.push_back(b % 2 == 0 || j < std::vector<int64_t>{33, 16, 0}[b / 2]);
        std::vector<int64_t> rows_kept;
        for (int64_t i = 0; i < 2 * 4 * 37; ++i) rows_kept.push_back(i % 5 != 3);
        {
            NoGradGuard no_grad;
            const Tensor q6 = random_tensor({6, 37, 32}, 91), k6 = random_tensor({6, 37, 32}, 92),
                         v6 = random_tensor({6, 37, 32}, 93);
            Tensor weights;
            out.push_back(attention(q6, k6, v6, 4, IntTensor::from_vector(padding, {6, 1, 1, 37}), 0, false, nullptr,
                                    &weights));
            out.push_back(weights);
            out.push_back(attention(q, k, v, 4, IntTensor::from_vector(rows_kept, {2, 4, 37, 1}), 0, false));
        }
        // decoding's attention over gathered rows: heads of 16 (the avx512 and avx2 loops) and of 6
        for (int64_t head_size : {16, 6}) {
            const int64_t heads = 3, width = heads * head_size, length = 11;
            const Tensor cq = random_tensor({4, 1, width}, 75, -1, 1, false);
            const Tensor ck = random_tensor({2, 12, width}, 76, -1, 1, false);
            const Tensor cv = random_tensor({2, 12, width}, 77, -1, 1, false);
            std::vector<int64_t> rows;
            for (int64_t i = 0; i < 4; ++i)
                for (int64_t j = 0; j < 12; ++j) rows.push_back((i + j) % 2);
            Tensor weights;
            out.push_back(gathered_attention(cq, ck, cv, IntTensor::from_vector(rows, {4, 12}), length, heads,
                                             IntTensor(), &weights));
            out.push_back(weights);
            // and with a mask of each row's own keys (the first 1 to 4 masked)
            std::vector<int64_t> keys_kept;
            for (int64_t i = 0; i < 4; ++i)
                for (int64_t j = 0; j < length; ++j) keys_kept.push_back(j > i);
            out.push_back(gathered_attention(cq, ck, cv, IntTensor::from_vector(rows, {4, 12}), length, heads,
                                             IntTensor::from_vector(keys_kept, {4, 1, 1, length}), &weights));
            out.push_back(weights);
        }
        // dropout: the same mask at every level
        Generator dgen(78);
        const Tensor x = random_tensor({1001}, 79);
        Tensor dropped = dropout(x, 0.3f, true, dgen);
        dropped.sum().backward();
        out.push_back(dropped.detach());
        out.push_back(x.grad());
        // an LSTM cell and a whole padded sequence
        const int64_t hidden = 19;
        const Tensor in = random_tensor({3, 7}, 80), h = random_tensor({3, hidden}, 81),
                     c = random_tensor({3, hidden}, 82);
        const Tensor w_ih = random_tensor({4 * hidden, 7}, 83), w_hh = random_tensor({4 * hidden, hidden}, 84),
                     b_ih = random_tensor({4 * hidden}, 85), b_hh = random_tensor({4 * hidden}, 86);
        const LstmState next = lstm_cell(in, {h, c}, w_ih, w_hh, b_ih, b_hh);
        (next.h.sum() + next.c.sum() * 0.5f).backward();
        for (const Tensor& t : {next.h.detach(), next.c.detach(), in.grad(), w_hh.grad(), b_ih.grad()})
            out.push_back(t);
        const Tensor gates = random_tensor({3, 5, 4 * hidden}, 87), h0 = random_tensor({3, hidden}, 88),
                     c0 = random_tensor({3, hidden}, 89), w = random_tensor({4 * hidden, hidden}, 90, -0.3f, 0.3f);
        const LstmSequence seq = lstm_sequence(gates, h0, c0, w, {5, 3, 4}, true);
        (seq.outputs.sum() + seq.h.sum()).backward();
        for (const Tensor& t : {seq.outputs.detach(), gates.grad(), w.grad()}) out.push_back(t);
        return out;
    });
}

TEST_CASE("Adam and AdamW steps agree at every kernel level", "[cpu][optim]") {
    agree_across_levels([] {
        std::vector<Tensor> out;
        for (bool decoupled : {false, true}) {
            const Tensor p = random_tensor({1003}, 91), q = random_tensor({8, 9}, 92);
            nn::AdamOptions o;
            o.lr = 1e-2;
            o.weight_decay = 0.1;
            std::unique_ptr<nn::Optimizer> adam;
            if (decoupled) adam = std::make_unique<nn::AdamW>(nn::NamedTensors{{"p", p}, {"q", q}}, o);
            else adam = std::make_unique<nn::Adam>(nn::NamedTensors{{"p", p}, {"q", q}}, o);
            for (int step = 0; step < 3; ++step) {
                adam->zero_grad();
                (p * p * 0.5f).sum().backward();
                (q * 2.0f).sum().backward();
                adam->step();
            }
            out.push_back(p.detach());
            out.push_back(q.detach());
        }
        return out;
    });
}

#if SEQGRAD_HAVE_ISA_LEVELS
TEST_CASE("attention's small products in vector registers agree with sums in double at every level", "[cpu][ops]") {
    // Every tile and tail of small_product.h: rows 1 to 14 (whole tiles of 6 and 12 and each
    // remainder), columns 1 to 40 (whole panels of 16 and 32, and every partial vector), A as stored
    // and transposed, written and accumulated. Operands sit in wider rows whose spare columns hold
    // NaN, so that a read past a row's end spoils the result; C's spare columns and the row below
    // it hold a marker that must come out untouched. Each element is within float32's rounding of the sum in double:
    // |c - exact| <= k 2^-23 sum_p |a b| (plus C's own value when accumulating).
    const std::vector<IsaLevel> levels = levels_above_portable();
    if (levels.empty()) {
        skip_test("this process runs the portable level only: there is no other level to compare");
        return;
    }
    const float nan = std::numeric_limits<float>::quiet_NaN(), marker = 1234.5f;
    Generator gen(91);
    for (IsaLevel level : levels)
        for (bool ta : {false, true})
            for (bool accumulate : {false, true})
                for (int64_t m = 1; m <= 14; ++m)
                    for (int64_t n = 1; n <= 40; ++n)
                        for (int64_t k : {1, 7, 33}) {
                            const int64_t lda = (ta ? m : k) + 3, ldb = n + 5, ldc = n + 2;
                            std::vector<float> a(static_cast<size_t>((ta ? k : m) * lda), nan),
                                b(static_cast<size_t>(k * ldb), nan), c(static_cast<size_t>((m + 1) * ldc), marker);
                            for (int64_t r = 0; r < (ta ? k : m); ++r)
                                for (int64_t p = 0; p < (ta ? m : k); ++p) a[r * lda + p] = gen.uniform(-1, 1);
                            for (int64_t p = 0; p < k; ++p)
                                for (int64_t j = 0; j < n; ++j) b[p * ldb + j] = gen.uniform(-1, 1);
                            for (int64_t i = 0; i < m; ++i)
                                for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = gen.uniform(-1, 1);
                            const std::vector<float> before = c;
                            if (level == IsaLevel::avx512)
                                detail::small_product<IsaLevel::avx512>(ta, m, n, k, a.data(), lda, b.data(), ldb,
                                                                        c.data(), ldc, accumulate);
                            else
                                detail::small_product<IsaLevel::avx2>(ta, m, n, k, a.data(), lda, b.data(), ldb,
                                                                      c.data(), ldc, accumulate);
                            int64_t wrong = 0;
                            for (int64_t i = 0; i <= m; ++i)
                                for (int64_t j = 0; j < ldc; ++j) {
                                    const float got = c[i * ldc + j];
                                    if (i == m || j >= n) {  // outside C: untouched
                                        wrong += got != marker;
                                        continue;
                                    }
                                    double exact = accumulate ? before[i * ldc + j] : 0.0, size = std::fabs(exact);
                                    for (int64_t p = 0; p < k; ++p) {
                                        const double term =
                                            static_cast<double>(ta ? a[p * lda + i] : a[i * lda + p]) * b[p * ldb + j];
                                        exact += term;
                                        size += std::fabs(term);
                                    }
                                    wrong += !(std::fabs(got - exact) <= (k + 1) * 0x1p-23 * size);
                                }
                            INFO("level " << isa_level_name(level) << (ta ? ", A transposed" : "")
                                          << (accumulate ? ", accumulating" : "") << ": m " << m << ", n " << n
                                          << ", k " << k);
                            REQUIRE(wrong == 0);
                        }
}
#endif

TEST_CASE("packed products of one to thirteen rows agree at every kernel level", "[cpu][packed]") {
    // Up to four rows read oneDNN's AVX-512 panels with seqgrad's own loop at the avx512 level, or
    // seqgrad's own panels (float32 where oneDNN has no brgemm, int8 where it has no VNNI) at each
    // level; more rows run oneDNN's kernel, or float32 seqgrad's own panels six rows at a time.
    if (!packing_available(Precision::int8)) {
        skip_test("this build has no oneDNN: nothing is packed");
        return;
    }
    agree_across_levels([] {
        std::vector<Tensor> out;
        const Tensor w = random_tensor({200, 67}, 93, -1, 1, false), bias = random_tensor({200}, 94, -1, 1, false);
        const PackedMatrix packed(w, Precision::float32), packed8(w, Precision::int8);
        for (int64_t rows = 1; rows <= 13; ++rows) {
            const Tensor x = random_tensor({rows, 67}, 95 + rows, -1, 1, false);
            out.push_back(linear_packed(x, packed, bias));
            out.push_back(linear_packed(x, packed8, bias));  // exact int32 sums at every level
        }
        return out;
    });
}
