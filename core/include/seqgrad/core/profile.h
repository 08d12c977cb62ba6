// Where a forward and backward pass spend their time, operation by operation.
//
// While an OpProfileGuard installs an OpProfile on a thread, the autograd engine on that thread
// notes the time of every operation it records:
//   forward   an operation's time runs from the end of the previous recorded operation (or from
//             the profile's mark()) to the moment it records itself, so it includes the layer code
//             that ran between the two and whatever recorded nothing (integer indexing, checks)
//   backward  the time of the node's backward function, under the operation's name; the sums of
//             gradients that meet at a tensor are timed apart, as "accumulate"
// An operation's work on seqgrad's thread pool is inside its time (the pool runs while the
// calling thread waits). With no profile installed the cost is one thread-local load per
// recorded operation and per node of a backward pass; nothing computed changes either way.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>

namespace seqgrad {

struct OpTiming {
    double seconds = 0;
    int64_t calls = 0;
};

// Seconds on a steady clock (for timing phases around a profile).
double profile_clock();

class OpProfile {
public:
    using Clock = double (*)();  // seconds
    // `clock` times everything the profile notes: profile_clock, or a clock of a test's own.
    explicit OpProfile(Clock clock = profile_clock);

    double now() const { return clock_(); }

    // The next forward operation's time starts now (call it where the timed pass begins).
    void mark();
    // Times by operation name, summed over every call since construction or clear().
    std::map<std::string, OpTiming> forward() const;
    std::map<std::string, OpTiming> backward() const;
    OpTiming accumulate() const { return accumulate_; }
    void clear();

    // What the engine calls (autograd.cpp).
    void note_forward(const char* name);
    void note_backward(const char* name, double seconds);
    void note_accumulate(double seconds);

private:
    // Keyed by the name's pointer (names are string literals): no string is built per operation.
    std::unordered_map<const char*, OpTiming> forward_, backward_;
    OpTiming accumulate_;
    Clock clock_;
    double last_mark_ = 0;
};

namespace detail {
extern constinit thread_local OpProfile* active_op_profile;
}  // namespace detail

// Installs `profile` on this thread for the guard's lifetime (and marks it); the profile installed
// before, if any, is restored afterwards.
class OpProfileGuard {
public:
    explicit OpProfileGuard(OpProfile& profile);
    ~OpProfileGuard();
    OpProfileGuard(const OpProfileGuard&) = delete;
    OpProfileGuard& operator=(const OpProfileGuard&) = delete;

private:
    OpProfile* previous_;
};

// The broad kind of an operation, by its name: "products" (linear, matmul), "attention",
// "layer_norm", "softmax_loss" (softmax, log_softmax, cross_entropy), "dropout", "elementwise"
// (add, mul, relu, gelu, ...), "embedding" (embedding, index_select), "shape" (reshape, permute,
// slice, concat, split), "reduce" (sum, max), "lstm"; "other" for a name it does not know.
const char* op_kind(const std::string& name);

}  // namespace seqgrad
