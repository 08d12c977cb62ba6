// LSTM: PyTorch's nn.LSTM (batch_first, multi-layer, optionally bidirectional) over a
// right-padded batch, skipping padding the way pack_padded_sequence does.
#pragma once

#include <cstdint>
#include <vector>

#include "seqgrad/core/ops.h"
#include "seqgrad/core/random.h"
#include "seqgrad/nn/module.h"

namespace seqgrad::nn {

struct LSTMOutput {
    Tensor output;  // [B, T, D * hidden]: forward direction in [..., :hidden], reverse in [..., hidden:]
    Tensor h_n;     // [L * D, B, hidden], index layer * D + direction (PyTorch's order)
    Tensor c_n;     // the same
};

// An LSTM's state kept apart by layer and direction: L * D tensors [B, hidden] each, index
// layer * D + direction, what h_n and c_n stack.
struct LSTMLayerStates {
    std::vector<Tensor> h, c;
};
struct LSTMLayerOutput {
    Tensor output;  // as LSTMOutput's
    LSTMLayerStates state;
};

// Parameters per layer k (and the same with the suffix "_reverse" when bidirectional), gates in
// the order i, f, g, o, all initialised uniform(-1/sqrt(hidden), 1/sqrt(hidden)) as PyTorch:
//   weight_ih_l{k} [4h, in_k]   (in_0 = input_size, in_k = D * hidden above)
//   weight_hh_l{k} [4h, h]
//   bias_ih_l{k}, bias_hh_l{k} [4h]
class LSTM : public Module {
public:
    LSTM(int64_t input_size, int64_t hidden_size, int64_t num_layers, bool bidirectional, Generator& gen);

    // input [B, T, input_size]. `lengths` (one per row, 0..T; empty means every row has length T)
    // marks the real tokens of a right-padded batch: row b's final state is taken at its last real
    // token, the reverse direction starts there, and outputs at padded positions are zero, as
    // nn.LSTM over pack_padded_sequence. h0 and c0 [L * D, B, hidden] are the initial state
    // (zeros when undefined).
    LSTMOutput forward(const Tensor& input, const std::vector<int64_t>& lengths = {}, const Tensor& h0 = {},
                       const Tensor& c0 = {}) const;

    // The layers' weights made ready for a decoder that calls forward once a step, each step's
    // input made from the step before: every weight laid out once for `calls` calls of `batch`
    // rows (RepeatedWeight, core/ops.h) and each layer's two biases added once. Make it in the
    // grad mode of the calls, and drop it once they are made.
    struct Prepared {
        std::vector<RepeatedWeight> w_ih, w_hh;  // index layer * D + direction
        std::vector<Tensor> bias;                // b_ih + b_hh
    };
    Prepared prepare(int64_t batch, int64_t calls) const;
    // forward() through those: the same results within float32 rounding.
    LSTMOutput forward(const Tensor& input, const Tensor& h0, const Tensor& c0, const Prepared& prepared) const;
    // The same with the state apart by layer, in and out: a decoder that calls once a step keeps
    // it so between the steps, rather than stacking it into [L * D, B, hidden] after each step and
    // splitting it again before the next (four copies a step, and four more backwards).
    LSTMLayerOutput forward(const Tensor& input, const LSTMLayerStates& state, const Prepared& prepared) const;
    // [L * D, B, hidden] h0 and c0 apart by layer and direction (zeros where undefined), and back.
    LSTMLayerStates layer_states(const Tensor& h0, const Tensor& c0, int64_t batch) const;
    static void stack_states(const LSTMLayerStates& state, Tensor& h_n, Tensor& c_n);

    int64_t input_size, hidden_size, num_layers;
    bool bidirectional;

private:
    LSTMOutput run(const Tensor& input, const std::vector<int64_t>& lengths, const Tensor& h0, const Tensor& c0,
                   const Prepared* prepared) const;
    LSTMLayerOutput run_layers(const Tensor& input, const std::vector<int64_t>& lengths, const LSTMLayerStates& state,
                               const Prepared* prepared) const;
    void check_input(const Tensor& input) const;
    void check_prepared(const Prepared& prepared) const;

    struct Weights {
        Tensor w_ih, w_hh, b_ih, b_hh;
    };
    std::vector<Weights> weights_;  // index layer * D + direction
};

}  // namespace seqgrad::nn
