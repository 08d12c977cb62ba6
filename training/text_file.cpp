// Whole text files, plain or gzip-compressed (text_file.h).
#include "seqgrad/training/text_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "seqgrad/core/error.h"
#include "seqgrad/text/utf8.h"

namespace seqgrad::training {

namespace {

// The offset of the first byte that does not start a valid UTF-8 code point, or npos.
size_t first_invalid_utf8(std::string_view text) {
    for (size_t at = 0; at < text.size();) {
        if (static_cast<unsigned char>(text[at]) < 0x80) {  // ASCII, most of most texts: no call per byte
            ++at;
            continue;
        }
        const size_t length = text::utf8_length(text, at);
        if (length == 0) return at;
        at += length;
    }
    return std::string_view::npos;
}

std::string system_reason(int error) { return error != 0 ? std::strerror(error) : "out of memory"; }

}  // namespace

std::string read_text_file(const std::string& path, bool require_utf8, size_t max_bytes) {
    // Opened here rather than by gzopen, so that a plain file's size is known before reading it.
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw Error(detail::concat(path, ": cannot open: ", std::strerror(errno)));
    struct stat status {};
    if (::fstat(fd, &status) != 0) {
        const int reason = errno;
        ::close(fd);
        throw Error(detail::concat(path, ": cannot open: ", std::strerror(reason)));
    }
    errno = 0;
    gzFile file = gzdopen(fd, "rb");  // reads plain files as they are
    if (file == nullptr) {
        const int reason = errno;
        ::close(fd);
        throw Error(detail::concat(path, ": cannot open: ", system_reason(reason)));
    }
    gzbuffer(file, 1 << 15);  // half the reads below: zlib then reads and inflates straight into them

    std::string text;
    // A plain file's text is its size: one allocation. A gzip stream's is unknown; it grows.
    if (S_ISREG(status.st_mode) && gzdirect(file) == 1)
        text.reserve(std::min(static_cast<size_t>(status.st_size), max_bytes));
    char buffer[1 << 16];
    while (true) {
        errno = 0;
        const int got = gzread(file, buffer, sizeof buffer);
        int code = Z_OK;
        const char* message = gzerror(file, &code);
        // A gzip stream cut short reads to where it stops and then reports Z_BUF_ERROR.
        if (got < 0 || (code != Z_OK && code != Z_STREAM_END)) {
            // zlib's message starts "<fd:N>: ", which says nothing the path does not.
            std::string_view zlib_reason = message;
            if (const size_t colon = zlib_reason.find(": "); colon != std::string_view::npos)
                zlib_reason.remove_prefix(colon + 2);
            const std::string reason = code == Z_ERRNO ? detail::concat(": ", std::strerror(errno))
                                                       : detail::concat(" (", zlib_reason, ")");
            gzclose(file);
            throw Error(detail::concat(path, ": cannot read", reason));
        }
        if (got == 0) break;
        if (static_cast<size_t>(got) > max_bytes - text.size()) {
            gzclose(file);
            throw Error(detail::concat(path, ": more than ", max_bytes,
                                       " bytes of text, the most a text file may hold"));
        }
        text.append(buffer, static_cast<size_t>(got));
    }
    gzclose(file);

    if (require_utf8) {
        const size_t at = first_invalid_utf8(text);
        if (at != std::string_view::npos) {
            const auto line = 1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(at), '\n');
            throw Error(detail::concat(path, ": invalid UTF-8 at byte ", at, " (line ", line, ")"));
        }
    }
    return text;
}

}  // namespace seqgrad::training
