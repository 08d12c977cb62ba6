// The safetensors reader (every header field checked against the file before any byte is used)
// and its writer (atomic, through files.h). The rules are listed in include/seqgrad/core/safetensors.h.
#include "seqgrad/core/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <set>
#include <tuple>

#include <nlohmann/json.hpp>

#include "seqgrad/core/files.h"

namespace seqgrad {

// The file format is little-endian and tensors are copied byte for byte.
static_assert(std::endian::native == std::endian::little, "seqgrad's safetensors I/O assumes a little-endian host");

namespace {

using Json = nlohmann::json;

// A real header is a few hundred bytes per tensor; anything near this is damage or an attack,
// and refusing it early avoids allocating for it.
constexpr uint64_t kMaxHeaderBytes = 100ull * 1000 * 1000;
// A valid header nests three deep (root, entry, shape array); a generous limit keeps a hostile
// header from building a pathologically deep tree.
constexpr int kMaxJsonDepth = 16;

template <typename... Parts>
[[noreturn]] void fail(const std::string& file, const Parts&... parts) {
    throw Error(detail::concat("safetensors: ", file, ": ", parts...));
}

// Cuts text for an error message (a hostile header can hold megabytes in one value), never in
// the middle of a UTF-8 sequence.
std::string clip(std::string text, size_t limit) {
    if (text.size() <= limit) return text;
    size_t cut = limit;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
    return text.substr(0, cut) + "...";
}

// `s` quoted for an error message; never throws (invalid UTF-8 shows as U+FFFD).
std::string quoted(const std::string& s) {
    return clip(Json(s).dump(-1, ' ', false, Json::error_handler_t::replace), 200);
}

// A JSON value for an error message.
std::string shown(const Json& value) { return clip(value.dump(-1, ' ', false, Json::error_handler_t::replace), 80); }

// `s` as a quoted JSON string; Error if it is not valid UTF-8 (JSON text must be).
std::string json_quoted(const std::string& s, const std::string& file, const char* what) {
    try {
        return Json(s).dump();  // strict: throws on invalid UTF-8
    } catch (const Json::exception&) {
        fail(file, what, " is not valid UTF-8");
    }
}

// Multiplies non-negative values, reporting overflow of int64 instead of wrapping.
bool checked_mul(int64_t a, int64_t b, int64_t& out) { return !__builtin_mul_overflow(a, b, &out); }

// Number of bytes a tensor of this dtype and shape occupies; Error naming `what` on negative
// extents or overflow. Zero extents are left out of the overflow check so that it does not depend
// on their position: a shape like [0, 2^62, 2^62] is refused in any order, since code that takes
// partial products of the extents (strides, reshapes) would overflow on it.
int64_t byte_count(DType dtype, const Shape& shape, const std::string& file, const std::string& what) {
    int64_t bytes = dtype_size(dtype);
    bool has_zero = false;
    for (int64_t extent : shape) {
        if (extent < 0) fail(file, what, " has a negative extent in shape ", shape);
        if (extent == 0) {
            has_zero = true;
        } else if (!checked_mul(bytes, extent, bytes)) {
            fail(file, what, ": shape ", shape, " is too large (its byte count overflows)");
        }
    }
    return has_zero ? 0 : bytes;
}

// The message of a nlohmann exception without its "[json.exception.x.y] " prefix.
std::string json_error_text(const Json::exception& e) {
    const std::string what = e.what();
    const size_t close = what.find("] ");
    return close == std::string::npos ? what : what.substr(close + 2);
}

// Parses the header text, refusing duplicate keys in any object and excessive nesting.
Json parse_header_json(const char* first, const char* last, const std::string& file) {
    std::vector<std::set<std::string>> keys_of_open_objects;
    auto guard = [&](int depth, Json::parse_event_t event, Json& parsed) -> bool {
        switch (event) {
            case Json::parse_event_t::object_start:
            case Json::parse_event_t::array_start:
                if (depth >= kMaxJsonDepth) fail(file, "header nests deeper than ", kMaxJsonDepth, " levels");
                if (event == Json::parse_event_t::object_start) keys_of_open_objects.emplace_back();
                break;
            case Json::parse_event_t::key: {
                const auto& key = parsed.get_ref<const std::string&>();
                if (!keys_of_open_objects.back().insert(key).second) {
                    fail(file, "header repeats the key ", quoted(key), " in one object");
                }
                break;
            }
            case Json::parse_event_t::object_end: keys_of_open_objects.pop_back(); break;
            default: break;
        }
        return true;
    };
    try {
        return Json::parse(first, last, guard);
    } catch (const Json::parse_error& e) {
        // e.byte counts characters read, so the offending byte is at e.byte - 1 in the header.
        const uint64_t at = 8 + (e.byte > 0 ? e.byte - 1 : 0);
        fail(file, "header is not valid JSON (near file byte ", at, "): ", clip(json_error_text(e), 200));
    } catch (const Json::exception& e) {
        fail(file, "header is not valid JSON: ", clip(json_error_text(e), 200));
    }
}

// A non-negative JSON integer that fits int64, else Error using `what` to say which value.
int64_t non_negative_integer(const Json& value, const std::string& file, const std::string& what) {
    if (!value.is_number_integer()) fail(file, what, " is not an integer: ", shown(value));
    if (value.is_number_unsigned()) {
        const uint64_t u = value.get<uint64_t>();
        if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) fail(file, what, " is too large: ", u);
        return static_cast<int64_t>(u);
    }
    const int64_t i = value.get<int64_t>();
    if (i < 0) fail(file, what, " is negative: ", i);
    return i;
}

DType parse_dtype(const Json& value, const std::string& file, const std::string& tensor) {
    if (!value.is_string()) fail(file, tensor, ": dtype is not a string: ", shown(value));
    const auto& name = value.get_ref<const std::string&>();
    if (name == "F32") return DType::F32;
    if (name == "I64") return DType::I64;
    fail(file, tensor, " has dtype ", quoted(name), ", which seqgrad does not support (only F32 and I64)");
}

// Where one tensor's bytes lie in the data section, as declared by the header.
struct Placement {
    std::string name;
    DType dtype;
    Shape shape;
    int64_t begin;
    int64_t end;
};

Placement parse_entry(const std::string& name, const Json& entry, int64_t data_size, const std::string& file) {
    const std::string tensor = "tensor " + quoted(name);
    if (!entry.is_object()) fail(file, tensor, ": entry is not a JSON object: ", shown(entry));
    for (const auto& [field, value] : entry.items()) {
        (void)value;
        if (field != "dtype" && field != "shape" && field != "data_offsets") {
            fail(file, tensor, " has an unknown field ", quoted(field));
        }
    }
    for (const char* field : {"dtype", "shape", "data_offsets"}) {
        if (!entry.contains(field)) fail(file, tensor, " has no \"", field, "\"");
    }

    Placement p{name, parse_dtype(entry.at("dtype"), file, tensor), Shape(), 0, 0};

    const Json& shape = entry.at("shape");
    if (!shape.is_array()) fail(file, tensor, ": shape is not an array: ", shown(shape));
    for (size_t i = 0; i < shape.size(); ++i) {
        p.shape.push_back(non_negative_integer(shape[i], file, detail::concat(tensor, ": shape extent ", i)));
    }
    const int64_t bytes = byte_count(p.dtype, p.shape, file, tensor);

    const Json& offsets = entry.at("data_offsets");
    if (!offsets.is_array() || offsets.size() != 2) {
        fail(file, tensor, ": data_offsets is not an array of two integers: ", shown(offsets));
    }
    p.begin = non_negative_integer(offsets[0], file, tensor + ": data_offsets[0]");
    p.end = non_negative_integer(offsets[1], file, tensor + ": data_offsets[1]");
    if (p.end < p.begin) fail(file, tensor, ": data_offsets [", p.begin, ", ", p.end, "] are reversed");
    if (p.end - p.begin != bytes) {
        fail(file, tensor, ": data_offsets [", p.begin, ", ", p.end, "] span ", p.end - p.begin, " bytes but ",
             dtype_name(p.dtype), " ", p.shape, " needs ", bytes);
    }
    if (p.end > data_size) {
        fail(file, tensor, ": data_offsets [", p.begin, ", ", p.end, "] reach past the end of the data section (",
             data_size, " bytes)");
    }
    return p;
}

std::map<std::string, std::string> parse_metadata(const Json& value, const std::string& file) {
    if (!value.is_object()) fail(file, "__metadata__ is not a JSON object: ", shown(value));
    std::map<std::string, std::string> metadata;
    for (const auto& [key, text] : value.items()) {
        if (!text.is_string()) fail(file, "__metadata__ value for ", quoted(key), " is not a string: ", shown(text));
        metadata.emplace(key, text.get<std::string>());
    }
    return metadata;
}

// Refuses overlapping byte ranges, holes between them and bytes after the last one. Ranges of
// empty tensors cover nothing, so they take no part (their bounds are already checked).
void check_coverage(std::vector<Placement> placements, int64_t data_size, int64_t data_start, const std::string& file) {
    std::erase_if(placements, [](const Placement& p) { return p.begin == p.end; });
    std::sort(placements.begin(), placements.end(),
              [](const Placement& a, const Placement& b) { return a.begin < b.begin; });
    int64_t covered_to = 0;
    const std::string* previous = nullptr;
    for (const Placement& p : placements) {
        if (p.begin < covered_to) {
            fail(file, "tensor ", quoted(p.name), " (data_offsets [", p.begin, ", ", p.end, "]) overlaps tensor ",
                 quoted(*previous), " (which ends at ", covered_to, ")");
        }
        if (p.begin > covered_to) {
            fail(file, "bytes [", covered_to, ", ", p.begin, ") of the data section (from file byte ",
                 data_start + covered_to, ") belong to no tensor");
        }
        covered_to = p.end;
        previous = &p.name;
    }
    if (covered_to != data_size) {
        fail(file, data_size - covered_to, " trailing bytes after the last tensor's data (from file byte ",
             data_start + covered_to, ")");
    }
}

std::string errno_text() { return std::strerror(errno); }

}  // namespace

