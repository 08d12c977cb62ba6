// The fused LSTM cell against its composition, gradients and errors.
#include "helpers.h"

using namespace seqgrad;
using testing::random_tensor;
using testing::require_gradcheck;
using testing::ThreadCountScope;

namespace {

// PyTorch's LSTM cell written with primitives.
LstmState composed_lstm_cell(const Tensor& x, const LstmState& s, const Tensor& w_ih, const Tensor& w_hh,
                             const Tensor& b_ih, const Tensor& b_hh) {
    auto gates = linear(x, w_ih, b_ih) + linear(s.h, w_hh, b_hh);
    auto parts = chunk(gates, 4, 1);
    auto i = sigmoid(parts[0]), f = sigmoid(parts[1]), g = tanh(parts[2]), o = sigmoid(parts[3]);
    auto c = f * s.c + i * g;
    return {o * tanh(c), c};
}

struct Cell {
    Tensor x, h, c, w_ih, w_hh, b_ih, b_hh;
};

// An LSTM's operands from seeds seed to seed + 6: x of the given shape ([batch, in] for a cell,
// [batch, steps, in] for a layer), h0, c0, w_ih, w_hh, b_ih, b_hh.
std::vector<Tensor> lstm_operands(const Shape& x_shape, int64_t hidden, uint64_t seed) {
    const int64_t batch = x_shape[0], in = x_shape[x_shape.size() - 1];
    return {random_tensor(x_shape, seed),
            random_tensor({batch, hidden}, seed + 1),
            random_tensor({batch, hidden}, seed + 2),
            random_tensor({4 * hidden, in}, seed + 3, -0.5, 0.5),
            random_tensor({4 * hidden, hidden}, seed + 4, -0.5, 0.5),
            random_tensor({4 * hidden}, seed + 5),
            random_tensor({4 * hidden}, seed + 6)};
}

Cell make_cell(uint64_t seed, int64_t batch = 3, int64_t in = 4, int64_t hidden = 5) {
    const std::vector<Tensor> t = lstm_operands({batch, in}, hidden, seed);
    return {t[0], t[1], t[2], t[3], t[4], t[5], t[6]};
}

std::vector<Tensor> inputs_of(const Cell& c) { return {c.x, c.h, c.c, c.w_ih, c.w_hh, c.b_ih, c.b_hh}; }

Cell copy_of(const Cell& c) {
    auto copy = [](const Tensor& t) { return Tensor::from_vector(t.to_vector(), t.shape(), true); };
    return {copy(c.x), copy(c.h), copy(c.c), copy(c.w_ih), copy(c.w_hh), copy(c.b_ih), copy(c.b_hh)};
}

}  // namespace

TEST_CASE("the fused LSTM cell equals its composition, values and gradients", "[ops][lstm]") {
    Cell a = make_cell(1);
    Cell b = copy_of(a);
    auto fused = lstm_cell(a.x, {a.h, a.c}, a.w_ih, a.w_hh, a.b_ih, a.b_hh);
    auto composed = composed_lstm_cell(b.x, {b.h, b.c}, b.w_ih, b.w_hh, b.b_ih, b.b_hh);
    CHECK(testing::max_abs_diff(fused.h, composed.h) < 1e-6f);
    CHECK(testing::max_abs_diff(fused.c, composed.c) < 1e-6f);
    auto rh = random_tensor({3, 5}, 20, -1, 1, false);
    auto rc = random_tensor({3, 5}, 21, -1, 1, false);
    (fused.h * rh + fused.c * rc).sum().backward();
    (composed.h * rh + composed.c * rc).sum().backward();
    const auto fa = inputs_of(a), fb = inputs_of(b);
    for (size_t i = 0; i < fa.size(); ++i) {
        INFO("input " << i);
        CHECK(testing::max_abs_diff(fa[i].grad(), fb[i].grad()) < 1e-5f);
    }
}

