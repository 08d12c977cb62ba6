// LSTM: PyTorch's names and shapes, the padding invariance of pack_padded_sequence, the reverse
// direction's start, gradients, and parity with PyTorch on the committed fixtures.
#include "test_nn_helpers.h"

#include "seqgrad/nn.h"

using namespace seqgrad;
using namespace seqgrad::nn;
using Catch::Matchers::Contains;
using testing::random_tensor;
using testing::require_close;

namespace {

std::map<std::string, Tensor> params_by_name(const Module& m) {
    const NamedTensors named = m.named_parameters();
    return {named.begin(), named.end()};
}

// Row b of a [B, ...] tensor, as [1, ...].
Tensor row(const Tensor& x, int64_t b) { return slice(x, 0, b, b + 1); }

}  // namespace

TEST_CASE("LSTM parameters have PyTorch's names and shapes, layer by layer and direction by direction", "[nn][lstm]") {
    Generator gen(1);
    LSTM lstm(3, 4, 2, /*bidirectional=*/true, gen);
    std::vector<std::pair<std::string, Shape>> got;
    for (const auto& [name, p] : lstm.named_parameters()) got.emplace_back(name, p.shape());
    const std::vector<std::pair<std::string, Shape>> expected{{"weight_ih_l0", {16, 3}},
                                                              {"weight_hh_l0", {16, 4}},
                                                              {"bias_ih_l0", {16}},
                                                              {"bias_hh_l0", {16}},
                                                              {"weight_ih_l0_reverse", {16, 3}},
                                                              {"weight_hh_l0_reverse", {16, 4}},
                                                              {"bias_ih_l0_reverse", {16}},
                                                              {"bias_hh_l0_reverse", {16}},
                                                              {"weight_ih_l1", {16, 8}},  // input: both directions
                                                              {"weight_hh_l1", {16, 4}},
                                                              {"bias_ih_l1", {16}},
                                                              {"bias_hh_l1", {16}},
                                                              {"weight_ih_l1_reverse", {16, 8}},
                                                              {"weight_hh_l1_reverse", {16, 4}},
                                                              {"bias_ih_l1_reverse", {16}},
                                                              {"bias_hh_l1_reverse", {16}}};
    CHECK(got == expected);
    for (const Tensor& p : lstm.parameters())
        for (float v : p.to_vector()) CHECK(std::fabs(v) <= 0.5f);  // 1 / sqrt(hidden)
}

TEST_CASE("an unpadded one-layer LSTM is lstm_cell applied step by step", "[nn][lstm]") {
    Generator gen(2);
    LSTM lstm(3, 2, 1, false, gen);
    const Tensor x = random_tensor({2, 4, 3}, 3, -1, 1, false);
    const Tensor h0 = random_tensor({1, 2, 2}, 4, -1, 1, false), c0 = random_tensor({1, 2, 2}, 5, -1, 1, false);
    const LSTMOutput out = lstm.forward(x, {}, h0, c0);
    REQUIRE(out.output.shape() == Shape{2, 4, 2});
    REQUIRE(out.h_n.shape() == Shape{1, 2, 2});
    auto p = params_by_name(lstm);
    LstmState state{reshape(h0, {2, 2}), reshape(c0, {2, 2})};
    for (int64_t t = 0; t < 4; ++t) {
        state = lstm_cell(reshape(slice(x, 1, t, t + 1), {2, 3}), state, p["weight_ih_l0"], p["weight_hh_l0"],
                          p["bias_ih_l0"], p["bias_hh_l0"]);
        // Equal to float rounding: the layer adds the biases in another order.
        CHECK(testing::max_abs_diff(reshape(slice(out.output, 1, t, t + 1), {2, 2}), state.h) < 1e-6f);
    }
    CHECK(testing::max_abs_diff(reshape(out.h_n, {2, 2}), state.h) < 1e-6f);
    CHECK(testing::max_abs_diff(reshape(out.c_n, {2, 2}), state.c) < 1e-6f);
    // The initial state matters.
    CHECK(lstm.forward(x).h_n.to_vector() != out.h_n.to_vector());
}

