// The operation profile (profile.h): a thread's table of forward and backward times by name.
#include "seqgrad/core/profile.h"

#include <chrono>
#include <string_view>

namespace seqgrad {

namespace detail {
constinit thread_local OpProfile* active_op_profile = nullptr;
}  // namespace detail

double profile_clock() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

OpProfile::OpProfile(Clock clock) : clock_(clock), last_mark_(clock()) {}

void OpProfile::mark() { last_mark_ = now(); }

void OpProfile::clear() {
    forward_.clear();
    backward_.clear();
    accumulate_ = {};
    mark();
}

void OpProfile::note_forward(const char* name) {
    const double at = now();
    OpTiming& t = forward_[name];
    t.seconds += at - last_mark_;
    ++t.calls;
    last_mark_ = at;
}

void OpProfile::note_backward(const char* name, double seconds) {
    OpTiming& t = backward_[name];
    t.seconds += seconds;
    ++t.calls;
}

void OpProfile::note_accumulate(double seconds) {
    accumulate_.seconds += seconds;
    ++accumulate_.calls;
}

namespace {
// Merges the entries whose names are equal strings (the same literal in two files may have two
// addresses).
std::map<std::string, OpTiming> by_name(const std::unordered_map<const char*, OpTiming>& table) {
    std::map<std::string, OpTiming> merged;
    for (const auto& [name, timing] : table) {
        OpTiming& t = merged[name];
        t.seconds += timing.seconds;
        t.calls += timing.calls;
    }
    return merged;
}
}  // namespace

std::map<std::string, OpTiming> OpProfile::forward() const { return by_name(forward_); }

std::map<std::string, OpTiming> OpProfile::backward() const { return by_name(backward_); }

OpProfileGuard::OpProfileGuard(OpProfile& profile) : previous_(detail::active_op_profile) {
    detail::active_op_profile = &profile;
    profile.mark();
}

OpProfileGuard::~OpProfileGuard() { detail::active_op_profile = previous_; }

const char* op_kind(const std::string& name) {
    struct Kind {
        std::string_view op;
        const char* kind;
    };
    static constexpr Kind kKinds[] = {
        {"linear", "products"},
        {"matmul", "products"},
        {"weight_gradients", "products"},
        {"attention", "attention"},
        {"gathered_attention", "attention"},
        {"layer_norm", "layer_norm"},
        {"softmax", "softmax_loss"},
        {"log_softmax", "softmax_loss"},
        {"cross_entropy", "softmax_loss"},
        {"log_softmax_top_k", "softmax_loss"},
        {"dropout", "dropout"},
        {"add", "elementwise"},
        {"sub", "elementwise"},
        {"mul", "elementwise"},
        {"div", "elementwise"},
        {"add_scalar", "elementwise"},
        {"mul_scalar", "elementwise"},
        {"neg", "elementwise"},
        {"exp", "elementwise"},
        {"log", "elementwise"},
        {"pow", "elementwise"},
        {"sqrt", "elementwise"},
        {"add_dropout", "dropout"},
        {"relu_dropout", "dropout"},
        {"gelu_dropout", "dropout"},
        {"relu", "elementwise"},
        {"gelu", "elementwise"},
        {"sigmoid", "elementwise"},
        {"tanh", "elementwise"},
        {"where", "elementwise"},
        {"embedding", "embedding"},
        {"index_select", "embedding"},
        {"reshape", "shape"},
        {"permute", "shape"},
        {"slice", "shape"},
        {"concat", "shape"},
        {"split", "shape"},
        {"chunk", "shape"},
        {"stack", "shape"},
        {"transpose", "shape"},
        {"clone", "shape"},
        {"sum", "reduce"},
        {"mean", "reduce"},
        {"sum_to", "reduce"},
        {"max", "reduce"},
        {"lstm_cell", "lstm"},
        {"lstm_sequence", "lstm"},
    };
    for (const Kind& k : kKinds)
        if (k.op == name) return k.kind;
    return "other";
}

}  // namespace seqgrad
