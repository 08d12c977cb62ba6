// OpenBLAS starts a thread for each further core as it loads; seqgrad runs it single-threaded and
// stops them when it settles its own threads (core/threads.cpp). Run as a process of its own, so
// that no other test's threads are counted: the process's threads before and after, from
// /proc/self/task. Exits 77 (skipped) where OpenBLAS started none (one core, or a BLAS without
// threads of its own), 1 if any is left.
#include <cstdio>
#include <filesystem>

#include "seqgrad/core/threads.h"

namespace {

int threads_now() {
    int n = 0;
    for ([[maybe_unused]] const auto& task : std::filesystem::directory_iterator("/proc/self/task")) ++n;
    return n;
}

}  // namespace

int main() {
    const int at_load = threads_now();  // this thread and OpenBLAS's
    if (at_load == 1) {
        std::printf("OpenBLAS started no threads of its own here: nothing to check\n");
        return 77;
    }
    seqgrad::set_num_threads(1);  // seqgrad's pool: no workers
    const int after = threads_now();
    std::printf("threads at load %d, after seqgrad settled its own at one %d\n", at_load, after);
    if (after != 1) {
        std::printf("OpenBLAS's threads are still there\n");
        return 1;
    }
    return 0;
}
