// Text as the readers of outside data meet it: UTF-8 checked code point by code point, files read
// whole with the system's reason on failure, and bytes made safe to print in a message. The text
// layer's: the tokenizers read with it, and so do training's readers of corpora.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace seqgrad::text {

// The characters of a UTF-8 string, one string per code point. Invalid UTF-8 is an Error.
std::vector<std::string> utf8_characters(std::string_view text);

// The byte length of the UTF-8 code point that starts at text[at], or 0 if it is not valid there
// (a stray continuation byte, a truncated sequence, an overlong form, a surrogate, a code point
// above U+10FFFF); utf8_decode also gives the code point.
size_t utf8_length(std::string_view text, size_t at);
size_t utf8_decode(std::string_view text, size_t at, char32_t& code);

// Whether `text` is valid UTF-8 (no stray continuation byte, truncated sequence, overlong form,
// surrogate, or code point above U+10FFFF).
bool is_utf8(std::string_view text);

// Text for a message: control bytes (and every non-ASCII byte, if the text is not UTF-8) as \xNN,
// so a corrupt line cannot garble the terminal it is reported on.
std::string printable(std::string_view text);

// The whole file, or an Error naming the path and the system's reason.
std::string read_file(const std::string& path);

}  // namespace seqgrad::text
