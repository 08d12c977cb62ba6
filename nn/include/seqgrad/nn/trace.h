// Tracing: layers report what they compute (their output, and for attention its intermediate
// results) to a recorder while one is installed on the thread, so a program can show every
// layer's shapes (`seqgrad summary`). With no recorder installed a report is one check of a
// thread-local pointer; nothing is recorded and no result changes either way.
#pragma once

#include <string_view>

#include "seqgrad/core/tensor.h"

namespace seqgrad::nn {

class Module;

// Receives the reports of the layers that run on its thread while a TraceGuard installs it.
class TraceRecorder {
public:
    virtual ~TraceRecorder() = default;
    // `module` computed `value`. `step` names an intermediate result ("scores", "weights"); it is
    // empty for the module's output.
    virtual void record(const Module& module, std::string_view step, const Tensor& value) = 0;
};

namespace detail {
// constinit: a plain thread-local pointer, so reading it needs no initialisation check.
extern constinit thread_local TraceRecorder* active_trace_recorder;
}  // namespace detail

// Installs `recorder` on this thread for the guard's lifetime; the recorder installed before (if
// any) is restored afterwards, so guards nest.
class TraceGuard {
public:
    explicit TraceGuard(TraceRecorder& recorder);
    ~TraceGuard();
    TraceGuard(const TraceGuard&) = delete;
    TraceGuard& operator=(const TraceGuard&) = delete;

private:
    TraceRecorder* previous_;
};

// Whether a recorder is installed on this thread (a layer may then take a slower path that
// reports its intermediate results).
inline bool tracing() { return detail::active_trace_recorder != nullptr; }

// What layers call from their forward().
inline void trace(const Module& module, std::string_view step, const Tensor& value) {
    if (detail::active_trace_recorder != nullptr) [[unlikely]]
        detail::active_trace_recorder->record(module, step, value);
}
inline void trace(const Module& module, const Tensor& output) { trace(module, {}, output); }

}  // namespace seqgrad::nn
