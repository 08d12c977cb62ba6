// Scratch<T>: a thread's buffer for a call's temporaries (thread_local Scratch<float> buffer;
// float* p = buffer.get(n);). It grows when a call needs more and never clears what it holds:
// std::vector's resize zeroes every element past its last size, megabytes each time a large
// product follows a small one on the same thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace seqgrad::detail {

template <typename T>
class Scratch {
public:
    // Room for n values (uninitialised), valid until the next get() of more than it holds.
    T* get(int64_t n) {
        if (static_cast<size_t>(n) > size_) {
            data_.reset(new T[static_cast<size_t>(n)]);
            size_ = static_cast<size_t>(n);
        }
        return data_.get();
    }

private:
    std::unique_ptr<T[]> data_;
    size_t size_ = 0;
};

}  // namespace seqgrad::detail
