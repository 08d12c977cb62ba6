// One step of an LSTM, as PyTorch's nn.LSTM computes it (gates in the order i, f, g, o):
//   gates = x W_ih^T + b_ih + h W_hh^T + b_hh           [B, 4H]
//   i, f, o = sigmoid(.), g = tanh(.)
//   c' = f * c + i * g,  h' = o * tanh(c')
// Fused: two sgemm calls into one gate buffer, then a single pass (split across the thread pool by
// batch rows) that adds the biases and applies the nonlinearities; the backward runs the same way
// in reverse from the saved activations.
#include <algorithm>
#include <cmath>
#include <span>
#include <vector>

#include "../blas.h"
#include "../panels.h"
#include "kernels.h"
#include "seqgrad/core/autograd.h"
#include "seqgrad/core/ops.h"
#include "vector_math.h"

namespace seqgrad {
namespace {

// One batch row of a step, shared by lstm_cell and lstm_sequence. `row` holds the pre-activation
// gates [4H] (i, f, g, o), plus `bias` when kBias; they become the activations, in place, and
// c' = f * c + i * g, h' = o * tanh(c') are written.
template <bool kBias>
void gates_forward(float* __restrict row, const float* __restrict bias, const float* __restrict c_prev,
                   float* __restrict c_next, float* __restrict h_next, int64_t hidden) {
#pragma omp simd
    for (int64_t j = 0; j < hidden; ++j) {
        const float i = detail::fast_sigmoid(kBias ? row[j] + bias[j] : row[j]);
        const float f = detail::fast_sigmoid(kBias ? row[hidden + j] + bias[hidden + j] : row[hidden + j]);
        const float g = detail::fast_tanh(kBias ? row[2 * hidden + j] + bias[2 * hidden + j] : row[2 * hidden + j]);
        const float o = detail::fast_sigmoid(kBias ? row[3 * hidden + j] + bias[3 * hidden + j] : row[3 * hidden + j]);
        row[j] = i;
        row[hidden + j] = f;
        row[2 * hidden + j] = g;
        row[3 * hidden + j] = o;
        const float c = f * c_prev[j] + i * g;
        c_next[j] = c;
        h_next[j] = o * detail::fast_tanh(c);
    }
}

// The same row backwards: from the activations, c and c', and the gradients dh of h' and dc_next
// of c', the gradient of the pre-activation gates and dc_prev of c. dc_prev may be dc_next.
void gates_backward(const float* __restrict acts, const float* __restrict c_prev, const float* __restrict c_next,
                    const float* __restrict dh, const float* dc_next, float* __restrict d_gates, float* dc_prev,
                    int64_t hidden) {
#pragma omp simd
    for (int64_t j = 0; j < hidden; ++j) {
        const float i = acts[j], f = acts[hidden + j], g = acts[2 * hidden + j], o = acts[3 * hidden + j];
        const float tc = detail::fast_tanh(c_next[j]);
        const float dc_total = dc_next[j] + dh[j] * o * (1 - tc * tc);
        d_gates[j] = dc_total * g * i * (1 - i);
        d_gates[hidden + j] = dc_total * c_prev[j] * f * (1 - f);
        d_gates[2 * hidden + j] = dc_total * i * (1 - g * g);
        d_gates[3 * hidden + j] = dh[j] * tc * o * (1 - o);
        dc_prev[j] = dc_total * f;
    }
}

// The fewest rows each thread of lstm_sequence takes when it takes its own share of the batch
// through every step: where the recurrent weight's products run on sgemm or in panels split by
// rows (over 64 rows, or at the portable level) and the batch has 32 rows a thread. Each row's
// recurrence is its own, so the threads need not wait for each other between steps (two waits a
// step when the product splits the weight's columns), and a thread's gates follow its product
// while the rows are in its caches. At the avx2 level on an AMD EPYC, one 256-row layer of 12
// steps (hidden 256): forward 13.3-16.0 -> 11.1 ms, backward 17.5 ms either way (its product
// already split the rows); seq2seq/g2p's training step 2.5% faster. Each thread's products then
// read every panel of the weight (WeightPanels::multiply_here): 3% faster again than sgemm,
// which copies the weight at every step. oneDNN's products (the avx512 level) ran that step 4%
// slower split so, and keep the split by columns, as the panels do at 64 rows or fewer (each
// thread keeping its own half of the weight).
constexpr int64_t kRowsAlone = 32;
// A pool's thread calls the products only where they run on sgemm (weight_products_on_sgemm).
bool by_rows(int64_t batch, const detail::WeightPanels& panels) {
    const bool columns_split = panels.active() && batch <= detail::WeightPanels::kColumnSplitRows;
    return !columns_split && detail::weight_products_on_sgemm() && batch >= 2 * kRowsAlone;
}

// The grain that gives each thread one share of the rows, of at least kRowsAlone rows: the finer
// parts parallel_for cuts for balance would each run their products on fewer rows.
int64_t rows_grain(int64_t batch) { return std::max(kRowsAlone, batch / std::max(1, get_num_threads())); }

}  // namespace

LstmState lstm_cell(const Tensor& x, const LstmState& state, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                    const Tensor& b_hh) {
    const Tensor& h = state.h;
    const Tensor& c = state.c;
    check(x.defined() && h.defined() && c.defined() && w_ih.defined() && w_hh.defined(), "lstm_cell",
          "an operand is undefined");
    check(x.dim() == 2, "lstm_cell", "input must be [batch, in], got ", x.shape());
    const int64_t batch = x.size(0), in = x.size(1);
    check(h.dim() == 2 && h.size(0) == batch, "lstm_cell", "h ", h.shape(), " does not fit input ", x.shape());
    const int64_t hidden = h.size(1);
    check(c.shape() == h.shape(), "lstm_cell", "c ", c.shape(), " differs from h ", h.shape());
    check(w_ih.shape() == Shape{4 * hidden, in}, "lstm_cell", "w_ih ", w_ih.shape(), " should be [", 4 * hidden, ", ",
          in, "] for input ", x.shape(), " and h ", h.shape());
    check(w_hh.shape() == Shape{4 * hidden, hidden}, "lstm_cell", "w_hh ", w_hh.shape(), " should be [", 4 * hidden,
          ", ", hidden, "]");
    for (const Tensor* b : {&b_ih, &b_hh})
        check(!b->defined() || b->shape() == Shape{4 * hidden}, "lstm_cell", "bias ",
              b->defined() ? b->shape() : Shape{}, " should be [", 4 * hidden, "]");

    const int64_t g4 = 4 * hidden;
    // The two biases as one vector, added in the nonlinearity pass below.
    Tensor bias = Tensor::zeros({g4});
    for (const Tensor* b : {&b_ih, &b_hh}) {
        if (!b->defined()) continue;
        const float* pb = b->data();
        float* sum = bias.data();
        for (int64_t j = 0; j < g4; ++j) sum[j] += pb[j];
    }
    // Pre-activations x W_ih^T + h W_hh^T, then, in place, the activations after the
    // nonlinearities: [B, 4H] in the order i, f, g, o.
    Tensor gates = Tensor::empty({batch, g4});
    detail::gemm_weights(false, true, batch, g4, in, x.data(), w_ih.data(), gates.data(), false);
    detail::gemm_weights(false, true, batch, g4, hidden, h.data(), w_hh.data(), gates.data(), true);

    Tensor h_next = Tensor::empty({batch, hidden});
    Tensor c_next = Tensor::empty({batch, hidden});
    {
        float* __restrict pa = gates.data();
        const float* __restrict pbias = bias.data();
        const float* __restrict pc = c.data();
        float* __restrict ph = h_next.data();
        float* __restrict pcn = c_next.data();
        detail::parallel_for(batch, std::max<int64_t>(1, detail::kElementwiseGrain / g4),
                             [=](int64_t begin, int64_t end) {
            with_isa_level([&](auto) {
                for (int64_t b = begin; b < end; ++b)
                    gates_forward<true>(pa + b * g4, pbias, pc + b * hidden, pcn + b * hidden, ph + b * hidden, hidden);
            });
        });
    }

    auto outputs =
        record("lstm_cell", {h_next, c_next}, {x, h, c, w_ih, w_hh, b_ih, b_hh},
               [x, h, c, w_ih, w_hh, b_ih, b_hh, gates, c_next, batch, in, hidden](std::span<const Tensor> grads) {
        const int64_t g4 = 4 * hidden;
        Tensor dgates = Tensor::empty({batch, g4});  // gradient of the pre-activation gates
        Tensor dc = Tensor::empty({batch, hidden});
        const float* __restrict dh = grads[0].data();
        const float* __restrict dcn = grads[1].data();
        const float* __restrict pa = gates.data();
        const float* __restrict pc = c.data();
        const float* __restrict pcn = c_next.data();
        float* __restrict pd = dgates.data();
        float* __restrict pdc = dc.data();
        detail::parallel_for(batch, std::max<int64_t>(1, detail::kElementwiseGrain / g4),
                             [=](int64_t begin, int64_t end) {
            with_isa_level([&](auto) {
                for (int64_t b = begin; b < end; ++b)
                    gates_backward(pa + b * g4, pc + b * hidden, pcn + b * hidden, dh + b * hidden, dcn + b * hidden,
                                   pd + b * g4, pdc + b * hidden, hidden);
            });
        });
        Tensor dx, dh_prev, dw_ih, dw_hh, db;
        if (x.requires_grad()) {
            dx = Tensor::empty(x.shape());
            detail::gemm_weights(false, false, batch, in, g4, pd, w_ih.data(), dx.data(), false);
        }
        if (h.requires_grad()) {
            dh_prev = Tensor::empty(h.shape());
            detail::gemm_weights(false, false, batch, hidden, g4, pd, w_hh.data(), dh_prev.data(), false);
        }
        if (w_ih.requires_grad()) dw_ih = weight_gradient(w_ih, dgates, x, batch);
        if (w_hh.requires_grad()) dw_hh = weight_gradient(w_hh, dgates, h, batch);
        if (b_ih.requires_grad() || b_hh.requires_grad()) db = sum(dgates, {0});
        return std::vector<Tensor>{dx,
                                   dh_prev,
                                   c.requires_grad() ? dc : Tensor(),
                                   dw_ih,
                                   dw_hh,
                                   b_ih.requires_grad() ? db : Tensor(),
                                   b_hh.requires_grad() ? db : Tensor()};
        });
    return {outputs[0], outputs[1]};
}

// ---- a whole layer over a sequence ----

LstmSequence lstm_sequence(const Tensor& input_gates, const Tensor& h0, const Tensor& c0, const Tensor& w_hh,
                           const std::vector<int64_t>& lengths, bool reverse, bool time_major) {
    check(w_hh.defined() && w_hh.dim() == 2, "lstm_sequence", "w_hh must be [4 * hidden, hidden], got ",
          w_hh.defined() ? w_hh.shape() : Shape{});
    const bool shaped = input_gates.defined() && input_gates.dim() == 3;
    const int64_t batch = shaped ? input_gates.size(time_major ? 1 : 0) : 0;
    const int64_t steps = shaped ? input_gates.size(time_major ? 0 : 1) : 0;
    // W_hh laid out for this call's steps: h W_hh^T in the forward, d gates W_hh in the backward.
    const RepeatedWeight recurrent(w_hh, batch, steps);
    return lstm_sequence(input_gates, h0, c0, recurrent, lengths, reverse, time_major);
}

LstmSequence lstm_sequence(const Tensor& input_gates, const Tensor& h0, const Tensor& c0,
                           const RepeatedWeight& recurrent, const std::vector<int64_t>& lengths, bool reverse,
                           bool time_major) {
    const char* op = "lstm_sequence";
    const Tensor& w_hh = recurrent.tensor();
    check(input_gates.defined() && h0.defined() && c0.defined() && w_hh.defined(), op, "an operand is undefined");
    check(input_gates.dim() == 3 && input_gates.size(time_major ? 0 : 1) > 0 && input_gates.size(2) > 0 &&
              input_gates.size(2) % 4 == 0,
          op, "input gates must be ", time_major ? "[steps >= 1, batch" : "[batch, steps >= 1", ", 4 * hidden], got ",
          input_gates.shape());
    const int64_t batch = input_gates.size(time_major ? 1 : 0), steps = input_gates.size(time_major ? 0 : 1);
    const int64_t g4 = input_gates.size(2), hidden = g4 / 4;
    check(h0.shape() == Shape{batch, hidden} && c0.shape() == h0.shape(), op, "h0 ", h0.shape(), " and c0 ", c0.shape(),
          " must be [", batch, ", ", hidden, "]");
    check(w_hh.shape() == Shape{g4, hidden}, op, "w_hh ", w_hh.shape(), " should be [", g4, ", ", hidden, "]");
    check(lengths.empty() || static_cast<int64_t>(lengths.size()) == batch, op, lengths.size(),
          " lengths for a batch of ", batch);
    std::vector<int64_t> length(static_cast<size_t>(batch), steps);
    for (size_t b = 0; b < lengths.size(); ++b) {
        check(lengths[b] >= 0 && lengths[b] <= steps, op, "length ", lengths[b], " outside [0, ", steps, "]");
        length[b] = lengths[b];
    }
    const int64_t row_grain = std::max<int64_t>(1, detail::kElementwiseGrain / g4);
    // Row b at time t of the input gates, the outputs and their gradients.
    const auto row = [=](int64_t b, int64_t t) { return time_major ? t * batch + b : b * steps + t; };
    // Whether each step's rows of those lie together ([T, B] order, or a single step): the
    // backward then writes the gates' gradient in the order it returns it, where the recurrent
    // products read it, instead of a step-ordered copy besides.
    const bool steps_together = time_major || steps == 1;

    // Saved for backward, in processing order s = 0..steps-1 (time t = s, or steps-1-s in reverse):
    // the activations i, f, g, o of step s, and the cell state before step s (index steps: the
    // final). h before step s is hs[slot(s)]: s, or, where the steps' rows lie together, t, so
    // that W_hh's gradient pairs hs with the gates' gradient in its own order; index steps holds
    // the final h.
    Tensor acts = Tensor::empty({steps, batch, g4});
    Tensor hs = Tensor::empty({steps + 1, batch, hidden});
    Tensor cs = Tensor::empty({steps + 1, batch, hidden});
    Tensor outputs = Tensor::empty(time_major ? Shape{steps, batch, hidden} : Shape{batch, steps, hidden});
    // The time t of processing step s.
    const auto time_of = [=](int64_t s) { return reverse ? steps - 1 - s : s; };
    const auto slot = [=](int64_t s) { return s == steps ? steps : steps_together ? time_of(s) : s; };
    std::copy_n(h0.data(), batch * hidden, hs.data() + slot(0) * batch * hidden);
    std::copy_n(c0.data(), batch * hidden, cs.data());
    const float* px = input_gates.data();
    // Step s's input gates, [B, 4H], into acts[s], where the step's product adds to them: step 0's
    // here, each next step's by the threads of the step before, row by row.
    const auto take_inputs = [=, &acts](int64_t s, int64_t b) {
        const int64_t t = time_of(s);
        std::copy_n(px + row(b, t) * g4, g4, acts.data() + (s * batch + b) * g4);
    };
    const detail::WeightPanels& forward_panels = recurrent.forward_panels();  // h W_hh^T at every step
    float* out = outputs.data();
    // Step s of rows [begin, end) after its product: the gates, the new state and the output, then
    // the next step's inputs for the same rows.
    const auto step_rows = [&](int64_t s, int64_t begin, int64_t end) {
        const int64_t t = time_of(s);
        float* a = acts.data() + s * batch * g4;
        const float* h_prev = hs.data() + slot(s) * batch * hidden;
        const float* c_prev = cs.data() + s * batch * hidden;
        float* h_new = hs.data() + slot(s + 1) * batch * hidden;
        float* c_new = cs.data() + (s + 1) * batch * hidden;
        with_isa_level([&](auto) {
            for (int64_t b = begin; b < end; ++b) {
                float* __restrict y = out + row(b, t) * hidden;
                float* __restrict hn = h_new + b * hidden;
                float* __restrict cn = c_new + b * hidden;
                const float* __restrict hp = h_prev + b * hidden;
                const float* __restrict cp = c_prev + b * hidden;
                if (t >= length[static_cast<size_t>(b)]) {  // padding: the state passes through
                    std::copy_n(hp, hidden, hn);
                    std::copy_n(cp, hidden, cn);
                    std::fill_n(y, hidden, 0.0f);
                    continue;
                }
                gates_forward<false>(a + b * g4, nullptr, cp, cn, hn, hidden);
                std::copy_n(hn, hidden, y);
            }
            if (s + 1 < steps)
                for (int64_t b = begin; b < end; ++b) take_inputs(s + 1, b);
        });
    };
    const bool rows_alone = by_rows(batch, forward_panels);
    if (rows_alone) {
        // Each row's recurrence is its own: every thread takes its rows through all the steps,
        // its product on its own rows, with no wait for the other threads between steps.
        detail::parallel_for(batch, rows_grain(batch), [&](int64_t begin, int64_t end) {
            for (int64_t b = begin; b < end; ++b) take_inputs(0, b);
            for (int64_t s = 0; s < steps; ++s) {
                forward_panels.multiply_here(end - begin, hs.data() + (slot(s) * batch + begin) * hidden,
                                             acts.data() + (s * batch + begin) * g4, true);
                step_rows(s, begin, end);
            }
        });
    } else {
        detail::parallel_for(batch, row_grain, [&](int64_t begin, int64_t end) {
            for (int64_t b = begin; b < end; ++b) take_inputs(0, b);
        });
        for (int64_t s = 0; s < steps; ++s) {
            forward_panels.multiply(batch, hs.data() + slot(s) * batch * hidden, acts.data() + s * batch * g4, true);
            detail::parallel_for(batch, row_grain, [&](int64_t begin, int64_t end) { step_rows(s, begin, end); });
        }
    }
    Tensor h_n = Tensor::empty({batch, hidden}), c_n = Tensor::empty({batch, hidden});
    std::copy_n(hs.data() + steps * batch * hidden, batch * hidden, h_n.data());
    std::copy_n(cs.data() + steps * batch * hidden, batch * hidden, c_n.data());

    auto results = record(op, {outputs, h_n, c_n}, {input_gates, h0, c0, w_hh},
                          [acts, hs, cs, w_hh, backward_panels = recurrent.backward_panels(), length, batch, steps, g4,
                           hidden, row_grain, rows_alone, row, time_of, steps_together,
                           gates_shape = input_gates.shape()](std::span<const Tensor> grads) {
        const float* g_out = grads[0].data();
        Tensor d_gates = Tensor::empty(gates_shape);
        // The same in processing order [steps, batch, 4H], where the steps' rows do not lie together.
        Tensor d_steps = steps_together ? Tensor() : Tensor::empty({steps, batch, g4});
        // With respect to the state after step s; first the final state's gradients.
        Tensor dh = Tensor::empty({batch, hidden}), dc = Tensor::empty({batch, hidden});
        std::copy_n(grads[1].data(), batch * hidden, dh.data());
        std::copy_n(grads[2].data(), batch * hidden, dc.data());
        float* pdh = dh.data();
        float* pdc = dc.data();
        float* pd_gates = d_gates.data();
        // Step s of rows [begin, end) backwards, up to the gradient of the gates; then dh before the
        // step is d gates W_hh on real rows (padded rows have zero d gates and keep the dh that
        // passed through).
        const auto step_rows = [&](int64_t s, int64_t begin, int64_t end) {
            const int64_t t = time_of(s);
            const float* a = acts.data() + s * batch * g4;
            const float* c_prev = cs.data() + s * batch * hidden;
            const float* c_new = cs.data() + (s + 1) * batch * hidden;
            with_isa_level([&](auto) {
                for (int64_t b = begin; b < end; ++b) {
                    float* __restrict drow = steps_together ? pd_gates + row(b, t) * g4
                                                            : d_steps.data() + (s * batch + b) * g4;
                    if (t >= length[static_cast<size_t>(b)]) {  // padding: dh and dc pass through
                        std::fill_n(drow, g4, 0.0f);
                        if (!steps_together) std::fill_n(pd_gates + row(b, t) * g4, g4, 0.0f);
                        continue;
                    }
                    const float* go = g_out + row(b, t) * hidden;
                    float* dhb = pdh + b * hidden;
                    float* dcb = pdc + b * hidden;
                    for (int64_t j = 0; j < hidden; ++j) dhb[j] += go[j];  // h's gradient, output included
                    gates_backward(a + b * g4, c_prev + b * hidden, c_new + b * hidden, dhb, dcb, drow, dcb, hidden);
                    std::fill_n(dhb, hidden, 0.0f);  // replaced below by d gates W_hh
                    if (!steps_together) std::copy_n(drow, g4, pd_gates + row(b, t) * g4);
                }
            });
        };
        // The gates' gradient of step s from row `begin` on, where the recurrent products read it.
        const auto step_gradient = [&](int64_t s, int64_t begin) -> const float* {
            return steps_together ? pd_gates + row(begin, time_of(s)) * g4 : d_steps.data() + (s * batch + begin) * g4;
        };
        if (rows_alone && detail::weight_products_on_sgemm()) {  // as the forward, unless the products moved since
            // Laid out here: a pool's thread sees no backward pass under way.
            const std::shared_ptr<const detail::WeightPanels> panels = backward_panels->laid_out();
            detail::parallel_for(batch, rows_grain(batch), [&](int64_t begin, int64_t end) {
                for (int64_t s = steps - 1; s >= 0; --s) {
                    step_rows(s, begin, end);
                    panels->multiply_here(end - begin, step_gradient(s, begin), pdh + begin * hidden, true);
                }
            });
        } else {
            for (int64_t s = steps - 1; s >= 0; --s) {
                detail::parallel_for(batch, row_grain, [&](int64_t begin, int64_t end) { step_rows(s, begin, end); });
                backward_panels->multiply(batch, step_gradient(s, 0), pdh, true);
            }
        }
        // W_hh's gradient over every step at once: sum_s d gates_s^T h_s, hs in the gradient's order.
        const Tensor d_w_hh = w_hh.requires_grad()
                                  ? weight_gradient(w_hh, steps_together ? d_gates : d_steps, hs, steps * batch)
                                  : Tensor();
        return std::vector<Tensor>{d_gates, dh, dc, d_w_hh};
    });
    return {results[0], results[1], results[2]};
}

}  // namespace seqgrad
