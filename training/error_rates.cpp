// WER and PER accumulated over words (error_rates.h defines them).
#include "seqgrad/training/error_rates.h"

#include <limits>

#include "seqgrad/core/error.h"

namespace seqgrad::training {

template <typename Token>
void ErrorRates::add_word(const std::vector<Token>& prediction, const std::vector<std::vector<Token>>& references) {
    check(!references.empty(), "ErrorRates::add", "a word needs at least one reference");
    // The nearest reference; among equally near ones the shortest, so a tie costs the larger
    // share of that word's phones.
    int64_t best_distance = std::numeric_limits<int64_t>::max();
    int64_t best_length = 0;
    for (const std::vector<Token>& reference : references) {
        check(!reference.empty(), "ErrorRates::add", "a reference is empty");
        const int64_t distance = edit_distance(prediction, reference);
        const int64_t length = static_cast<int64_t>(reference.size());
        if (distance < best_distance || (distance == best_distance && length < best_length)) {
            best_distance = distance;
            best_length = length;
        }
    }
    // A prediction equal to some reference is exactly one at distance 0.
    ++words_;
    if (best_distance != 0) ++word_errors_;
    phone_errors_ += best_distance;
    reference_phones_ += best_length;
}

void ErrorRates::add(const std::vector<std::string>& prediction,
                     const std::vector<std::vector<std::string>>& references) {
    add_word(prediction, references);
}

void ErrorRates::add(const std::vector<int64_t>& prediction, const std::vector<std::vector<int64_t>>& references) {
    add_word(prediction, references);
}

void ErrorRates::merge(const ErrorRates& other) {
    words_ += other.words_;
    word_errors_ += other.word_errors_;
    phone_errors_ += other.phone_errors_;
    reference_phones_ += other.reference_phones_;
}

double ErrorRates::wer() const {
    if (words_ == 0) return std::numeric_limits<double>::quiet_NaN();
    return 100.0 * static_cast<double>(word_errors_) / static_cast<double>(words_);
}

double ErrorRates::per() const {
    if (words_ == 0) return std::numeric_limits<double>::quiet_NaN();
    return 100.0 * static_cast<double>(phone_errors_) / static_cast<double>(reference_phones_);
}

}  // namespace seqgrad::training