const char* dtype_name(DType dtype) {
    switch (dtype) {
        case DType::F32: return "F32";
        case DType::I64: return "I64";
    }
    return "?";
}

int64_t dtype_size(DType dtype) {
    switch (dtype) {
        case DType::F32: return 4;
        case DType::I64: return 8;
    }
    return 0;
}

// ---- reading ----

SafetensorsFile SafetensorsFile::parse(std::span<const std::byte> bytes, const std::string& name_for_errors) {
    const std::string& file = name_for_errors;
    const uint64_t file_size = bytes.size();
    if (file_size < 8) fail(file, "file is ", file_size, " bytes, shorter than the 8-byte header length");

    uint64_t header_size = 0;
    std::memcpy(&header_size, bytes.data(), 8);
    if (header_size > file_size - 8) {
        fail(file, "header length ", header_size, " (file bytes 0-7) runs past the end of the file (", file_size - 8,
             " bytes follow the length)");
    }
    if (header_size > kMaxHeaderBytes)
        fail(file, "header length ", header_size, " exceeds the limit of ", kMaxHeaderBytes, " bytes");

    const char* header_text = reinterpret_cast<const char*>(bytes.data() + 8);
    const Json header = parse_header_json(header_text, header_text + header_size, file);
    if (!header.is_object()) fail(file, "header is not a JSON object but a JSON ", header.type_name());

    const int64_t data_start = static_cast<int64_t>(8 + header_size);
    const int64_t data_size = static_cast<int64_t>(file_size) - data_start;
    const std::byte* data = bytes.data() + data_start;

    SafetensorsFile result;
    result.name_ = file;
    std::vector<Placement> placements;
    for (const auto& [key, value] : header.items()) {
        if (key == "__metadata__") {
            result.metadata_ = parse_metadata(value, file);
        } else {
            placements.push_back(parse_entry(key, value, data_size, file));
        }
    }
    check_coverage(placements, data_size, data_start, file);

    // File order: by position of the data; empty tensors (which share offsets) by end, then name.
    std::sort(placements.begin(), placements.end(), [](const Placement& a, const Placement& b) {
        return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
    });
    for (Placement& p : placements) {
        SafetensorsEntry entry;
        entry.dtype = p.dtype;
        entry.shape = std::move(p.shape);
        entry.bytes.assign(data + p.begin, data + p.end);
        result.order_.push_back(p.name);
        result.entries_.emplace(std::move(p.name), std::move(entry));
    }
    return result;
}

