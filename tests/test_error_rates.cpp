// Tests of the evaluation metrics: Levenshtein distance, and WER and PER as error_rates.h defines them
// (any-reference scoring, the nearest reference's length as the PER denominator), on cases
// worked out by hand.
#include "helpers.h"

#include <cmath>
#include <sstream>

#include "seqgrad/training/error_rates.h"

using seqgrad::Error;
using seqgrad::training::edit_distance;
using seqgrad::training::ErrorRates;
using Phones = std::vector<std::string>;

namespace {

// "AH B K" -> {"AH", "B", "K"}: phones written as they appear in the dictionary.
Phones phones(const std::string& text) {
    Phones out;
    std::istringstream in(text);
    for (std::string phone; in >> phone;) out.push_back(phone);
    return out;
}

}  // namespace

TEST_CASE("edit distance counts insertions, deletions and substitutions", "[metrics]") {
    const auto chars = [](const std::string& s) { return std::vector<char>(s.begin(), s.end()); };
    CHECK(edit_distance(chars("kitten"), chars("sitting")) == 3);  // two substitutions, one insertion
    CHECK(edit_distance(chars("sitting"), chars("kitten")) == 3);  // symmetric
    CHECK(edit_distance(chars("flaw"), chars("lawn")) == 2);       // a deletion and an insertion
    CHECK(edit_distance(chars("abc"), chars("abc")) == 0);
    CHECK(edit_distance(chars(""), chars("abc")) == 3);
    CHECK(edit_distance(chars("abc"), chars("")) == 3);
    CHECK(edit_distance(chars(""), chars("")) == 0);
    CHECK(edit_distance(phones("TH R UW"), phones("TH R OW")) == 1);
    CHECK(edit_distance(std::vector<int64_t>{4, 5, 6, 7}, std::vector<int64_t>{5, 6, 7, 4}) == 2);
}

TEST_CASE("a word is right when its prediction equals any of its references", "[metrics]") {
    ErrorRates rates;
    // "either": IY DH ER or AY DH ER; predicting the second one is no error.
    rates.add(phones("AY DH ER"), {phones("IY DH ER"), phones("AY DH ER")});
    CHECK(rates.words() == 1);
    CHECK(rates.word_errors() == 0);
    CHECK(rates.phone_errors() == 0);
    CHECK(rates.reference_phones() == 3);
    CHECK(rates.wer() == 0.0);
    CHECK(rates.per() == 0.0);
}

TEST_CASE("PER measures against the nearest reference", "[metrics]") {
    ErrorRates rates;
    // Distances: 2 to the first reference, 1 to the second (6 phones): the second one counts.
    rates.add(phones("T AH M EY T"), {phones("T AH M AA T OW"), phones("T AH M EY T OW")});
    CHECK(rates.word_errors() == 1);
    CHECK(rates.phone_errors() == 1);
    CHECK(rates.reference_phones() == 6);
    CHECK(rates.wer() == 100.0);
    CHECK(rates.per() == Approx(100.0 / 6));
}

TEST_CASE("PER breaks a tie between references by the shorter one", "[metrics]") {
    // "A B" is one edit from "A B C" (3 phones) and from "A" (1 phone): "A" is the reference.
    for (const bool shorter_first : {true, false}) {
        ErrorRates rates;
        const std::vector<Phones> references = shorter_first ? std::vector<Phones>{phones("A"), phones("A B C")}
                                                             : std::vector<Phones>{phones("A B C"), phones("A")};
        rates.add(phones("A B"), references);
        CHECK(rates.phone_errors() == 1);
        CHECK(rates.reference_phones() == 1);
        CHECK(rates.per() == 100.0);
    }
}

TEST_CASE("an empty prediction costs every phone of the shortest reference", "[metrics]") {
    ErrorRates rates;
    rates.add(Phones{}, {phones("K AE T S"), phones("K AE T")});
    CHECK(rates.word_errors() == 1);
    CHECK(rates.phone_errors() == 3);
    CHECK(rates.reference_phones() == 3);
    CHECK(rates.per() == 100.0);
}

TEST_CASE("WER and PER sum over words, not average per word", "[metrics]") {
    ErrorRates rates;
    rates.add(phones("TH R UW"), {phones("TH R UW")});              // right: 0 of 3
    rates.add(phones("F IY N IH K S"), {phones("F IY N IH K S")});  // right: 0 of 6
    rates.add(phones("K AA T"), {phones("K AE T")});                // 1 of 3
    rates.add(phones("D AO G Z"), {phones("D AO G")});              // 1 of 3
    CHECK(rates.words() == 4);
    CHECK(rates.wer() == 50.0);
    CHECK(rates.per() == Approx(100.0 * 2 / 15));

    // Ids score the same as symbols.
    ErrorRates by_id;
    by_id.add(std::vector<int64_t>{4, 5, 6}, {{4, 5, 6}});
    by_id.add(std::vector<int64_t>{4, 5}, {{4, 5, 7}, {9, 9, 9, 9}});
    CHECK(by_id.wer() == 50.0);
    CHECK(by_id.per() == Approx(100.0 / 6));

    // Merging two halves gives the totals of the whole.
    ErrorRates first, second;
    first.add(phones("TH R UW"), {phones("TH R UW")});
    first.add(phones("F IY N IH K S"), {phones("F IY N IH K S")});
    second.add(phones("K AA T"), {phones("K AE T")});
    second.add(phones("D AO G Z"), {phones("D AO G")});
    first.merge(second);
    CHECK(first.words() == rates.words());
    CHECK(first.wer() == rates.wer());
    CHECK(first.per() == rates.per());
}

TEST_CASE("error rates are NaN before any word and refuse words without references", "[metrics]") {
    ErrorRates rates;
    CHECK(rates.words() == 0);
    CHECK(std::isnan(rates.wer()));
    CHECK(std::isnan(rates.per()));
    CHECK_THROWS_AS(rates.add(phones("A"), std::vector<Phones>{}), Error);
    CHECK_THROWS_AS(rates.add(phones("A"), {phones("A"), Phones{}}), Error);
    CHECK(rates.words() == 0);  // a refused word leaves the totals alone
}