TEST_CASE("the LSTM cell passes gradcheck through h and c", "[ops][lstm][gradcheck]") {
    for (const auto& [batch, in, hidden] :
         std::vector<std::tuple<int64_t, int64_t, int64_t>>{{3, 4, 5}, {1, 2, 3}, {2, 1, 1}}) {
        Cell cell = make_cell(30, batch, in, hidden);
        require_gradcheck(
            [](const std::vector<Tensor>& p) {
            auto s = lstm_cell(p[0], {p[1], p[2]}, p[3], p[4], p[5], p[6]);
            return concat({s.h, s.c * 0.5f}, 1);
            },
            inputs_of(cell));
    }
    Cell cell = make_cell(40);
    require_gradcheck(
        [](const std::vector<Tensor>& p) {
        return lstm_cell(p[0], {p[1], p[2]}, p[3], p[4], p[5], p[6]).c;
        },
        inputs_of(cell));
}

TEST_CASE("an LSTM cell unrolled over steps backpropagates through time", "[ops][lstm][gradcheck]") {
    Cell cell = make_cell(50, 2, 3, 4);
    require_gradcheck(
        [](const std::vector<Tensor>& p) {
        LstmState s{p[1], p[2]};
        for (int t = 0; t < 4; ++t) s = lstm_cell(p[0] * static_cast<float>(t + 1), s, p[3], p[4], p[5], p[6]);
        return s.h;
        },
        inputs_of(cell));
}

TEST_CASE("the LSTM cell runs without biases, as with biases of zero", "[ops][lstm]") {
    Cell c = make_cell(3);
    const Tensor zeros = Tensor::zeros(c.b_ih.shape());
    const LstmState without = lstm_cell(c.x, {c.h, c.c}, c.w_ih, c.w_hh, Tensor(), Tensor());
    const LstmState with_zeros = lstm_cell(c.x, {c.h, c.c}, c.w_ih, c.w_hh, zeros, zeros);
    CHECK(without.h.to_vector() == with_zeros.h.to_vector());
    CHECK(without.c.to_vector() == with_zeros.c.to_vector());
}

TEST_CASE("the LSTM cell rejects weights that do not fit", "[ops][lstm][errors]") {
    Cell c = make_cell(60);
    CHECK_THROWS_WITH(lstm_cell(c.x, {c.h, c.c}, Tensor::zeros({20, 3}), c.w_hh, c.b_ih, c.b_hh),
                      Catch::Contains("lstm_cell") && Catch::Contains("w_ih"));
    CHECK_THROWS_AS(lstm_cell(c.x, {c.h, Tensor::zeros({3, 4})}, c.w_ih, c.w_hh, c.b_ih, c.b_hh), Error);
    CHECK_THROWS_AS(lstm_cell(c.x, {c.h, c.c}, c.w_ih, c.w_hh, Tensor::zeros({5}), c.b_hh), Error);
}

// ---- lstm_sequence: a whole layer in one direction ----

namespace {

// The layer as a loop of lstm_cell over the steps, padded rows keeping their state (keep = 1 on
// real rows) and outputting zero: what lstm_sequence fuses.
LstmSequence looped_lstm(const Tensor& x, const Tensor& h0, const Tensor& c0, const Tensor& w_ih, const Tensor& w_hh,
                         const Tensor& b_ih, const Tensor& b_hh, const std::vector<int64_t>& lengths, bool reverse) {
    const int64_t batch = x.size(0), steps = x.size(1), hidden = h0.size(1);
    LstmState state{h0, c0};
    std::vector<Tensor> outputs(static_cast<size_t>(steps));
    for (int64_t s = 0; s < steps; ++s) {
        const int64_t t = reverse ? steps - 1 - s : s;
        std::vector<float> keep(static_cast<size_t>(batch));
        for (int64_t b = 0; b < batch; ++b)
            keep[static_cast<size_t>(b)] = t < lengths[static_cast<size_t>(b)] ? 1.0f : 0.0f;
        const Tensor k = Tensor::from_vector(keep, {batch, 1});
        const LstmState next =
            lstm_cell(reshape(slice(x, 1, t, t + 1), {batch, x.size(2)}), state, w_ih, w_hh, b_ih, b_hh);
        state = {next.h * k + state.h * (1.0f - k), next.c * k + state.c * (1.0f - k)};
        outputs[static_cast<size_t>(t)] = reshape(next.h * k, {batch, 1, hidden});
    }
    return {concat(outputs, 1), state.h, state.c};
}

// lstm_sequence over x [B, T, in] in either layout: time-major takes the input gates as [T, B, 4H]
// and gives its outputs [T, B, H], here turned back to [B, T, H].
LstmSequence fused_lstm(const Tensor& x, const Tensor& h0, const Tensor& c0, const Tensor& w_ih, const Tensor& w_hh,
                        const Tensor& bias, const std::vector<int64_t>& lengths, bool reverse, bool time_major) {
    if (!time_major) return lstm_sequence(linear(x, w_ih, bias), h0, c0, w_hh, lengths, reverse);
    LstmSequence run = lstm_sequence(linear(transpose(x, 0, 1), w_ih, bias), h0, c0, w_hh, lengths, reverse, true);
    run.outputs = transpose(run.outputs, 0, 1);
    return run;
}

}  // namespace

