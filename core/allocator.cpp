// The caching allocator: free lists keyed by a rounded block size. Sizes are rounded up to a
// quarter of their power of two (at most 25% waste), so the many slightly different sizes of a
// model's activations share a handful of lists. A request whose own list is empty takes the
// smallest free block of at most twice its size before asking the system: when batch shapes vary
// from step to step, the blocks of a large batch serve the next smaller one, and the cache grows
// to the largest step's needs rather than to the sum of every shape's.
#include "seqgrad/core/allocator.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "seqgrad/core/error.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define SEQGRAD_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define SEQGRAD_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define SEQGRAD_POISON(p, n) ((void)(p), (void)(n))
#define SEQGRAD_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace seqgrad {
namespace {

constexpr size_t kAlignment = 64;

size_t block_size(size_t bytes) {
    if (bytes <= 1024) return (bytes + kAlignment - 1) / kAlignment * kAlignment;
    size_t power = 1;
    while (power * 2 <= bytes) power *= 2;
    const size_t step = power / 4;
    return (bytes + step - 1) / step * step;
}

struct Cache {
    std::mutex mutex;
    std::map<size_t, std::vector<void*>> free_lists;  // by block size, ascending
    AllocatorStats stats;
};

// Never destroyed: tensors held in static objects may be freed after main returns.
Cache& cache() {
    static Cache* instance = new Cache;
    return *instance;
}

// The memory seqgrad's tensors may hold in all: the machine's physical memory, or the limit of
// its control group (a container's) when that is lower.
size_t memory_limit() {
    static const size_t limit = [] {
        size_t bytes = static_cast<size_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<size_t>(sysconf(_SC_PAGE_SIZE));
        std::ifstream cgroup("/sys/fs/cgroup/memory.max");
        unsigned long long cgroup_bytes = 0;
        if (cgroup >> cgroup_bytes && cgroup_bytes > 0) bytes = std::min(bytes, static_cast<size_t>(cgroup_bytes));
        return bytes;
    }();
    return limit;
}

std::string gib(size_t bytes) {
    char text[32];
    std::snprintf(text, sizeof text, "%.1f GiB", static_cast<double>(bytes) / (1u << 30));
    return text;
}

// Frees the cached blocks; the caller holds the lock.
void release_cached(Cache& c) {
    for (auto& [size, blocks] : c.free_lists) {
        for (void* block : blocks) {
            SEQGRAD_UNPOISON(block, size);
            std::free(block);
        }
    }
    c.free_lists.clear();
    c.stats.bytes_cached = 0;
}

}  // namespace

namespace detail {

Block allocate_floats(int64_t numel) {
    if (numel <= 0) return {};
    check(static_cast<uint64_t>(numel) <= SIZE_MAX / sizeof(float) / 2, "allocator", "a tensor of ", numel,
          " floats is beyond any memory");
    const size_t size = block_size(static_cast<size_t>(numel) * sizeof(float));
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mutex);
    // The smallest nonempty list of blocks in [size, 2 size]; the exact size comes first.
    for (auto it = c.free_lists.lower_bound(size); it != c.free_lists.end() && it->first <= 2 * size; ++it) {
        if (it->second.empty()) continue;
        void* block = it->second.back();
        it->second.pop_back();
        c.stats.cache_hits++;
        c.stats.bytes_cached -= static_cast<int64_t>(it->first);
        c.stats.bytes_in_use += static_cast<int64_t>(it->first);
        c.stats.peak_bytes_in_use = std::max(c.stats.peak_bytes_in_use, c.stats.bytes_in_use);
        SEQGRAD_UNPOISON(block, it->first);
        return {static_cast<float*>(block), it->first};
    }
    // A request the machine cannot hold is an error now, rather than the system's out-of-memory
    // killer later (Linux grants more than it has and ends the process when pages are touched).
    const auto in_use = static_cast<size_t>(c.stats.bytes_in_use);
    if (in_use + static_cast<size_t>(c.stats.bytes_cached) + size > memory_limit()) release_cached(c);
    check(size <= memory_limit() && in_use <= memory_limit() - size, "allocator", "cannot allocate ", gib(size),
          " for a tensor of ", numel, " floats: seqgrad's tensors already hold ", gib(in_use), " of this machine's ",
          gib(memory_limit()));
    void* block = std::aligned_alloc(kAlignment, size);
    check(block != nullptr, "allocator", "the system refused ", gib(size), " for a tensor of ", numel, " floats (",
          gib(in_use), " already in use)");
    c.stats.system_allocations++;
    c.stats.bytes_in_use += static_cast<int64_t>(size);
    c.stats.peak_bytes_in_use = std::max(c.stats.peak_bytes_in_use, c.stats.bytes_in_use);
    return {static_cast<float*>(block), size};
}

void free_floats(const Block& block) {
    if (!block.data) return;
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mutex);
    SEQGRAD_POISON(block.data, block.bytes);
    c.free_lists[block.bytes].push_back(block.data);
    c.stats.bytes_in_use -= static_cast<int64_t>(block.bytes);
    c.stats.bytes_cached += static_cast<int64_t>(block.bytes);
}

}  // namespace detail

AllocatorStats allocator_stats() {
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mutex);
    return c.stats;
}

void reset_peak_bytes_in_use() {
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mutex);
    c.stats.peak_bytes_in_use = c.stats.bytes_in_use;
}

void empty_cache() {
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mutex);
    release_cached(c);
}

}  // namespace seqgrad
