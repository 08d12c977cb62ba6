// One step of an LSTM, as PyTorch's nn.LSTM computes it (gates in the order i, f, g, o):
//   gates = x W_ih^T + b_ih + h W_hh^T + b_hh           [B, 4H]
//   i, f, o = sigmoid(.), g = tanh(.)
//   c' = f * c + i * g,  h' = o * tanh(c')
// Fused: two sgemm calls into one gate buffer, then a single pass for the nonlinearities; the
// backward runs the same way in reverse from the saved activations.
#include <cmath>

#include "../blas.h"
#include "kernels.h"
#include "seqgrad/core/autograd.h"
#include "seqgrad/core/ops.h"
#include "vector_math.h"

namespace seqgrad {
LstmState lstm_cell(const Tensor& x, const LstmState& state, const Tensor& w_ih, const Tensor& w_hh,
                    const Tensor& b_ih, const Tensor& b_hh) {
    const Tensor& h = state.h;
    const Tensor& c = state.c;
    check(x.defined() && h.defined() && c.defined() && w_ih.defined() && w_hh.defined(), "lstm_cell",
          "an operand is undefined");
    check(x.dim() == 2, "lstm_cell", "input must be [batch, in], got ", x.shape());
    const int64_t batch = x.size(0), in = x.size(1);
    check(h.dim() == 2 && h.size(0) == batch, "lstm_cell", "h ", h.shape(), " does not fit input ", x.shape());
    const int64_t hidden = h.size(1);
    check(c.shape() == h.shape(), "lstm_cell", "c ", c.shape(), " differs from h ", h.shape());
    check(w_ih.shape() == Shape{4 * hidden, in}, "lstm_cell", "w_ih ", w_ih.shape(), " should be [",
          4 * hidden, ", ", in, "] for input ", x.shape(), " and h ", h.shape());
    check(w_hh.shape() == Shape{4 * hidden, hidden}, "lstm_cell", "w_hh ", w_hh.shape(), " should be [",
          4 * hidden, ", ", hidden, "]");
    for (const Tensor* b : {&b_ih, &b_hh})
        check(!b->defined() || b->shape() == Shape{4 * hidden}, "lstm_cell", "bias ", b->shape(), " should be [",
              4 * hidden, "]");

    const int64_t g4 = 4 * hidden;
    // Activations after the nonlinearities, [B, 4H] in the order i, f, g, o.
    Tensor gates = Tensor::empty({batch, g4});
    float* pa = gates.data();
    for (int64_t b = 0; b < batch; ++b)
        for (int64_t j = 0; j < g4; ++j)
            pa[b * g4 + j] = (b_ih.defined() ? b_ih.data()[j] : 0.0f) + (b_hh.defined() ? b_hh.data()[j] : 0.0f);
    detail::gemm(false, true, batch, g4, in, x.data(), w_ih.data(), pa, true);
    detail::gemm(false, true, batch, g4, hidden, h.data(), w_hh.data(), pa, true);

    Tensor h_next = Tensor::empty({batch, hidden});
    Tensor c_next = Tensor::empty({batch, hidden});
    const float* pc = c.data();
    float* ph = h_next.data();
    float* pcn = c_next.data();
    for (int64_t b = 0; b < batch; ++b) {
        float* row = pa + b * g4;
        for (int64_t j = 0; j < hidden; ++j) {
            const float i = detail::fast_sigmoid(row[j]);
            const float f = detail::fast_sigmoid(row[hidden + j]);
            const float g = detail::fast_tanh(row[2 * hidden + j]);
            const float o = detail::fast_sigmoid(row[3 * hidden + j]);
            row[j] = i;
            row[hidden + j] = f;
            row[2 * hidden + j] = g;
            row[3 * hidden + j] = o;
            const float cn = f * pc[b * hidden + j] + i * g;
            pcn[b * hidden + j] = cn;
            ph[b * hidden + j] = o * detail::fast_tanh(cn);
        }
    }

    auto outputs = record("lstm_cell", {h_next, c_next}, {x, h, c, w_ih, w_hh, b_ih, b_hh},
        [x, h, c, w_ih, w_hh, b_ih, b_hh, gates, c_next, batch, in, hidden](std::span<const Tensor> grads) {
            const int64_t g4 = 4 * hidden;
            const float* dh = grads[0].data();
            const float* dcn = grads[1].data();
            const float* pa = gates.data();
            const float* pc = c.data();
            const float* pcn = c_next.data();
            Tensor dgates = Tensor::empty({batch, g4});  // gradient of the pre-activation gates
            Tensor dc = Tensor::empty({batch, hidden});
            float* pd = dgates.data();
            float* pdc = dc.data();
            for (int64_t b = 0; b < batch; ++b)
                for (int64_t j = 0; j < hidden; ++j) {
                    const int64_t k = b * hidden + j;
                    const float* row = pa + b * g4;
                    const float i = row[j], f = row[hidden + j], g = row[2 * hidden + j], o = row[3 * hidden + j];
                    const float tc = detail::fast_tanh(pcn[k]);
                    const float dc_total = dcn[k] + dh[k] * o * (1 - tc * tc);
                    float* drow = pd + b * g4;
                    drow[j] = dc_total * g * i * (1 - i);
                    drow[hidden + j] = dc_total * pc[k] * f * (1 - f);
                    drow[2 * hidden + j] = dc_total * i * (1 - g * g);
                    drow[3 * hidden + j] = dh[k] * tc * o * (1 - o);
                    pdc[k] = dc_total * f;
                }
            Tensor dx, dh_prev, dw_ih, dw_hh, db;
            if (x.requires_grad()) {
                dx = Tensor::empty(x.shape());
                detail::gemm(false, false, batch, in, g4, pd, w_ih.data(), dx.data(), false);
            }
            if (h.requires_grad()) {
                dh_prev = Tensor::empty(h.shape());
                detail::gemm(false, false, batch, hidden, g4, pd, w_hh.data(), dh_prev.data(), false);
            }
            if (w_ih.requires_grad()) {
                dw_ih = Tensor::empty(w_ih.shape());
                detail::gemm(true, false, g4, in, batch, pd, x.data(), dw_ih.data(), false);
            }
            if (w_hh.requires_grad()) {
                dw_hh = Tensor::empty(w_hh.shape());
                detail::gemm(true, false, g4, hidden, batch, pd, h.data(), dw_hh.data(), false);
            }
            if (b_ih.requires_grad() || b_hh.requires_grad()) db = sum(dgates, {0});
            return std::vector<Tensor>{dx, dh_prev, c.requires_grad() ? dc : Tensor(), dw_ih, dw_hh,
                                       b_ih.requires_grad() ? db : Tensor(), b_hh.requires_grad() ? db : Tensor()};
        });
    return {outputs[0], outputs[1]};
}

}  // namespace seqgrad
