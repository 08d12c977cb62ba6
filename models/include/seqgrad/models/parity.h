// Parity with PyTorch (docs/parity.md): check_fixture loads a fixture file that PyTorch wrote, rebuilds
// the model (or layer) from its config and weights, runs forward and backward, and compares every
// tensor PyTorch recorded. `seqgrad check` prints what it returns.
#pragma once

#include <string>
#include <vector>

#include "seqgrad/core/precision.h"

namespace seqgrad::models {

// An element passes when |actual - expected| <= atol + rtol * |expected|. The defaults are the
// float32 parity bound of docs/parity.md: atol 5e-6, rtol 1e-5, about four times the largest error
// seen over every committed fixture at every kernel level (1.2e-6 absolute). bf16_tolerance() is
// bfloat16's.
//
// With rel_l2 > 0 a tensor is judged as a whole instead: it passes when
// ||actual - expected|| <= rel_l2 ||expected|| + atol sqrt(n), a relative L2 error of at most
// rel_l2 or an error no larger than atol in root mean square (for gradients that are zero in exact
// arithmetic, such as a key bias's, float noise in both programs). That is the measure for bfloat16 products
// (check_fixture's `precision`), which move every element by up to a few parts in a thousand of
// the operands it came from, so that elements near zero fail any elementwise bound.
struct Tolerance {
    double atol = 5e-6;
    double rtol = 1e-5;
    double rel_l2 = 0;
};

// bfloat16 products against PyTorch's float32 values (docs/parity.md): each tensor within a
// relative L2 error of 0.25, or 1e-4 in root mean square.
inline Tolerance bf16_tolerance() { return Tolerance{1e-4, 1e-3, 0.25}; }

struct TensorCheck {
    std::string name;          // e.g. "expect.logits", "expect.grad.output.weight", "adam.losses"
    double max_abs_error = 0;  // max |actual - expected|
    double max_rel_error = 0;  // max |actual - expected| / |expected| over elements with |expected| >= atol
    double rel_l2_error = 0;   // ||actual - expected|| / ||expected|| (0 when both are zero)
    bool ok = true;
    std::string problem;  // why it could not be compared (a missing tensor, a shape), if so
};

struct FixtureResult {
    std::string path;
    std::string kind;  // the config's "model"
    std::vector<TensorCheck> checks;
    std::vector<std::string> notes;  // e.g. config keys that were ignored
    bool ok() const;
};

// Checks one fixture, its products in `precision` (float32 or bf16: precision.h; Error where bf16
// is not available). A file that is not a valid fixture (unreadable, corrupt, wrong names or
// shapes, an unknown model) throws seqgrad::Error naming the file and the problem.
//
// Kinds: "transformer", "seq2seq", "attn_seq2seq" (docs/parity.md's format; with metadata "adam" and
// expect.losses, also N steps of Adam), and two single-layer kinds defined by
// tests/fixtures/make_fixtures.py: "lstm" and "multi_head_attention".
FixtureResult check_fixture(const std::string& path, const Tolerance& tolerance = {},
                            Precision precision = Precision::float32);

}  // namespace seqgrad::models
