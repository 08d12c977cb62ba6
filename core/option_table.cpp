// The parts of the option tables (internal/option_table.h) that do not depend on the struct.
#include "seqgrad/internal/option_table.h"

#include <cstdio>

namespace seqgrad::internal {

Json parse_json(const std::string& text, const std::string& what) {
    try {
        return Json::parse(text);
    } catch (const Json::exception& e) {  // parse_error, or out_of_range for a number such as 1e999
        throw Error(what + ": not valid JSON: " + e.what());
    }
}

std::string format_number(double value, bool as_float) {
    if (std::isfinite(value) && value == std::round(value) && std::fabs(value) < 1e15)
        return std::to_string(static_cast<int64_t>(value));
    // The shortest of %.{1..17}g that reads back as the same number.
    char text[32];
    for (int digits = 1; digits <= 17; ++digits) {
        std::snprintf(text, sizeof text, "%.*g", digits, value);
        const double back = std::strtod(text, nullptr);
        if (as_float ? static_cast<float>(back) == static_cast<float>(value) : back == value) break;
    }
    return text;
}

Json word_as_json(const std::string& word, const std::string& type, const std::string& flag) {
    if (type == "string") return Json(word);
    if (type == "true or false") {
        if (word == "true" || word == "1") return Json(true);
        if (word == "false" || word == "0") return Json(false);
        throw Error(flag + ": expects true or false, got \"" + word + "\"");
    }
    // A number: read as JSON reads one, so that the table's own checks (an integer's range, a
    // bound) apply as they do to a config file.
    Json value;
    try {
        value = Json::parse(word);
    } catch (const Json::exception&) {}
    if (!value.is_number())
        throw Error(flag + ": expects " + (type == "integer" ? "an integer" : "a number") + ", got \"" + word + "\"");
    return value;
}

}  // namespace seqgrad::internal
