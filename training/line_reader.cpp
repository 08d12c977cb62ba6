// Lines of plain or gzip-compressed files (line_reader.h).
#include "seqgrad/training/line_reader.h"

#include <zlib.h>

#include <cerrno>
#include <cstring>

#include "seqgrad/core/error.h"

namespace seqgrad::training {

LineReader::LineReader(const std::string& path) : path_(path) {
    errno = 0;
    gzFile file = gzopen(path.c_str(), "rb");  // reads plain files as they are
    if (file == nullptr) throw Error(path + ": cannot open: " + (errno != 0 ? std::strerror(errno) : "out of memory"));
    gzbuffer(file, 1 << 17);
    file_ = file;
}

LineReader::~LineReader() {
    if (file_) gzclose(static_cast<gzFile>(file_));
}

bool LineReader::fill() {
    if (eof_) return false;
    buffer_.erase(0, at_);
    at_ = 0;
    const size_t old_size = buffer_.size();
    buffer_.resize(old_size + (1 << 16));
    const int got = gzread(static_cast<gzFile>(file_), buffer_.data() + old_size, 1 << 16);
    int code = Z_OK;
    const char* message = gzerror(static_cast<gzFile>(file_), &code);
    // A gzip stream cut short reads to its end and then reports Z_BUF_ERROR.
    if (got < 0 || (code != Z_OK && code != Z_STREAM_END)) {
        throw Error(detail::concat(path_, ": cannot read",
                                   code == Z_ERRNO ? std::string(": ") + std::strerror(errno)
                                                   : std::string(" (") + message + ")",
                                   " after line ", line_number_));
    }
    buffer_.resize(old_size + static_cast<size_t>(got));
    if (got == 0) eof_ = true;
    return got > 0;
}

bool LineReader::next(std::string& line) {
    while (true) {
        const size_t end = buffer_.find('\n', at_);
        check(end == std::string::npos || end - at_ <= kMaxLineBytes, "corpus", path_, ":", line_number_ + 1,
              ": a line longer than ", kMaxLineBytes, " bytes (1 MiB)");
        if (end != std::string::npos) {
            line.assign(buffer_, at_, end - at_);
            at_ = end + 1;
            break;
        }
        check(buffer_.size() - at_ <= kMaxLineBytes, "corpus", path_, ":", line_number_ + 1, ": a line longer than ",
              kMaxLineBytes, " bytes (1 MiB)");
        if (!fill()) {
            if (at_ >= buffer_.size()) return false;  // no last line without its '\n'
            line.assign(buffer_, at_, std::string::npos);
            at_ = buffer_.size();
            break;
        }
    }
    if (!line.empty() && line.back() == '\r') line.pop_back();
    ++line_number_;
    return true;
}

}  // namespace seqgrad::training
