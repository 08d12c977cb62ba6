// UTF-8 checks, whole-file reading and printable messages for the readers of outside data.
#include "seqgrad/text/utf8.h"

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "seqgrad/core/error.h"

namespace seqgrad::text {

// A stray continuation byte, a truncated sequence, an overlong form, a surrogate or a code point
// above U+10FFFF is not valid.
size_t utf8_decode(std::string_view text, size_t at, char32_t& code) {
    const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
    const unsigned char lead = byte(at);
    size_t length;
    if (lead < 0x80) length = 1, code = lead;
    else if ((lead & 0xE0) == 0xC0) length = 2, code = lead & 0x1F;
    else if ((lead & 0xF0) == 0xE0) length = 3, code = lead & 0x0F;
    else if ((lead & 0xF8) == 0xF0) length = 4, code = lead & 0x07;
    else return 0;
    if (at + length > text.size()) return 0;
    for (size_t i = 1; i < length; ++i) {
        if ((byte(at + i) & 0xC0) != 0x80) return 0;
        code = (code << 6) | (byte(at + i) & 0x3F);
    }
    static constexpr char32_t kSmallest[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (code < kSmallest[length] || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) return 0;
    return length;
}

size_t utf8_length(std::string_view text, size_t at) {
    char32_t code;
    return utf8_decode(text, at, code);
}

bool is_utf8(std::string_view text) {
    for (size_t at = 0; at < text.size();) {
        const size_t length = utf8_length(text, at);
        if (length == 0) return false;
        at += length;
    }
    return true;
}

// Text for a message: control bytes (and every non-ASCII byte, if the text is not UTF-8) as \xNN,
// so a corrupt line cannot garble the terminal it is reported on.
std::string printable(std::string_view text) {
    const bool utf8 = is_utf8(text);
    std::string out;
    for (const char c : text) {
        const auto b = static_cast<unsigned char>(c);
        if (b < 0x20 || b == 0x7F || (b >= 0x80 && !utf8)) {
            char escaped[5];
            std::snprintf(escaped, sizeof escaped, "\\x%02X", b);
            out += escaped;
        } else {
            out += c;
        }
    }
    return out;
}

std::vector<std::string> utf8_characters(std::string_view text) {
    std::vector<std::string> characters;
    for (size_t at = 0; at < text.size();) {
        const size_t length = utf8_length(text, at);
        if (length == 0)  // not check(): its message would be built for every valid string too
            throw Error(detail::concat("utf8_characters: \"", printable(text), "\" is not valid UTF-8 (byte ", at,
                                       ")"));
        characters.emplace_back(text.substr(at, length));
        at += length;
    }
    return characters;
}

// The whole file, or an Error naming the path and the system's reason.
std::string read_file(const std::string& path) {
    std::FILE* file = std::fopen(path.c_str(), "rb");
    if (file == nullptr) throw Error(detail::concat(path, ": cannot open: ", std::strerror(errno)));
    std::string text;
    char buffer[1 << 16];
    size_t got;
    while ((got = std::fread(buffer, 1, sizeof buffer, file)) > 0) text.append(buffer, got);
    const bool failed = std::ferror(file) != 0;
    const int reason = errno;
    std::fclose(file);
    if (failed) throw Error(detail::concat(path, ": cannot read: ", std::strerror(reason)));
    return text;
}

}  // namespace seqgrad::text