TEST_CASE("padding never changes an answer: each padded row equals the row run alone", "[nn][lstm]") {
    Generator gen(6);
    for (bool bidirectional : {false, true}) {
        LSTM lstm(3, 4, 2, bidirectional, gen);
        const int64_t batch = 4, len = 6, d = bidirectional ? 2 : 1;
        const std::vector<int64_t> lengths{3, 6, 1, 4};
        const Tensor x = random_tensor({batch, len, 3}, 7, -1, 1, false);  // padding holds random values
        const LSTMOutput padded = lstm.forward(x, lengths);
        REQUIRE(padded.output.shape() == Shape{batch, len, d * 4});
        REQUIRE(padded.h_n.shape() == Shape{2 * d, batch, 4});
        for (int64_t b = 0; b < batch; ++b) {
            INFO("bidirectional " << bidirectional << " row " << b);
            const int64_t n = lengths[static_cast<size_t>(b)];
            const LSTMOutput alone = lstm.forward(slice(row(x, b), 1, 0, n));
            CHECK(testing::max_abs_diff(slice(row(padded.output, b), 1, 0, n), alone.output) < 1e-6f);
            if (n < len)  // (an empty slice trips UBSan in core's copy_block: memcpy from null)
                for (float v : slice(row(padded.output, b), 1, n, len).to_vector()) CHECK(v == 0.0f);
            CHECK(testing::max_abs_diff(slice(padded.h_n, 1, b, b + 1), alone.h_n) < 1e-6f);
            CHECK(testing::max_abs_diff(slice(padded.c_n, 1, b, b + 1), alone.c_n) < 1e-6f);
        }
    }
}

TEST_CASE("the reverse direction starts at each row's last real token", "[nn][lstm]") {
    Generator gen(8);
    LSTM lstm(2, 3, 1, /*bidirectional=*/true, gen);
    const Tensor x = random_tensor({2, 5, 2}, 9, -1, 1, false);
    const std::vector<int64_t> lengths{3, 5};
    const LSTMOutput out = lstm.forward(x, lengths);
    auto p = params_by_name(lstm);
    // Row 0's reverse output at its last real token (t = 2) is one cell step from the zero state.
    const Tensor x_last = reshape(slice(row(x, 0), 1, 2, 3), {1, 2});
    const LstmState first = lstm_cell(x_last, {Tensor::zeros({1, 3}), Tensor::zeros({1, 3})}, p["weight_ih_l0_reverse"],
                                      p["weight_hh_l0_reverse"], p["bias_ih_l0_reverse"], p["bias_hh_l0_reverse"]);
    const Tensor reverse_at_2 = reshape(slice(slice(row(out.output, 0), 1, 2, 3), 2, 3, 6), {1, 3});
    CHECK(testing::max_abs_diff(reverse_at_2, first.h) < 1e-6f);
    // ... and its final reverse state is the one at t = 0 (h_n index 1 = layer 0, reverse).
    const Tensor reverse_at_0 = reshape(slice(slice(row(out.output, 0), 1, 0, 1), 2, 3, 6), {1, 3});
    CHECK(testing::max_abs_diff(reshape(slice(slice(out.h_n, 0, 1, 2), 1, 0, 1), {1, 3}), reverse_at_0) < 1e-7f);
    // The forward final state is the output at the last real token.
    const Tensor forward_at_2 = reshape(slice(slice(row(out.output, 0), 1, 2, 3), 2, 0, 3), {1, 3});
    CHECK(testing::max_abs_diff(reshape(slice(slice(out.h_n, 0, 0, 1), 1, 0, 1), {1, 3}), forward_at_2) < 1e-7f);
}

