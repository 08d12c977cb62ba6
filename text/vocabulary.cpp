// Vocabularies: symbols <-> ids, their JSON form for checkpoints, and building them from data.
#include "seqgrad/text/vocabulary.h"

#include <algorithm>
#include <unordered_set>

#include "seqgrad/core/error.h"
#include "seqgrad/models/model.h"
#include "seqgrad/internal/option_table.h"

namespace seqgrad::text {

using models::kEos;
using models::kPad;
using models::kSos;
using models::kUnk;

Vocabulary::Vocabulary() : Vocabulary(std::vector<std::string>(std::begin(kSpecials), std::end(kSpecials))) {}

Vocabulary::Vocabulary(std::vector<std::string> symbols) : symbols_(std::move(symbols)) {
    sorted_ids_.reserve(symbols_.size());
    for (size_t i = 0; i < symbols_.size(); ++i) sorted_ids_.emplace_back(symbols_[i], static_cast<int64_t>(i));
    std::sort(sorted_ids_.begin(), sorted_ids_.end());
}

bool Vocabulary::is_special(std::string_view symbol) {
    return std::find(std::begin(kSpecials), std::end(kSpecials), symbol) != std::end(kSpecials);
}

bool Vocabulary::is_encoder_special(std::string_view symbol) {
    return std::find(std::begin(kEncoderSpecials), std::end(kEncoderSpecials), symbol) != std::end(kEncoderSpecials);
}

bool Vocabulary::for_encoder() const {
    return size() >= models::kFirstEncoderSymbol &&
           std::equal(std::begin(kEncoderSpecials), std::end(kEncoderSpecials), symbols_.begin() + models::kCls);
}

Vocabulary Vocabulary::from_symbols(std::vector<std::string> symbols, bool encoder) {
    std::sort(symbols.begin(), symbols.end());
    symbols.erase(std::unique(symbols.begin(), symbols.end()), symbols.end());
    std::vector<std::string> all(std::begin(kSpecials), std::end(kSpecials));
    if (encoder) all.insert(all.end(), std::begin(kEncoderSpecials), std::end(kEncoderSpecials));
    for (std::string& symbol : symbols) {
        check(!symbol.empty(), "Vocabulary", "an empty symbol");
        check(!is_special(symbol) && !(encoder && is_encoder_special(symbol)), "Vocabulary",
              "the data uses the special token ", symbol, " as a symbol");
        all.push_back(std::move(symbol));
    }
    return Vocabulary(std::move(all));
}

Vocabulary Vocabulary::from_counts(const std::vector<std::pair<std::string, int64_t>>& counts, int64_t min_count,
                                   int64_t max_size, bool encoder) {
    check(min_count >= 1 && max_size >= 0, "Vocabulary", "min_count must be at least 1 and max_size 0 or more, got ",
          min_count, " and ", max_size);
    std::vector<std::pair<std::string, int64_t>> kept;
    for (const auto& [symbol, count] : counts)
        if (count >= min_count) kept.emplace_back(symbol, count);
    if (max_size > 0 && static_cast<int64_t>(kept.size()) > max_size) {
        const auto by_frequency = [](const auto& a, const auto& b) {
            return a.second != b.second ? a.second > b.second : a.first < b.first;
        };
        std::nth_element(kept.begin(), kept.begin() + max_size, kept.end(), by_frequency);
        kept.resize(static_cast<size_t>(max_size));
    }
    const int64_t specials = encoder ? models::kFirstEncoderSymbol : 4;
    check(static_cast<int64_t>(kept.size()) + specials <= kMaxVocabulary, "Vocabulary", "the data has ", kept.size(),
          " distinct symbols; a vocabulary holds at most ", kMaxVocabulary - specials,
          " (raise min_count or set max_vocab to keep the most frequent)");
    std::vector<std::string> symbols;
    symbols.reserve(kept.size());
    for (auto& [symbol, count] : kept) symbols.push_back(std::move(symbol));
    return from_symbols(std::move(symbols), encoder);
}

int64_t Vocabulary::id(std::string_view symbol) const {
    const auto it = std::lower_bound(sorted_ids_.begin(), sorted_ids_.end(), symbol,
                                     [](const auto& entry, std::string_view s) { return entry.first < s; });
    return it != sorted_ids_.end() && it->first == symbol ? it->second : kUnk;
}

bool Vocabulary::contains(std::string_view symbol) const { return id(symbol) != kUnk || symbol == kSpecials[kUnk]; }

const std::string& Vocabulary::symbol(int64_t id) const {
    check(id >= 0 && id < size(), "Vocabulary::symbol", "id ", id, " is out of range for a vocabulary of ", size(),
          " symbols");
    return symbols_[static_cast<size_t>(id)];
}

std::vector<int64_t> Vocabulary::encode(const std::vector<std::string>& symbols) const {
    std::vector<int64_t> ids;
    ids.reserve(symbols.size());
    for (const std::string& s : symbols) ids.push_back(id(s));
    return ids;
}

std::vector<std::string> Vocabulary::decode(const std::vector<int64_t>& ids) const {
    std::vector<std::string> symbols;
    for (int64_t id : ids) {
        if (id == kEos) break;
        if (id == kPad || id == kSos) continue;
        symbols.push_back(symbol(id));
    }
    return symbols;
}

std::string Vocabulary::to_json() const { return internal::Json(symbols_).dump(); }

Vocabulary Vocabulary::from_json(const std::string& text) {
    const char* op = "Vocabulary::from_json";
    const internal::Json parsed = internal::parse_json(text, op);
    check(parsed.is_array(), op, "expected a JSON array of symbols");
    check(static_cast<int64_t>(parsed.size()) <= kMaxVocabulary, op, "a vocabulary of ", parsed.size(),
          " symbols; at most ", kMaxVocabulary, " are allowed");
    check(parsed.size() >= 4, op, "expected the four special tokens first, got ", parsed.size(), " symbols");
    std::vector<std::string> symbols;
    std::unordered_set<std::string> seen;
    for (size_t i = 0; i < parsed.size(); ++i) {
        check(parsed[i].is_string(), op, "symbol ", i, " is not a string");
        std::string symbol = parsed[i].get<std::string>();
        if (i < 4) {
            check(symbol == kSpecials[i], op, "id ", i, " must be ", kSpecials[i], ", got \"", symbol, "\"");
        } else {
            check(!symbol.empty(), op, "symbol ", i, " is empty");
            check(!is_special(symbol), op, "symbol ", i, " repeats the special token ", symbol);
        }
        check(seen.insert(symbol).second, op, "symbol \"", symbol, "\" appears twice");
        symbols.push_back(std::move(symbol));
    }
    return Vocabulary(std::move(symbols));
}

}  // namespace seqgrad::text
