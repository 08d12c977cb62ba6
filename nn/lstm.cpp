// LSTM: nn.LSTM's layers and directions, each direction of a layer one core lstm_sequence over
// the input's gates (x W_ih^T + b_ih + b_hh for all steps in one product), with padding handled as
// pack_padded_sequence does: padded rows keep their state and output zero. Padding is on the
// right, so the forward direction's state stops changing after a row's last real token, and the
// reverse direction, walking from the end, keeps its initial state until it reaches that token.
#include "seqgrad/nn/lstm.h"

#include <cmath>
#include <string>

#include "seqgrad/core/autograd.h"
#include "seqgrad/core/ops.h"
#include "seqgrad/nn/trace.h"

namespace seqgrad::nn {

LSTM::LSTM(int64_t input_size_, int64_t hidden_size_, int64_t num_layers_, bool bidirectional_, Generator& gen)
    : input_size(input_size_), hidden_size(hidden_size_), num_layers(num_layers_), bidirectional(bidirectional_) {
    check(input_size > 0 && hidden_size > 0 && num_layers > 0, "LSTM", "sizes must be positive, got input_size ",
          input_size, ", hidden_size ", hidden_size, ", num_layers ", num_layers);
    const int64_t directions = bidirectional ? 2 : 1;
    const int64_t gates = 4 * hidden_size;
    const float bound = 1.0f / std::sqrt(static_cast<float>(hidden_size));
    auto uniform = [&](const Shape& shape) { return Tensor::uniform(shape, -bound, bound, gen); };
    for (int64_t layer = 0; layer < num_layers; ++layer) {
        const int64_t in = layer == 0 ? input_size : directions * hidden_size;
        for (int64_t direction = 0; direction < directions; ++direction) {
            const std::string suffix = "_l" + std::to_string(layer) + (direction == 1 ? "_reverse" : "");
            Weights w;
            w.w_ih = register_parameter("weight_ih" + suffix, uniform({gates, in}));
            w.w_hh = register_parameter("weight_hh" + suffix, uniform({gates, hidden_size}));
            w.b_ih = register_parameter("bias_ih" + suffix, uniform({gates}));
            w.b_hh = register_parameter("bias_hh" + suffix, uniform({gates}));
            weights_.push_back(w);
        }
    }
}

namespace {

// [L * D, B, h] -> L * D tensors [B, h]; zeros when undefined.
std::vector<Tensor> unstack_state(const Tensor& state, int64_t count, int64_t batch, int64_t hidden) {
    std::vector<Tensor> out;
    if (!state.defined()) {
        for (int64_t i = 0; i < count; ++i) out.push_back(Tensor::zeros({batch, hidden}));
        return out;
    }
    for (const Tensor& s : split(state, std::vector<int64_t>(static_cast<size_t>(count), 1), 0))
        out.push_back(reshape(s, {batch, hidden}));
    return out;
}

}  // namespace

LSTM::Prepared LSTM::prepare(int64_t batch, int64_t calls) const {
    check(batch > 0 && calls > 0, "LSTM::prepare", "batch ", batch, " and calls ", calls, " must be positive");
    Prepared prepared;
    for (const Weights& w : weights_) {
        prepared.w_ih.emplace_back(w.w_ih, batch, calls);
        prepared.w_hh.emplace_back(w.w_hh, batch, calls);
        prepared.bias.push_back(add(w.b_ih, w.b_hh));
    }
    return prepared;
}

LSTMOutput LSTM::forward(const Tensor& input, const std::vector<int64_t>& lengths, const Tensor& h0,
                         const Tensor& c0) const {
    return run(input, lengths, h0, c0, nullptr);
}

void LSTM::check_input(const Tensor& input) const {
    check(input.defined() && input.dim() == 3 && input.size(2) == input_size && input.size(1) > 0, "LSTM",
          "input must be [batch, len >= 1, ", input_size, "], got ", input.defined() ? input.shape() : Shape{});
}

void LSTM::check_prepared(const Prepared& prepared) const {
    const size_t count = weights_.size();
    check(prepared.w_ih.size() == count && prepared.w_hh.size() == count && prepared.bias.size() == count, "LSTM",
          "the prepared weights are for ", prepared.w_ih.size(), " layers and directions; this LSTM has ", count);
    for (size_t k = 0; k < count; ++k)
        check(prepared.w_ih[k].tensor().impl() == weights_[k].w_ih.impl() &&
                  prepared.w_hh[k].tensor().impl() == weights_[k].w_hh.impl(),
              "LSTM", "the prepared weights are another LSTM's: make them with this one's prepare()");
}

LSTMOutput LSTM::forward(const Tensor& input, const Tensor& h0, const Tensor& c0, const Prepared& prepared) const {
    check_prepared(prepared);
    return run(input, {}, h0, c0, &prepared);
}

LSTMLayerOutput LSTM::forward(const Tensor& input, const LSTMLayerStates& state, const Prepared& prepared) const {
    check_prepared(prepared);
    LSTMLayerOutput out = run_layers(input, {}, state, &prepared);
    trace(*this, out.output);
    if (tracing()) {  // the stacked state, as the other forwards report it
        Tensor h_n, c_n;
        stack_states(out.state, h_n, c_n);
        trace(*this, "h_n", h_n);
        trace(*this, "c_n", c_n);
    }
    return out;
}

LSTMLayerStates LSTM::layer_states(const Tensor& h0, const Tensor& c0, int64_t batch) const {
    const int64_t count = num_layers * (bidirectional ? 2 : 1);
    const Shape state_shape{count, batch, hidden_size};
    check(h0.defined() == c0.defined(), "LSTM", "give both h0 and c0 or neither");
    check(!h0.defined() || (h0.shape() == state_shape && c0.shape() == state_shape), "LSTM", "h0 ",
          h0.defined() ? h0.shape() : Shape{}, " and c0 ", c0.defined() ? c0.shape() : Shape{}, " must be ",
          state_shape);
    return {unstack_state(h0, count, batch, hidden_size), unstack_state(c0, count, batch, hidden_size)};
}

void LSTM::stack_states(const LSTMLayerStates& state, Tensor& h_n, Tensor& c_n) {
    h_n = stack(state.h, 0);
    c_n = stack(state.c, 0);
}

LSTMOutput LSTM::run(const Tensor& input, const std::vector<int64_t>& lengths, const Tensor& h0, const Tensor& c0,
                     const Prepared* prepared) const {
    check_input(input);
    const LSTMLayerOutput layers = run_layers(input, lengths, layer_states(h0, c0, input.size(0)), prepared);
    LSTMOutput out{layers.output, Tensor(), Tensor()};
    stack_states(layers.state, out.h_n, out.c_n);
    trace(*this, out.output);
    trace(*this, "h_n", out.h_n);
    trace(*this, "c_n", out.c_n);
    return out;
}

LSTMLayerOutput LSTM::run_layers(const Tensor& input, const std::vector<int64_t>& lengths, const LSTMLayerStates& state,
                                 const Prepared* prepared) const {
    check_input(input);
    const int64_t batch = input.size(0), len = input.size(1);
    const int64_t directions = bidirectional ? 2 : 1;
    const size_t count = static_cast<size_t>(num_layers * directions);
    check(state.h.size() == count && state.c.size() == count, "LSTM", "the state holds ", state.h.size(), " h and ",
          state.c.size(), " c for ", count, " layers and directions");
    for (size_t k = 0; k < count; ++k)
        check(state.h[k].defined() && state.c[k].defined() && state.h[k].shape() == Shape{batch, hidden_size} &&
                  state.c[k].shape() == state.h[k].shape(),
              "LSTM", "the state of layer and direction ", k, " must be h and c [", batch, ", ", hidden_size, "]");
    check(lengths.empty() || static_cast<int64_t>(lengths.size()) == batch, "LSTM", lengths.size(),
          " lengths for a batch of ", batch);
    for (int64_t length : lengths)
        check(length >= 0 && length <= len, "LSTM", "length ", length, " outside [0, ", len, "]");

    const std::vector<Tensor>& h_init = state.h;
    const std::vector<Tensor>& c_init = state.c;
    std::vector<Tensor> h_n, c_n;
    // In training, over more than one step, the layers run time-major, [T, B, .]: lstm_sequence's
    // backward then hands back the gates' gradient in the order its products read it, with no copy
    // of it (4h a token) per layer and direction; the stack's input and output are turned once
    // each (in and h or 2h a token). Without a backward pass there is nothing to save.
    const bool time_major = len > 1 && grad_enabled();
    Tensor layer_input = time_major ? transpose(input, 0, 1) : input;  // [T, B, in] or [B, 1, in]
    for (int64_t layer = 0; layer < num_layers; ++layer) {
        std::vector<Tensor> direction_outputs;
        for (int64_t direction = 0; direction < directions; ++direction) {
            const size_t k = static_cast<size_t>(layer * directions + direction);
            const Weights& w = weights_[k];
            // The input's share of every step's gates as one product, then the recurrence.
            const bool reverse = direction == 1;
            LstmSequence run;
            if (prepared != nullptr) {
                const Tensor input_gates = linear(layer_input, prepared->w_ih[k], prepared->bias[k]);  // [., ., 4h]
                run = lstm_sequence(input_gates, h_init[k], c_init[k], prepared->w_hh[k], lengths, reverse, time_major);
            } else {
                const Tensor input_gates = linear(layer_input, w.w_ih, add(w.b_ih, w.b_hh));
                run = lstm_sequence(input_gates, h_init[k], c_init[k], w.w_hh, lengths, reverse, time_major);
            }
            h_n.push_back(run.h);
            c_n.push_back(run.c);
            direction_outputs.push_back(run.outputs);  // [T, B, h] or [B, 1, h]
        }
        layer_input = directions == 1 ? direction_outputs[0] : concat(direction_outputs, 2);
    }
    return {time_major ? transpose(layer_input, 0, 1) : layer_input, {h_n, c_n}};
}

}  // namespace seqgrad::nn
