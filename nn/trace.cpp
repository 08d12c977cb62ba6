// The thread's trace recorder and the guard that installs it (trace.h).
#include "seqgrad/nn/trace.h"

namespace seqgrad::nn {

namespace detail {
constinit thread_local TraceRecorder* active_trace_recorder = nullptr;
}  // namespace detail

TraceGuard::TraceGuard(TraceRecorder& recorder) : previous_(detail::active_trace_recorder) {
    detail::active_trace_recorder = &recorder;
}

TraceGuard::~TraceGuard() { detail::active_trace_recorder = previous_; }

}  // namespace seqgrad::nn
