// set_num_threads: the size of seqgrad's thread pool. OpenBLAS always runs single-threaded inside
// each call; seqgrad splits large products and batches of small ones across the pool itself, so
// the two never compete for the cores.
#include "seqgrad/core/threads.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <set>
#include <thread>

#include "blas.h"
#include "parallel.h"
#include "seqgrad/core/error.h"
#include "thread_pool.h"

namespace seqgrad {
namespace {

std::atomic<int>& thread_count() {  // read by every thread that runs parallel work
    static std::atomic<int> count = [] {
        openblas_set_num_threads(1);
        // OpenBLAS starts a thread for each further core as it loads, and each polls for work
        // (sched_yield in a loop) for about a second before it sleeps: a third thread on the cores
        // while seqgrad's own start their work. seqgrad never gives them any, so they are stopped.
        if (blas_thread_shutdown_ != nullptr) blas_thread_shutdown_();
        const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
        detail::ThreadPool::instance().resize(cores);
        return cores;
    }();
    return count;
}

}  // namespace

void set_num_threads(int n) {
    check(n >= 1, "set_num_threads", "the number of threads must be at least 1, got ", n);
    thread_count();  // settle the default first, so it cannot overwrite n later
    detail::ThreadPool::instance().resize(n);
    thread_count() = n;
}

int get_num_threads() { return thread_count(); }

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t begin, int64_t end)>& body) {
    detail::parallel_for(n, grain, body);
}

int64_t balanced_grain(int64_t n, int64_t least) {
    return std::clamp<int64_t>(n / get_num_threads(), 1, std::max<int64_t>(least, 1));
}

std::string blas_core_name() {
    const char* name = openblas_get_corename();
    return name ? name : "";
}

std::string blas_core_for_cpu() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    // OpenBLAS's x86-64 cores without AVX2 kernels.
    static const std::set<std::string> old = {"Prescott",   "Core2",   "Penryn",      "Dunnington",
                                              "Nehalem",    "Atom",    "Sandybridge", "Bulldozer",
                                              "Piledriver", "Opteron", "Barcelona"};
    if (!old.count(blas_core_name())) return "";
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")) return "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
#endif
    return "";
}

std::string blas_kernel_warning() {
    const std::string better = blas_core_for_cpu();
    if (better.empty()) return "";
    const char* set = std::getenv("OPENBLAS_CORETYPE");
    return "OpenBLAS runs its " + blas_core_name() + " kernels on a CPU with " +
           (better == "SkylakeX" ? "AVX-512" : "AVX2") +
           (set && *set ? " (OPENBLAS_CORETYPE=" + std::string(set) + ")" : " (it did not recognise the CPU)") +
           ": matrix products run several times slower than they could; start the program with "
           "OPENBLAS_CORETYPE=" +
           better + " in the environment";
}

void restart_with_blas_core(char** argv) {
    const char* set = std::getenv("OPENBLAS_CORETYPE");
    if (set != nullptr && *set != '\0') return;
    const std::string core = blas_core_for_cpu();
    if (core.empty()) return;
    setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
    setenv("SEQGRAD_BLAS_CORE_RESTART", core.c_str(), 1);
    execv("/proc/self/exe", argv);
    unsetenv("OPENBLAS_CORETYPE");
    unsetenv("SEQGRAD_BLAS_CORE_RESTART");
}

bool blas_core_set_by_restart() {
    const char* set = std::getenv("OPENBLAS_CORETYPE");
    const char* restart = std::getenv("SEQGRAD_BLAS_CORE_RESTART");
    return set != nullptr && restart != nullptr && *set != '\0' && std::string(set) == restart;
}

}  // namespace seqgrad