TEST_CASE("LSTM gradients pass gradcheck through padding, both directions and two layers", "[nn][lstm][gradcheck]") {
    Generator gen(10);
    LSTM lstm(2, 2, 2, /*bidirectional=*/true, gen);
    const Tensor x = random_tensor({2, 3, 2}, 11);
    const Tensor h0 = random_tensor({4, 2, 2}, 12), c0 = random_tensor({4, 2, 2}, 13);
    const std::vector<int64_t> lengths{2, 3};
    std::vector<Tensor> checked{x, h0, c0};
    for (const Tensor& p : lstm.parameters()) checked.push_back(p);
    // Output, h_n and c_n together, so every path is checked.
    testing::require_gradcheck_in_place(
        [&] {
        const LSTMOutput out = lstm.forward(x, lengths, h0, c0);
        return concat({reshape(out.output, {-1}), reshape(out.h_n, {-1}), reshape(out.c_n, {-1})}, 0);
        },
        checked);
}

TEST_CASE("LSTM refuses inputs, lengths and states that do not fit", "[nn][lstm]") {
    Generator gen(14);
    LSTM lstm(3, 2, 1, false, gen);
    const Tensor x = random_tensor({2, 4, 3}, 15, -1, 1, false);
    CHECK_THROWS_WITH(lstm.forward(random_tensor({2, 4, 5}, 1)), Contains("input must be [batch, len >= 1, 3]"));
    CHECK_THROWS_WITH(lstm.forward(x, {4}), Contains("1 lengths for a batch of 2"));
    CHECK_THROWS_WITH(lstm.forward(x, {4, 5}), Contains("length 5 outside [0, 4]"));
    CHECK_THROWS_WITH(lstm.forward(x, {}, Tensor::zeros({1, 2, 2})), Contains("both h0 and c0"));
    CHECK_THROWS_WITH(lstm.forward(x, {}, Tensor::zeros({2, 2, 2}), Tensor::zeros({2, 2, 2})),
                      Contains("must be [1, 2, 2]"));
}

