// Shape: the extents of a tensor, any rank, printable as "[2, 3, 4]".
#pragma once

#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <vector>

namespace seqgrad {

class Shape {
public:
    Shape() = default;
    Shape(std::initializer_list<int64_t> dims) : dims_(dims) {}
    explicit Shape(std::vector<int64_t> dims) : dims_(std::move(dims)) {}
    template <typename It>
    Shape(It first, It last) : dims_(first, last) {}

    int64_t rank() const { return static_cast<int64_t>(dims_.size()); }
    size_t size() const { return dims_.size(); }
    bool empty() const { return dims_.empty(); }
    int64_t operator[](size_t i) const { return dims_[i]; }
    int64_t& operator[](size_t i) { return dims_[i]; }
    int64_t back() const { return dims_.back(); }
    auto begin() const { return dims_.begin(); }
    auto end() const { return dims_.end(); }
    void push_back(int64_t d) { dims_.push_back(d); }
    void insert(size_t at, int64_t d) { dims_.insert(dims_.begin() + static_cast<std::ptrdiff_t>(at), d); }
    void erase(size_t at) { dims_.erase(dims_.begin() + static_cast<std::ptrdiff_t>(at)); }
    const std::vector<int64_t>& dims() const { return dims_; }

    // Product of the extents (1 for a scalar).
    int64_t numel() const {
        int64_t n = 1;
        for (int64_t d : dims_) n *= d;
        return n;
    }
    // Product of the extents in [from, to).
    int64_t numel(size_t from, size_t to) const {
        int64_t n = 1;
        for (size_t i = from; i < to; ++i) n *= dims_[i];
        return n;
    }

    friend bool operator==(const Shape& a, const Shape& b) { return a.dims_ == b.dims_; }
    friend std::ostream& operator<<(std::ostream& out, const Shape& s) {
        out << '[';
        for (size_t i = 0; i < s.dims_.size(); ++i) out << (i ? ", " : "") << s.dims_[i];
        return out << ']';
    }

private:
    std::vector<int64_t> dims_;
};

}  // namespace seqgrad