TEST_CASE("lstm_sequence equals a loop of LSTM cells, padding and reverse included, gradients too", "[ops][lstm]") {
    const int64_t batch = 4, steps = 5, in = 3, hidden = 6;
    const std::vector<int64_t> lengths = {5, 3, 1, 0};
    for (bool time_major : {false, true})
        for (bool reverse : {false, true}) {
            INFO("reverse " << reverse << ", time-major " << time_major);
            const auto make = [&] { return lstm_operands({batch, steps, in}, hidden, 61); };
            const std::vector<Tensor> a = make(), b = make();
            const LstmSequence fused =
                fused_lstm(a[0], a[1], a[2], a[3], a[4], add(a[5], a[6]), lengths, reverse, time_major);
            const LstmSequence looped = looped_lstm(b[0], b[1], b[2], b[3], b[4], b[5], b[6], lengths, reverse);
            CHECK(testing::max_abs_diff(fused.outputs, looped.outputs) < 1e-5f);
            CHECK(testing::max_abs_diff(fused.h, looped.h) < 1e-5f);
            CHECK(testing::max_abs_diff(fused.c, looped.c) < 1e-5f);
            const auto r = random_tensor({batch, steps, hidden}, 68, -1, 1, false);
            const auto rh = random_tensor({batch, hidden}, 69, -1, 1, false);
            const auto rc = random_tensor({batch, hidden}, 70, -1, 1, false);
            ((fused.outputs * r).sum() + (fused.h * rh).sum() + (fused.c * rc).sum()).backward();
            ((looped.outputs * r).sum() + (looped.h * rh).sum() + (looped.c * rc).sum()).backward();
            for (size_t i = 0; i < a.size(); ++i) {
                INFO("input " << i);
                CHECK(testing::max_abs_diff(a[i].grad(), b[i].grad()) < 1e-5f);
            }
        }
}