SafetensorsFile SafetensorsFile::load(const std::string& path) {
    // O_NONBLOCK so that a FIFO given by mistake is refused below instead of blocking forever; it
    // does not affect reads of regular files.
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) fail(path, "cannot open: ", errno_text());
    std::vector<std::byte> bytes;
    try {
        struct stat info {};
        if (::fstat(fd, &info) != 0) fail(path, "cannot stat: ", errno_text());
        if (!S_ISREG(info.st_mode)) fail(path, "not a regular file");
        bytes.resize(static_cast<size_t>(info.st_size));
        size_t done = 0;
        while (done < bytes.size()) {
            const ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) fail(path, "cannot read: ", errno_text());
            if (n == 0) fail(path, "file shrank while being read");
            done += static_cast<size_t>(n);
        }
    } catch (...) {
        ::close(fd);
        throw;
    }
    ::close(fd);
    return parse(bytes, path);
}

// ---- access ----

const std::string& SafetensorsFile::metadata(const std::string& key) const {
    const auto it = metadata_.find(key);
    if (it == metadata_.end()) fail(name_, "no metadata named ", quoted(key));
    return it->second;
}

void SafetensorsFile::set_metadata(const std::string& key, const std::string& value) {
    json_quoted(key, name_, "metadata key");
    json_quoted(value, name_, detail::concat("metadata value for ", quoted(key)).c_str());
    metadata_[key] = value;
}

