// Lines of a text file, plain or gzip-compressed, read strictly and in constant memory: every
// reader of outside text (corpora, dictionaries' neighbours, `seqgrad predict --input`) goes
// through it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace seqgrad::training {

// The longest line a file may hold: 1 MiB. A longer one is refused before anything is built from it.
inline constexpr size_t kMaxLineBytes = size_t{1} << 20;

// Lines of a text file, plain or gzip-compressed (read through zlib; ".gz" or not, a gzip stream is
// recognised by its bytes), one at a time: a file of any size reads in constant memory. CRLF
// endings are accepted; a line longer than kMaxLineBytes is an Error.
class LineReader {
public:
    explicit LineReader(const std::string& path);  // Error naming the path and the system's reason
    ~LineReader();
    LineReader(const LineReader&) = delete;
    LineReader& operator=(const LineReader&) = delete;

    bool next(std::string& line);  // false after the last line; a read error is an Error
    int64_t line_number() const { return line_number_; }
    const std::string& path() const { return path_; }

private:
    bool fill();
    std::string path_;
    void* file_ = nullptr;  // a zlib gzFile
    std::string buffer_;
    size_t at_ = 0;
    bool eof_ = false;
    int64_t line_number_ = 0;
};

}  // namespace seqgrad::training
