// seqgrad::Error, the one exception type for a user's mistake (shapes that do not fit, an id out
// of range, a corrupt file, a bad flag), and the helpers that build its messages.
#pragma once

#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>

namespace seqgrad {

class Error : public std::runtime_error {
public:
    explicit Error(const std::string& message) : std::runtime_error(message) {}
};

namespace detail {
template <typename... Parts>
std::string concat(const Parts&... parts) {
    std::ostringstream out;
    (out << ... << parts);
    return out.str();
}
}  // namespace detail

// Throws Error("<op>: <message parts...>") when the condition does not hold. Used for every check
// on user input; it stays on in Release builds (unlike assert). The parts are only formatted when
// the check fails, so pass them as they are (a Shape prints as "[2, 3]").
template <typename... Parts>
void check(bool condition, const char* op, const Parts&... parts) {
    if (!condition) throw Error(detail::concat(op, ": ", parts...));
}

}  // namespace seqgrad
