// SafetensorsFile: the contents of a safetensors file (named F32/I64 tensors plus string metadata)
// held in memory, read with full validation and written atomically. Used for checkpoints,
// optimizer state and the PyTorch parity fixtures.
//
// Format: 8-byte little-endian header length N, N bytes of JSON header, then the data section.
// The header maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets
// relative to the start of the data section), plus an optional "__metadata__" object of strings.
//
// Reading refuses anything it cannot fully account for; every failure is a seqgrad::Error that
// names the file and the problem:
//   - a file shorter than 8 bytes; a header length beyond the end of the file or above 100 MB;
//   - a header that is not valid JSON, not a JSON object, nested absurdly deep, or that repeats a
//     key in any object (JSON parsers disagree on which duplicate wins, so neither is trusted);
//   - "__metadata__" that is not an object whose values are all strings;
//   - an entry that is not an object, lacks dtype/shape/data_offsets, has any other field, or has
//     a field of the wrong JSON type;
//   - a dtype other than F32 and I64 (the message names it);
//   - shape extents that are negative or non-integer, or whose non-zero extents multiplied
//     together (and by the dtype's size) overflow int64;
//   - data_offsets that are not two non-negative integers with begin <= end, a byte range whose
//     length is not numel * dtype size, or that reaches outside the data section;
//   - byte ranges that overlap, leave a hole between them, or leave trailing bytes after the last
//     tensor. The format says the data section must be fully indexed; PyTorch's and safetensors'
//     writers never leave gaps, so unexplained bytes mean a damaged or foreign file.
// Zero-dimensional tensors (shape [], one element) and tensors with a zero extent (no bytes) are
// valid; an empty tensor's offsets only need to lie within the data section.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "seqgrad/core/shape.h"
#include "seqgrad/core/tensor.h"

namespace seqgrad {

// The element types seqgrad stores. Files with any other dtype are refused when read.
enum class DType { F32, I64 };

const char* dtype_name(DType dtype);  // "F32", "I64": the spelling used in the file
int64_t dtype_size(DType dtype);      // bytes per element

// One tensor as stored: its element type, shape and raw little-endian bytes
// (bytes.size() == shape.numel() * dtype_size(dtype)).
struct SafetensorsEntry {
    DType dtype = DType::F32;
    Shape shape;
    std::vector<std::byte> bytes;
};

class SafetensorsFile {
public:
    SafetensorsFile() = default;

    // Reads and validates a whole file (see the rules above). Errors name the path.
    static SafetensorsFile load(const std::string& path);
    // Validates and copies out the tensors of an in-memory file; `name_for_errors` is what error
    // messages (now and from later accessors) call the file.
    static SafetensorsFile parse(std::span<const std::byte> bytes, const std::string& name_for_errors);

    // Writes serialize()'s bytes atomically (files.h): a reader, or a crash, sees either the old
    // file or the complete new one. On failure `path` is untouched and an Error names it.
    void save(const std::string& path) const;
    // The file's bytes: `__metadata__` first (only if there is any metadata), then the tensors in
    // names() order with their data back to back; the header is padded with spaces to a
    // multiple of 8 bytes so the data section starts 8-byte aligned.
    std::vector<std::byte> serialize() const;

    // What errors call this file: the path it was loaded from, the name given to parse(), or
    // "(in-memory safetensors)".
    const std::string& name() const { return name_; }

    const std::map<std::string, std::string>& metadata() const { return metadata_; }
    const std::string& metadata(const std::string& key) const;  // Error naming file and key if absent
    void set_metadata(const std::string& key, const std::string& value);

    bool contains(const std::string& name) const { return entries_.count(name) != 0; }
    // Tensor names in file order: the order of their data in the file as read (which for
    // PyTorch's writer is also the header's order), then new names in the order they were put.
    // Writing keeps this order.
    const std::vector<std::string>& names() const { return order_; }
    const SafetensorsEntry& entry(const std::string& name) const;  // Error naming file and tensor if absent

    // A new tensor holding a copy of the data (not requiring grad). Errors name the file and the
    // tensor when it is missing or of the other dtype.
    Tensor tensor(const std::string& name) const;         // F32
    IntTensor int_tensor(const std::string& name) const;  // I64

    // Adds a copy of the tensor's data under `name`, replacing (in place, keeping its position)
    // any tensor already of that name. "__metadata__" is not a valid tensor name.
    void put(const std::string& name, const Tensor& tensor);
    void put(const std::string& name, const IntTensor& tensor);
    void put(const std::string& name, SafetensorsEntry entry);  // checked: bytes must match shape

private:
    std::string name_ = "(in-memory safetensors)";
    std::map<std::string, std::string> metadata_;
    std::map<std::string, SafetensorsEntry> entries_;
    std::vector<std::string> order_;
};

}  // namespace seqgrad