TEST_CASE("lstm_sequence of a large batch, each thread's rows through every step, equals the cells",
          "[ops][lstm][threads]") {
    // 100 rows: past the 64 the recurrent weight's panels take, so with two threads and products on
    // sgemm each thread takes its own 50 rows through all the steps; one thread takes all 100. The
    // loop of cells is the reference for both. (Not bit for bit: sgemm's sums for a row may round
    // differently in a block of 50 rows than in one of 100.)
    const int64_t batch = 100, steps = 6, in = 5, hidden = 8;
    std::vector<int64_t> lengths;
    for (int64_t b = 0; b < batch; ++b) lengths.push_back((b * 5) % (steps + 1));  // 0 to 6, mixed

    struct SgemmProducts {  // for the test's lifetime
        SgemmProducts() { set_float32_products("sgemm"); }
        ~SgemmProducts() { set_float32_products("auto"); }
    } const sgemm_products;
    for (bool time_major : {false, true})
        for (bool reverse : {false, true}) {
            INFO("reverse " << reverse << ", time-major " << time_major);
            const auto make = [&] { return lstm_operands({batch, steps, in}, hidden, 81); };
            const auto r = random_tensor({batch, steps, hidden}, 88, -1, 1, false);
            const auto rh = random_tensor({batch, hidden}, 89, -1, 1, false);
            const auto rc = random_tensor({batch, hidden}, 90, -1, 1, false);
            const auto fused_run = [&](int threads) {
                set_num_threads(threads);
                const std::vector<Tensor> a = make();
                const LstmSequence fused =
                    fused_lstm(a[0], a[1], a[2], a[3], a[4], add(a[5], a[6]), lengths, reverse, time_major);
                ((fused.outputs * r).sum() + (fused.h * rh).sum() + (fused.c * rc).sum()).backward();
                std::vector<Tensor> all{fused.outputs, fused.h, fused.c};
                for (const Tensor& t : a) all.push_back(t.grad());
                return all;
            };
            std::vector<Tensor> one, two;
            {
                const ThreadCountScope restore;
                one = fused_run(1);
                two = fused_run(2);
            }
            const std::vector<Tensor> b = make();
            const LstmSequence looped = looped_lstm(b[0], b[1], b[2], b[3], b[4], b[5], b[6], lengths, reverse);
            ((looped.outputs * r).sum() + (looped.h * rh).sum() + (looped.c * rc).sum()).backward();
            std::vector<Tensor> reference{looped.outputs, looped.h, looped.c};
            for (const Tensor& t : b) reference.push_back(t.grad());
            for (size_t i = 0; i < reference.size(); ++i) {
                INFO("result " << i);
                CHECK(testing::max_abs_diff(one[i], reference[i]) < 1e-5f);
                CHECK(testing::max_abs_diff(two[i], reference[i]) < 1e-5f);
            }
        }
}

TEST_CASE("the LSTM's gates saturate at infinite pre-activations and pass NaN on, at every kernel level",
          "[ops][lstm][cpu]") {
    // Hidden 11: a vector of eight and a tail. Row 0's pre-activations are i = f = g = o = +inf,
    // row 1's all -inf, row 2's finite but for one NaN in unit 4's input gate, row 3's f, g and o
    // finite and i = +inf (the sigmoid's saturation alone). h0 and W_hh are zero, so the products
    // add nothing.
    const int64_t batch = 4, hidden = 11;
    const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> pre(static_cast<size_t>(batch * 4 * hidden));
    for (int64_t j = 0; j < 4 * hidden; ++j) {
        pre[static_cast<size_t>(j)] = inf;
        pre[static_cast<size_t>(4 * hidden + j)] = -inf;
        pre[static_cast<size_t>(8 * hidden + j)] = 0.3f - 0.05f * static_cast<float>(j % 13);
        pre[static_cast<size_t>(12 * hidden + j)] = j < hidden ? inf : 0.1f * static_cast<float>(j % 7) - 0.3f;
    }
    pre[static_cast<size_t>(8 * hidden + 4)] = nan;
    const Tensor c0 = random_tensor({batch, hidden}, 95, -2, 2, false);
    const auto sigmoid_of = [](float v) { return 1 / (1 + std::exp(-v)); };
    // Row b of (h, c), found in row `r` of h and c.
    const auto check_row = [&](const Tensor& h, const Tensor& c, int64_t r, int64_t b) {
        for (int64_t j = 0; j < hidden; ++j) {
            INFO("row " << b << ", unit " << j);
            const float hv = h.data()[r * hidden + j], cv = c.data()[r * hidden + j];
            const float c_in = c0.data()[b * hidden + j];
            const float* p = pre.data() + b * 4 * hidden;
            if (b == 0) {  // i = f = g = o = 1
                CHECK(cv == c_in + 1.0f);
                CHECK(hv == Approx(std::tanh(c_in + 1.0f)).margin(1e-6));
            } else if (b == 1) {  // i = f = o = 0, g = -1
                CHECK(cv == 0.0f);
                CHECK(hv == 0.0f);
            } else if (b == 2 && j == 4) {
                CHECK(std::isnan(cv));
                CHECK(std::isnan(hv));
            } else {
                const float i = b == 3 ? 1.0f : sigmoid_of(p[j]);
                const float c_ref = sigmoid_of(p[hidden + j]) * c_in + i * std::tanh(p[2 * hidden + j]);
                CHECK(cv == Approx(c_ref).margin(1e-6));
                CHECK(hv == Approx(sigmoid_of(p[3 * hidden + j]) * std::tanh(c_ref)).margin(1e-6));
            }
        }
    };
    const int top = static_cast<int>(max_isa_level());
    for (int level = 0; level <= top; ++level) {
        set_isa_level(static_cast<IsaLevel>(level));
        INFO("level " << isa_level_name(isa_level()));
        const LstmSequence seq = lstm_sequence(Tensor::from_vector(pre, {batch, 1, 4 * hidden}),
                                               Tensor::zeros({batch, hidden}), c0, Tensor::zeros({4 * hidden, hidden}),
                                               {}, false);
        for (int64_t b = 0; b < batch; ++b) check_row(seq.h, seq.c, b, b);
        // The cell, one row at a time: the pre-activations as its bias (a product would meet 0 x inf).
        for (int64_t b = 0; b < batch; ++b) {
            const std::vector<float> row(pre.begin() + b * 4 * hidden, pre.begin() + (b + 1) * 4 * hidden);
            const Tensor c_row =
                Tensor::from_vector(std::vector<float>(c0.data() + b * hidden, c0.data() + (b + 1) * hidden),
                                    {1, hidden});
            const LstmState cell = lstm_cell(Tensor::zeros({1, 1}), {Tensor::zeros({1, hidden}), c_row},
                                             Tensor::zeros({4 * hidden, 1}), Tensor::zeros({4 * hidden, hidden}),
                                             Tensor::from_vector(row, {4 * hidden}), Tensor());
            check_row(cell.h, cell.c, 0, b);
        }
    }
    set_isa_level(max_isa_level());
}

