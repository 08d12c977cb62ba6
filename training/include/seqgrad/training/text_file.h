// A text file read whole, plain or gzip-compressed, for the readers that want all of a text at
// once (a language model's training text) rather than line by line (line_reader.h).
#pragma once

#include <cstddef>
#include <string>

namespace seqgrad::training {

// The most text a file may hold: 1 GiB (after decompression). A larger file is refused rather than
// read into memory.
inline constexpr size_t kMaxTextFileBytes = size_t{1} << 30;

// The whole text of a file, plain or gzip-compressed (read through zlib, as LineReader reads: a
// gzip stream is recognised by its bytes, whatever the file's name), byte for byte: CRLF endings
// and a last line without its newline stay as they are. An empty file gives "" (its caller says
// whether that is acceptable).
// Errors, each naming the path: a file that cannot be opened or read (a directory, a missing
// file, a gzip stream that is cut short or corrupt) with the system's or zlib's reason; more than
// `max_bytes` of text; and, with `require_utf8`, text that is not valid UTF-8, with the offset of
// the first invalid byte (counted from 0) and its line (counted from 1):
// "data.txt: invalid UTF-8 at byte 1234 (line 56)".
std::string read_text_file(const std::string& path, bool require_utf8 = true, size_t max_bytes = kMaxTextFileBytes);

}  // namespace seqgrad::training
