// Evaluation metrics: Levenshtein distance over token sequences, and the word and
// phoneme error rates (WER, PER) scored against any of a word's reference pronunciations.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

namespace seqgrad::training {

// The least number of insertions, deletions and substitutions that turn `a` into `b`.
// O(|a| |b|) time, O(|b|) memory.
template <typename Token>
int64_t edit_distance(const std::vector<Token>& a, const std::vector<Token>& b) {
    // row[j] = distance between the first i tokens of a and the first j tokens of b.
    std::vector<int64_t> row(b.size() + 1);
    std::iota(row.begin(), row.end(), int64_t{0});
    for (size_t i = 1; i <= a.size(); ++i) {
        int64_t diagonal = row[0];  // distance(a[:i-1], b[:j-1])
        row[0] = static_cast<int64_t>(i);
        for (size_t j = 1; j <= b.size(); ++j) {
            const int64_t above = row[j];
            const int64_t substitute = diagonal + (a[i - 1] == b[j - 1] ? 0 : 1);
            row[j] = std::min({substitute, above + 1, row[j - 1] + 1});
            diagonal = above;
        }
    }
    return row[b.size()];
}

// Sums WER and PER over words, defined as:
// - WER: the percentage of words whose prediction equals none of their references;
// - PER: per word, the edit distance to the nearest reference (ties: the shorter reference);
//   the sum of those distances over the sum of those references' lengths, as a percentage.
class ErrorRates {
public:
    // Scores one word. `references` must not be empty, nor any reference in it (an empty
    // reference has no phones to divide by). Symbols or ids: whichever the caller holds.
    void add(const std::vector<std::string>& prediction, const std::vector<std::vector<std::string>>& references);
    void add(const std::vector<int64_t>& prediction, const std::vector<std::vector<int64_t>>& references);
    void merge(const ErrorRates& other);  // e.g. totals from several threads

    int64_t words() const { return words_; }
    int64_t word_errors() const { return word_errors_; }
    int64_t phone_errors() const { return phone_errors_; }          // sum of nearest distances
    int64_t reference_phones() const { return reference_phones_; }  // sum of their lengths
    // Percentages; NaN before any word is added (0/0: there is no rate to report).
    double wer() const;
    double per() const;

private:
    template <typename Token>
    void add_word(const std::vector<Token>& prediction, const std::vector<std::vector<Token>>& references);

    int64_t words_ = 0;
    int64_t word_errors_ = 0;
    int64_t phone_errors_ = 0;
    int64_t reference_phones_ = 0;
};

}  // namespace seqgrad::training