TEST_CASE("lstm_sequence passes gradcheck through its outputs and final state", "[ops][lstm][gradcheck]") {
    const int64_t batch = 3, steps = 4, hidden = 2;
    for (bool time_major : {false, true})
        for (bool reverse : {false, true}) {
            for (const std::vector<int64_t>& lengths : {std::vector<int64_t>{}, std::vector<int64_t>{4, 2, 0}}) {
                INFO("reverse " << reverse << " padded " << !lengths.empty() << " time-major " << time_major);
                require_gradcheck(
                    [&](const std::vector<Tensor>& in) {
                    const LstmSequence run = lstm_sequence(time_major ? transpose(in[0], 0, 1) : in[0], in[1], in[2],
                                                           in[3], lengths, reverse, time_major);
                    return concat({reshape(run.outputs, {-1}), reshape(run.h, {-1}), reshape(run.c, {-1})}, 0);
                    },
                    {random_tensor({batch, steps, 4 * hidden}, 71), random_tensor({batch, hidden}, 72),
                     random_tensor({batch, hidden}, 73), random_tensor({4 * hidden, hidden}, 74, -0.7, 0.7)});
            }
        }
}

TEST_CASE("lstm_sequence rejects operands and lengths that do not fit", "[ops][lstm][errors]") {
    const Tensor gates = Tensor::zeros({2, 3, 8}), h = Tensor::zeros({2, 2}), w = Tensor::zeros({8, 2});
    CHECK_THROWS_WITH(lstm_sequence(Tensor::zeros({2, 3, 7}), h, h, w), Catch::Contains("4 * hidden"));
    CHECK_THROWS_WITH(lstm_sequence(Tensor::zeros({2, 0, 8}), h, h, w), Catch::Contains("steps >= 1"));
    CHECK_THROWS_WITH(lstm_sequence(gates, Tensor::zeros({3, 2}), h, w), Catch::Contains("h0"));
    CHECK_THROWS_WITH(lstm_sequence(gates, h, h, Tensor::zeros({8, 3})), Catch::Contains("w_hh"));
    CHECK_THROWS_WITH(lstm_sequence(gates, h, h, w, {3}), Catch::Contains("lengths for a batch of 2"));
    CHECK_THROWS_WITH(lstm_sequence(gates, h, h, w, {3, 4}), Catch::Contains("outside [0, 3]"));
}
