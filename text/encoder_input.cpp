// An encoder's rows (encoder_input.h).
#include "seqgrad/text/encoder_input.h"

#include <algorithm>

#include "seqgrad/core/error.h"
#include "seqgrad/models/model.h"

namespace seqgrad::text {

std::vector<int64_t> encoder_ids(std::string_view text, const Tokenizer& tokenizer, const Vocabulary& vocab) {
    std::vector<int64_t> ids;
    tokenizer.each_symbol(text, [&](std::string_view symbol) { ids.push_back(vocab.id(symbol)); });
    return ids;
}

std::vector<int64_t> encoder_ids_with_masks(std::string_view text, const Tokenizer& tokenizer, const Vocabulary& vocab,
                                            int64_t* masks) {
    std::vector<int64_t> ids;
    int64_t count = 0;
    for (size_t at = 0;;) {
        const size_t mask = text.find(kMaskText, at);
        const std::vector<int64_t> piece = encoder_ids(text.substr(at, mask - at), tokenizer, vocab);
        ids.insert(ids.end(), piece.begin(), piece.end());
        if (mask == std::string_view::npos) break;
        ids.push_back(models::kMask);
        ++count;
        at = mask + kMaskText.size();
    }
    if (masks) *masks = count;
    return ids;
}

std::vector<int64_t> encoder_row(std::span<const int64_t> first, std::optional<std::span<const int64_t>> second,
                                 int64_t max_length, bool* truncated) {
    const int64_t specials = second ? 3 : 2;  // <cls>, and a <sep> after each text
    auto a = static_cast<int64_t>(first.size());
    auto b = second ? static_cast<int64_t>(second->size()) : int64_t{0};
    if (max_length > 0) {
        check(max_length >= specials + (second ? 2 : 1), "encoder input", "rows of at most ", max_length,
              " tokens leave no room for the text");
        while (a + b + specials > max_length) (a > b ? a : b) -= 1;  // the longer text first (a tie: the second)
    }
    if (truncated)
        *truncated = a < static_cast<int64_t>(first.size()) || (second && b < static_cast<int64_t>(second->size()));
    std::vector<int64_t> row;
    row.reserve(static_cast<size_t>(a + b + specials));
    row.push_back(models::kCls);
    row.insert(row.end(), first.begin(), first.begin() + a);
    row.push_back(models::kSep);
    if (second) {
        row.insert(row.end(), second->begin(), second->begin() + b);
        row.push_back(models::kSep);
    }
    return row;
}

IntTensor encoder_batch(const std::vector<std::vector<int64_t>>& rows) {
    size_t longest = 0;
    for (const auto& row : rows) longest = std::max(longest, row.size());
    IntTensor batch = IntTensor::full({static_cast<int64_t>(rows.size()), static_cast<int64_t>(longest)}, models::kPad);
    for (size_t r = 0; r < rows.size(); ++r) std::copy(rows[r].begin(), rows[r].end(), batch.data() + r * longest);
    return batch;
}

}  // namespace seqgrad::text
