// The caching allocator: free lists keyed by a rounded block size. Sizes are rounded up to a
// quarter of their power of two (at most 25% waste), so the many slightly different sizes of a
// model's activations share a handful of lists.
#include "seqgrad/core/allocator.h"

#include <cstdlib>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

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
    std::unordered_map<size_t, std::vector<void*>> free_lists;
    AllocatorStats stats;
};

// Never destroyed: tensors held in static objects may be freed after main returns.
Cache& cache() {
    static Cache* instance = new Cache;
    return *instance;
}

}  // namespace

namespace detail {

float* allocate_floats(int64_t numel) {
    if (numel <= 0) return nullptr;
    const size_t size = block_size(static_cast<size_t>(numel) * sizeof(float));
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mutex);
    void* block = nullptr;
    auto it = c.free_lists.find(size);
    if (it != c.free_lists.end() && !it->second.empty()) {
        block = it->second.back();
        it->second.pop_back();
        c.stats.cache_hits++;
        c.stats.bytes_cached -= static_cast<int64_t>(size);
        SEQGRAD_UNPOISON(block, size);
    } else {
        block = std::aligned_alloc(kAlignment, size);
        if (!block) throw std::bad_alloc();
        c.stats.system_allocations++;
    }
    c.stats.bytes_in_use += static_cast<int64_t>(size);
    c.stats.peak_bytes_in_use = std::max(c.stats.peak_bytes_in_use, c.stats.bytes_in_use);
    return static_cast<float*>(block);
}

void free_floats(float* block, int64_t numel) {
    if (!block) return;
    const size_t size = block_size(static_cast<size_t>(numel) * sizeof(float));
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mutex);
    SEQGRAD_POISON(block, size);
    c.free_lists[size].push_back(block);
    c.stats.bytes_in_use -= static_cast<int64_t>(size);
    c.stats.bytes_cached += static_cast<int64_t>(size);
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
    for (auto& [size, blocks] : c.free_lists) {
        for (void* block : blocks) {
            SEQGRAD_UNPOISON(block, size);
            std::free(block);
        }
    }
    c.free_lists.clear();
    c.stats.bytes_cached = 0;
}

}  // namespace seqgrad
