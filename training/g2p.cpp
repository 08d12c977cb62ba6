// The CMUdict reader and the G2P split (g2p.h states the reading and split rules this file
// follows).
#include "seqgrad/training/g2p.h"

#include <algorithm>
#include <functional>
#include <unordered_map>

#include "seqgrad/core/error.h"
#include "seqgrad/text/utf8.h"

namespace seqgrad::training {

const std::vector<std::string>& arpabet_phones() {
    static const std::vector<std::string> phones = {"AA", "AE", "AH", "AO", "AW", "AY", "B",  "CH", "D",  "DH",
                                                    "EH", "ER", "EY", "F",  "G",  "HH", "IH", "IY", "JH", "K",
                                                    "L",  "M",  "N",  "NG", "OW", "OY", "P",  "R",  "S",  "SH",
                                                    "T",  "TH", "UH", "UW", "V",  "W",  "Y",  "Z",  "ZH"};
    return phones;
}

std::string_view strip_variant(std::string_view headword) {
    // Only "(digits)" after a non-empty word is a variant mark; "(x)" or "(2)" alone is kept.
    if (headword.size() < 4 || headword.back() != ')') return headword;
    const size_t open = headword.rfind('(');
    if (open == std::string_view::npos || open == 0 || open + 2 >= headword.size()) return headword;
    for (size_t i = open + 1; i + 1 < headword.size(); ++i)
        if (headword[i] < '0' || headword[i] > '9') return headword;
    return headword.substr(0, open);
}

Split g2p_split(std::string_view headword) { return split_by_hash(strip_variant(headword)); }

namespace {

// The fields of a line, split on spaces and tabs, into `fields` (reused from line to line).
void split_fields(std::string_view line, std::vector<std::string_view>& fields) {
    fields.clear();
    size_t at = 0;
    while (at < line.size()) {
        while (at < line.size() && (line[at] == ' ' || line[at] == '\t')) ++at;
        const size_t start = at;
        while (at < line.size() && line[at] != ' ' && line[at] != '\t') ++at;
        if (at > start) fields.push_back(line.substr(start, at - start));
    }
}

bool is_arpabet_phone(std::string_view phone) {
    // 39 sorted short strings: a binary search is all it takes.
    const std::vector<std::string>& phones = arpabet_phones();
    return std::binary_search(phones.begin(), phones.end(), phone, std::less<>());
}

// Why a phone is not one of the 39, with a hint where one is likely.
std::string unknown_phone_message(std::string_view phone) {
    std::string message = detail::concat("'", text::printable(phone), "' is not one of the 39 ARPAbet phones");
    if (phone.size() > 1 && phone.back() >= '0' && phone.back() <= '2' &&
        is_arpabet_phone(phone.substr(0, phone.size() - 1)))
        message += " (it carries a stress mark; this reader expects phones without stress)";
    return message;
}

}  // namespace

Lexicon read_dictionary(const std::string& path) {
    const std::string text = text::read_file(path);

    Lexicon lexicon;
    std::unordered_map<std::string, size_t> word_index;  // base headword -> position in words
    const auto estimated_lines = static_cast<size_t>(std::count(text.begin(), text.end(), '\n')) + 1;
    word_index.reserve(estimated_lines);
    lexicon.words.reserve(estimated_lines);
    const auto skip = [&](int64_t line_number, const std::string& message) {
        lexicon.warnings.push_back(detail::concat(path, ":", line_number, ": ", message));
        ++lexicon.skipped_lines;
    };

    std::vector<std::string_view> fields;
    for (size_t start = 0; start < text.size();) {
        size_t end = text.find('\n', start);
        if (end == std::string::npos) end = text.size();
        std::string_view line(text.data() + start, end - start);
        start = end + 1;
        const int64_t line_number = ++lexicon.lines;
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);  // CRLF endings

        split_fields(line, fields);
        if (fields.empty()) continue;  // a blank line is no entry, and no mistake
        const std::string_view headword = fields[0];
        const std::string_view word = strip_variant(headword);
        if (fields.size() == 1) {
            skip(line_number, "no phones for '" + text::printable(headword) + "'");
            continue;
        }
        if (!text::is_utf8(word)) {
            skip(line_number, "headword '" + text::printable(headword) + "' is not valid UTF-8");
            continue;
        }
        std::vector<std::string> pronunciation;
        pronunciation.reserve(fields.size() - 1);
        std::string bad_phones;
        for (size_t i = 1; i < fields.size(); ++i) {
            if (is_arpabet_phone(fields[i])) {
                pronunciation.emplace_back(fields[i]);
            } else {
                bad_phones += (bad_phones.empty() ? "" : "; ") + unknown_phone_message(fields[i]);
            }
        }
        if (!bad_phones.empty()) {
            skip(line_number, "in '" + text::printable(headword) + "': " + bad_phones);
            continue;
        }

        const auto [it, is_new] = word_index.try_emplace(std::string(word), lexicon.words.size());
        if (is_new) {
            lexicon.words.push_back(Example{std::string(word), text::utf8_characters(word), {}, {}});
        }
        Example& entry = lexicon.words[it->second];
        if (std::find(entry.references.begin(), entry.references.end(), pronunciation) != entry.references.end()) {
            skip(line_number,
                 "'" + text::printable(headword) + "' repeats a pronunciation of '" + text::printable(word) + "'");
            continue;
        }
        entry.references.push_back(std::move(pronunciation));
    }

    if (lexicon.words.empty()) {
        std::string first_problems;
        for (size_t i = 0; i < std::min<size_t>(3, lexicon.warnings.size()); ++i)
            first_problems += "\n  " + lexicon.warnings[i];
        throw Error(detail::concat(path, ": no valid entries (", lexicon.lines, " lines, ", lexicon.skipped_lines,
                                   " skipped)", first_problems.empty() ? "" : "; the first problems:", first_problems));
    }
    return lexicon;
}

}  // namespace seqgrad::training
