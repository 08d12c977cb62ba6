// The caching allocator behind every tensor's storage. Freed blocks go to a per-size free list
// and are handed out again, so a training loop reaches a steady state in which a step asks the
// system for no memory at all. A request that finds no free block of its own size takes a free
// block up to twice as large before asking the system, so batches of varying shapes (bucketed
// by length) reuse each other's memory instead of each keeping their own. Blocks are 64-byte
// aligned (AVX-512 loads). A request that would take the tensors past the machine's physical
// memory (or its control group's limit) first frees the cache, then throws seqgrad::Error.
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
// A block of at least numel floats; `bytes` is its real size, to give back to free_floats.
struct Block {
    float* data = nullptr;
    size_t bytes = 0;
};
Block allocate_floats(int64_t numel);
void free_floats(const Block& block);
}  // namespace detail

}  // namespace seqgrad