const SafetensorsEntry& SafetensorsFile::entry(const std::string& name) const {
    const auto it = entries_.find(name);
    if (it == entries_.end()) fail(name_, "no tensor named ", quoted(name));
    return it->second;
}

Tensor SafetensorsFile::tensor(const std::string& name) const {
    const SafetensorsEntry& e = entry(name);
    if (e.dtype != DType::F32) {
        fail(name_, "tensor ", quoted(name), " is ", dtype_name(e.dtype), ", not F32 (read it with int_tensor)");
    }
    Tensor result = Tensor::empty(e.shape);
    if (!e.bytes.empty()) std::memcpy(result.data(), e.bytes.data(), e.bytes.size());
    return result;
}

IntTensor SafetensorsFile::int_tensor(const std::string& name) const {
    const SafetensorsEntry& e = entry(name);
    if (e.dtype != DType::I64) {
        fail(name_, "tensor ", quoted(name), " is ", dtype_name(e.dtype), ", not I64 (read it with tensor)");
    }
    std::vector<int64_t> values(e.bytes.size() / sizeof(int64_t));
    if (!e.bytes.empty()) std::memcpy(values.data(), e.bytes.data(), e.bytes.size());
    return IntTensor::from_vector(std::move(values), e.shape);
}

// ---- building ----

void SafetensorsFile::put(const std::string& name, SafetensorsEntry entry) {
    if (name == "__metadata__") fail(name_, "\"__metadata__\" is reserved and cannot name a tensor");
    json_quoted(name, name_, "tensor name");
    const std::string tensor = "tensor " + quoted(name);
    const int64_t bytes = byte_count(entry.dtype, entry.shape, name_, tensor);
    if (static_cast<int64_t>(entry.bytes.size()) != bytes) {
        fail(name_, tensor, ": ", entry.bytes.size(), " bytes given but ", dtype_name(entry.dtype), " ", entry.shape,
             " needs ", bytes);
    }
    const auto [it, inserted] = entries_.insert_or_assign(name, std::move(entry));
    (void)it;
    if (inserted) order_.push_back(name);
}

void SafetensorsFile::put(const std::string& name, const Tensor& tensor) {
    if (!tensor.defined()) fail(name_, "tensor ", quoted(name), " to put is undefined");
    SafetensorsEntry e{DType::F32, tensor.shape(), {}};
    const auto* first = reinterpret_cast<const std::byte*>(tensor.data());
    e.bytes.assign(first, first + tensor.numel() * static_cast<int64_t>(sizeof(float)));
    put(name, std::move(e));
}

void SafetensorsFile::put(const std::string& name, const IntTensor& tensor) {
    SafetensorsEntry e{DType::I64, tensor.shape(), {}};
    const auto* first = reinterpret_cast<const std::byte*>(tensor.data());
    e.bytes.assign(first, first + tensor.numel() * static_cast<int64_t>(sizeof(int64_t)));
    put(name, std::move(e));
}

// ---- writing ----

std::vector<std::byte> SafetensorsFile::serialize() const {
    std::string header = "{";
    if (!metadata_.empty()) {
        header += "\"__metadata__\":{";
        bool first = true;
        for (const auto& [key, value] : metadata_) {
            if (!first) header += ',';
            first = false;
            header += json_quoted(key, name_, "metadata key");
            header += ':';
            header += json_quoted(value, name_, "metadata value");
        }
        header += '}';
    }
    int64_t offset = 0;
    for (const std::string& name : order_) {
        const SafetensorsEntry& e = entries_.at(name);
        if (header.size() > 1) header += ',';
        header += json_quoted(name, name_, "tensor name");
        header += ":{\"dtype\":\"";
        header += dtype_name(e.dtype);
        header += "\",\"shape\":[";
        for (size_t i = 0; i < e.shape.size(); ++i) {
            if (i) header += ',';
            header += std::to_string(e.shape[i]);
        }
        const int64_t end = offset + static_cast<int64_t>(e.bytes.size());
        header += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(end) + "]}";
        offset = end;
    }
    header += '}';
    // Pad so the data section starts at a multiple of 8 and can be mapped and read aligned.
    header.append((8 - header.size() % 8) % 8, ' ');

    std::vector<std::byte> out(8 + header.size() + static_cast<size_t>(offset));
    const uint64_t header_size = header.size();
    std::memcpy(out.data(), &header_size, 8);
    std::memcpy(out.data() + 8, header.data(), header.size());
    std::byte* data = out.data() + 8 + header.size();
    for (const std::string& name : order_) {
        const auto& bytes = entries_.at(name).bytes;
        if (!bytes.empty()) std::memcpy(data, bytes.data(), bytes.size());
        data += bytes.size();
    }
    return out;
}

void SafetensorsFile::save(const std::string& path) const { write_file_atomically(path, serialize()); }

}  // namespace seqgrad
