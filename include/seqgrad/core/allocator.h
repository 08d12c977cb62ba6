// The caching allocator behind every tensor's storage. Freed blocks go to a per-size free list
// and are handed out again, so a training loop reaches a steady state in which a step asks the
// system for no memory at all. Blocks are 64-byte aligned (AVX-512 loads).
#pragma once

#include <cstddef>
#include <cstdint>

namespace seqgrad {

struct AllocatorStats {
    int64_t system_allocations = 0;  // blocks obtained from the system, ever
    int64_t cache_hits = 0;          // requests served from the free lists
    int64_t bytes_in_use = 0;        // held by live tensors
    int64_t bytes_cached = 0;        // free, kept for reuse
    int64_t peak_bytes_in_use = 0;
};

AllocatorStats allocator_stats();
void reset_peak_bytes_in_use();
// Returns every cached block to the system.
void empty_cache();

namespace detail {
float* allocate_floats(int64_t numel);
void free_floats(float* block, int64_t numel);
}  // namespace detail

}  // namespace seqgrad
