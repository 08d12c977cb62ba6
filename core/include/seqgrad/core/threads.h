// One knob for all parallelism: OpenBLAS's threads and seqgrad's own loops. Work is split into
// fixed chunks (a few a thread, a thread done with its own taking those another has not started),
// so a result is bit-identical run to run for a given thread count.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace seqgrad {

// Several of the caller's threads may use seqgrad at once: one at a time has the pool, and the
// others run their parallel work alone, split the same way, so with the same results.
// set_num_threads waits for the parallel work running then; it must not be called from inside it.
void set_num_threads(int n);  // n >= 1; the default is the number of cores
int get_num_threads();

// Calls body(begin, end) on disjoint ranges covering [0, n) of at least `grain` items, up to four
// a thread of seqgrad's pool and as many for every thread, each thread first taking its own, then
// those another thread has not started (serially when n is below `grain` items per thread, or when
// called from inside the pool). For loops whose items are independent, such as an optimizer's
// update of each element: a result that depends only on its own item is the same for any thread
// count.
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t begin, int64_t end)>& body);
// A grain for parallel_for whose parts each pay a fixed cost (a copy of an operand, a slice's
// set-up): `least` items a part where the loop has that many a thread, so that a thread done with
// its own takes a slower one's, and an even share a thread where it has fewer.
int64_t balanced_grain(int64_t n, int64_t least);

// The CPU kernels OpenBLAS chose at start-up: its core name ("SkylakeX", "Haswell", "Prescott", ...).
std::string blas_core_name();
// Where OpenBLAS runs kernels far older than the CPU supports (it did not recognise the CPU and fell
// back to a generic x86-64 core such as Prescott, on a CPU with AVX2 or AVX-512), the
// OPENBLAS_CORETYPE value that gives the right ones: "SkylakeX" (AVX-512) or "Haswell" (AVX2);
// empty otherwise.
std::string blas_core_for_cpu();
// When OpenBLAS runs kernels far older than the CPU supports (it did not recognise the CPU and fell
// back to a generic x86-64 core such as Prescott, on a CPU with AVX2 or AVX-512), a warning naming
// the OPENBLAS_CORETYPE setting that gives the right ones (products 4-5x faster); empty otherwise.
// OPENBLAS_CORETYPE is read when OpenBLAS loads, so it must be set before the program starts.
std::string blas_kernel_warning();
// For a program's main(), before anything else (MPI included) has begun: where OpenBLAS runs
// generic kernels (blas_core_for_cpu() names a better core) and the environment names no core, starts
// the program again (execv of /proc/self/exe with argv) with OPENBLAS_CORETYPE set to the CPU's core
// and SEQGRAD_BLAS_CORE_RESTART set to the same name, so that the new process can tell the setting
// was made for it. A core the environment names is kept; if starting again fails, returns and the
// program runs on with the kernels it has.
void restart_with_blas_core(char** argv);
// Whether this process was started again by restart_with_blas_core (and runs the core it named).
bool blas_core_set_by_restart();

}  // namespace seqgrad
