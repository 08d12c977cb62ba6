// Corpus-level BLEU and chrF as sacreBLEU 2.x computes them with its default settings (Post 2018,
// "A Call for Clarity in Reporting BLEU Scores"), so that scores reported by seqgrad can be compared
// with published ones. BLEU: Papineni et al. 2002, on mteval-v13a tokens, n-grams up to 4, NIST
// ("exp") smoothing, case kept. chrF: Popović 2015, character n-grams up to 6, beta 2, whitespace
// removed.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace seqgrad::training {

// The "13a" tokenization of mteval-v13a.pl as sacreBLEU applies it: drops "<skipped>", joins
// "-\n" line breaks, decodes &quot; &amp; &lt; &gt; (in that order, each over the whole line),
// splits off ASCII punctuation and symbols, splits periods and commas except between digits and
// a dash after a digit, and returns the tokens joined by single spaces. `line` must be UTF-8.
std::string tokenize_13a(std::string_view line);

struct BleuResult {
    double score = 0.0;                  // percent
    std::array<double, 4> precisions{};  // n-gram precisions in percent, order 1 to 4, as smoothed
    double brevity_penalty = 0.0;
    int64_t hyp_len = 0;               // hypothesis tokens in the corpus
    int64_t ref_len = 0;               // sum of each hypothesis' closest reference length
    std::array<int64_t, 4> matches{};  // clipped n-gram matches, order 1 to 4
    std::array<int64_t, 4> totals{};   // hypothesis n-grams, order 1 to 4
};

// BLEU of a corpus: references[i] holds every reference of hypotheses[i] (one or more; their
// number may vary between hypotheses; an empty string is a reference of length 0). n-gram counts
// are clipped by their largest count in any one reference; the brevity penalty compares the corpus
// length with the sum, over hypotheses, of the reference length closest to the hypothesis' length
// (the shorter one on a tie). Throws seqgrad::Error for an empty corpus, mismatched counts, a
// hypothesis without references, or text that is not UTF-8.
BleuResult corpus_bleu(const std::vector<std::string>& hypotheses,
                       const std::vector<std::vector<std::string>>& references);

// sacreBLEU's chrF settings; the defaults are its defaults (its chrF2 signature "nc:6|nw:0|space:no"
// with "eff:yes").
struct ChrfOptions {
    int char_order = 6;  // character n-grams of orders 1 to char_order
    int beta = 2;        // recall weighs beta times as much as precision
    // false: precision and recall are averaged over the orders that both hypothesis and reference
    // have n-grams of, then combined (sacreBLEU's default). true: an F-score per order, with 1e-16
    // standing in for an undefined precision, recall or F-score, averaged over all orders (the
    // chrF++.py, Moses and NLTK convention).
    bool eps_smoothing = false;
    bool keep_whitespace = false;  // count whitespace as characters instead of removing it
};

// chrF of a corpus in percent: per hypothesis, the reference whose statistics give the best
// F-score (the first of equals); those statistics summed over the corpus, then scored. Characters
// are Unicode code points. Same errors as corpus_bleu, and for char_order < 1 or beta < 0.
double corpus_chrf(const std::vector<std::string>& hypotheses, const std::vector<std::vector<std::string>>& references,
                   const ChrfOptions& options = {});

}  // namespace seqgrad::training