TEST_CASE("an LSTM stepped with its state apart by layer gives the stacked state's outputs and gradients",
          "[nn][lstm]") {
    // A decoder's loop: three calls of one step each, the state handed from call to call, once as
    // [L * D, B, h] tensors and once as LSTMLayerStates; every result and gradient must agree.
    for (const bool bidirectional : {false, true}) {
        INFO("bidirectional " << bidirectional);
        Generator gen(40);
        LSTM lstm(3, 4, 2, bidirectional, gen);
        const int64_t batch = 3, steps = 3, count = bidirectional ? 4 : 2;
        std::vector<Tensor> xs;
        for (int64_t t = 0; t < steps; ++t) xs.push_back(random_tensor({batch, 1, 3}, 41 + static_cast<uint64_t>(t)));
        const Tensor h0 = random_tensor({count, batch, 4}, 45), c0 = random_tensor({count, batch, 4}, 46);
        const Tensor weights = random_tensor({batch, steps, count * 4}, 47, -1, 1, false);
        std::vector<Tensor> leaves = xs;
        leaves.push_back(h0);
        leaves.push_back(c0);
        for (const Tensor& p : lstm.parameters()) leaves.push_back(p);

        // Outputs, h_n and c_n of both ways, then the gradients of one weighted sum of them.
        struct Run {
            Tensor output, h_n, c_n;
            std::vector<Tensor> grads;
        };
        const auto finish = [&](Run& run, const std::vector<Tensor>& outputs) {
            run.output = concat(outputs, 1);
            const Tensor loss = add(sum(mul(concat({run.output, run.output}, 2), weights)),
                                    add(sum(mul(run.h_n, run.h_n)), sum(run.c_n)));
            for (Tensor leaf : leaves) leaf.zero_grad();
            loss.backward();
            for (const Tensor& leaf : leaves)
                run.grads.push_back(leaf.grad().defined() ? leaf.grad().clone() : Tensor());
        };
        Run stacked, apart;
        {
            const LSTM::Prepared prepared = lstm.prepare(batch, steps);  // its biases' sums: one graph
            Tensor h = h0, c = c0;
            std::vector<Tensor> outputs;
            for (const Tensor& x : xs) {
                const LSTMOutput out = lstm.forward(x, h, c, prepared);
                h = out.h_n;
                c = out.c_n;
                outputs.push_back(out.output);
            }
            stacked.h_n = h;
            stacked.c_n = c;
            finish(stacked, outputs);
        }
        const LSTM::Prepared prepared = lstm.prepare(batch, steps);
        {
            LSTMLayerStates states = lstm.layer_states(h0, c0, batch);
            std::vector<Tensor> outputs;
            for (const Tensor& x : xs) {
                LSTMLayerOutput out = lstm.forward(x, states, prepared);
                states = std::move(out.state);
                outputs.push_back(out.output);
            }
            LSTM::stack_states(states, apart.h_n, apart.c_n);
            finish(apart, outputs);
        }
        require_close(apart.output, stacked.output, "output", 1e-6f, 1e-6f);
        require_close(apart.h_n, stacked.h_n, "h_n", 1e-6f, 1e-6f);
        require_close(apart.c_n, stacked.c_n, "c_n", 1e-6f, 1e-6f);
        REQUIRE(apart.grads.size() == stacked.grads.size());
        for (size_t i = 0; i < leaves.size(); ++i) {
            REQUIRE(stacked.grads[i].defined());
            require_close(apart.grads[i], stacked.grads[i], "the gradient of leaf " + std::to_string(i), 1e-6f, 1e-6f);
        }
        // States that do not fit this LSTM are refused.
        const LSTMLayerStates one{{Tensor::zeros({batch, 4})}, {Tensor::zeros({batch, 4})}};
        CHECK_THROWS_WITH(lstm.forward(xs[0], one, prepared), Contains("the state holds 1 h and 1 c"));
        LSTMLayerStates wrong = lstm.layer_states(Tensor(), Tensor(), batch);
        wrong.c.back() = Tensor::zeros({batch, 5});
        CHECK_THROWS_WITH(lstm.forward(xs[0], wrong, prepared), Contains("must be h and c [3, 4]"));
    }
}

TEST_CASE("LSTM matches PyTorch's packed nn.LSTM on the committed fixtures", "[nn][lstm][parity]") {
    for (const char* name : {"lstm_unidirectional_1layer.safetensors", "lstm_bidirectional_2layer.safetensors"}) {
        INFO(name);
        const testing::Fixture fx = testing::load_fixture(name);
        REQUIRE(fx.config.at("model") == "lstm");
        Generator gen(0);
        LSTM lstm(fx.config.at("input_size").get<int64_t>(), fx.config.at("hidden_size").get<int64_t>(),
                  fx.config.at("num_layers").get<int64_t>(), fx.config.at("bidirectional").get<bool>(), gen);
        lstm.load_state_dict(fx.parameters);
        const Tensor x = testing::leaf_copy(fx.file.tensor("input.x"));
        const std::vector<int64_t> lengths = fx.file.int_tensor("input.lengths").to_vector();
        const LSTMOutput out = lstm.forward(x, lengths);
        require_close(out.output, fx.file.tensor("expect.output"), "output");
        require_close(out.h_n, fx.file.tensor("expect.h_n"), "h_n");
        require_close(out.c_n, fx.file.tensor("expect.c_n"), "c_n");
        const Tensor loss = sum(mul(out.output, fx.file.tensor("input.out_weight")));
        require_close(loss, fx.file.tensor("expect.loss"), "loss");
        loss.backward();
        for (const auto& [pname, p] : lstm.named_parameters())
            require_close(p.grad(), fx.file.tensor("expect.grad." + pname), "grad " + pname);
        require_close(x.grad(), fx.file.tensor("expect.input_grad.x"), "input_grad.x");
    }
}
