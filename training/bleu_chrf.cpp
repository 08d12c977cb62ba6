// BLEU, chrF and the 13a tokenizer (bleu_chrf.h defines them). Text is decoded to code points
// first: sacreBLEU works on Python strings, so its whitespace, its "any character but a digit" and
// chrF's characters are all code points, never bytes.
#include "seqgrad/training/bleu_chrf.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iterator>
#include <limits>
#include <unordered_map>

#include "seqgrad/core/error.h"
#include "seqgrad/text/utf8.h"

namespace seqgrad::training {
namespace {

constexpr int kBleuOrder = 4;
constexpr size_t kValid = std::numeric_limits<size_t>::max();

// Decodes UTF-8 into `out`. Returns kValid, or the byte offset of the first sequence that is not
// UTF-8 (stray continuation byte, truncation, overlong form, surrogate, beyond U+10FFFF).
size_t decode_utf8(std::string_view text, std::u32string& out) {
    out.clear();
    out.reserve(text.size());
    for (size_t at = 0; at < text.size();) {
        char32_t code;
        const size_t length = text::utf8_decode(text, at, code);
        if (length == 0) return at;
        out.push_back(code);
        at += length;
    }
    return kValid;
}

void append_utf8(std::string& out, char32_t code) {
    if (code < 0x80) {
        out += static_cast<char>(code);
    } else if (code < 0x800) {
        out += static_cast<char>(0xC0 | (code >> 6));
        out += static_cast<char>(0x80 | (code & 0x3F));
    } else if (code < 0x10000) {
        out += static_cast<char>(0xE0 | (code >> 12));
        out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (code & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (code >> 18));
        out += static_cast<char>(0x80 | ((code >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (code & 0x3F));
    }
}

// Whitespace as Python's str.split() and str.rstrip() see it (str.isspace()), which is what
// sacreBLEU splits tokens on, strips lines with, and removes before counting chrF's characters.
bool is_space(char32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

bool is_digit(char32_t c) { return c >= U'0' && c <= U'9'; }  // ASCII only, as the class [0-9]
bool is_period_or_comma(char32_t c) { return c == U'.' || c == U','; }

// The characters 13a always splits off: the ASCII ranges {-~, [-`, space-&, (-+, :-@, and "/",
// that is every ASCII symbol and punctuation mark except ' , - . (handled below or kept inside
// words) and the digits and letters.
bool is_13a_symbol(char32_t c) {
    return (c >= U'{' && c <= U'~') || (c >= U'[' && c <= U'`') || (c >= U' ' && c <= U'&') ||
           (c >= U'(' && c <= U'+') || (c >= U':' && c <= U'@') || c == U'/';
}

// Python's str.replace: every non-overlapping occurrence, scanning left to right.
void replace_all(std::u32string& text, std::u32string_view from, std::u32string_view to) {
    std::u32string out;
    size_t start = 0;
    for (size_t found; (found = text.find(from, start)) != std::u32string::npos; start = found + from.size()) {
        out.append(text, start, found - start);
        out.append(to);
    }
    if (start == 0) return;
    out.append(text, start, std::u32string::npos);
    text = std::move(out);
}

// A substitution whose pattern is two single characters, `first` then `second`, with the
// semantics of a regular-expression substitution: matches are found left to right and do not
// overlap, so the second character of a match cannot start the next one. That rule decides how
// runs such as "a.,5" split; `emit` writes the replacement of one match.
template <typename First, typename Second, typename Emit>
std::u32string substitute_pairs(const std::u32string& text, First first, Second second, Emit emit) {
    std::u32string out;
    out.reserve(text.size() + text.size() / 2);
    size_t at = 0;
    while (at < text.size()) {
        if (at + 1 < text.size() && first(text[at]) && second(text[at + 1])) {
            emit(out, text[at], text[at + 1]);
            at += 2;
        } else {
            out += text[at++];
        }
    }
    return out;
}

// The 13a tokens of a decoded line (the steps of mteval-v13a.pl's tokenization, in its order).
std::vector<std::string> tokens_13a(std::u32string line) {
    replace_all(line, U"<skipped>", U"");
    replace_all(line, U"-\n", U"");
    replace_all(line, U"\n", U" ");
    // One pass per entity, so "&amp;lt;" becomes "<" but "&amp;quot;" stays "&quot;".
    replace_all(line, U"&quot;", U"\"");
    replace_all(line, U"&amp;", U"&");
    replace_all(line, U"&lt;", U"<");
    replace_all(line, U"&gt;", U">");

    // Padding: a period or comma at either end has a neighbour that is not a digit.
    std::u32string padded;
    padded.reserve(line.size() * 3 + 2);
    padded += U' ';
    for (const char32_t c : line) {
        if (is_13a_symbol(c)) {
            padded += U' ';
            padded += c;
            padded += U' ';
        } else {
            padded += c;
        }
    }
    padded += U' ';

    const auto not_digit = [](char32_t c) { return !is_digit(c); };
    const auto is_dash = [](char32_t c) { return c == U'-'; };
    // A period or comma not preceded by a digit: "a." -> "a . ".
    std::u32string text = substitute_pairs(padded, not_digit, is_period_or_comma,
                                           [](std::u32string& out, char32_t a, char32_t b) {
        out += a, out += U' ', out += b, out += U' ';
    });
    // A period or comma not followed by a digit: ".a" -> " . a".
    text = substitute_pairs(text, is_period_or_comma, not_digit, [](std::u32string& out, char32_t a, char32_t b) {
        out += U' ', out += a, out += U' ', out += b;
    });
    // A dash preceded by a digit: "5-" -> "5 - ".
    text = substitute_pairs(text, is_digit, is_dash, [](std::u32string& out, char32_t a, char32_t b) {
        out += a, out += U' ', out += b, out += U' ';
    });

    std::vector<std::string> tokens;
    for (size_t at = 0; at < text.size();) {
        if (is_space(text[at])) {
            ++at;
            continue;
        }
        std::string token;
        for (; at < text.size() && !is_space(text[at]); ++at) append_utf8(token, text[at]);
        tokens.push_back(std::move(token));
    }
    return tokens;
}

// ---------------------------------------------------------------------------------------------
// BLEU

// n-gram counts of one token sequence, by order (index 0: unigrams). An n-gram is keyed by its
// tokens joined with spaces, which no 13a token contains.
using WordNgrams = std::array<std::unordered_map<std::string, int64_t>, kBleuOrder>;

WordNgrams word_ngrams(const std::vector<std::string>& tokens) {
    WordNgrams ngrams;
    for (size_t n = 1; n <= static_cast<size_t>(kBleuOrder); ++n) {
        for (size_t start = 0; start + n <= tokens.size(); ++start) {
            std::string key = tokens[start];
            for (size_t i = start + 1; i < start + n; ++i) key += ' ', key += tokens[i];
            ++ngrams[n - 1][key];
        }
    }
    return ngrams;
}

// sacreBLEU strips trailing whitespace before tokenizing (which matters for a final "-\n").
std::vector<std::string> bleu_tokens(std::u32string& decoded) {
    while (!decoded.empty() && is_space(decoded.back())) decoded.pop_back();
    return tokens_13a(std::move(decoded));
}

// BLEU from corpus statistics (Papineni et al. 2002): brevity penalty times the geometric mean of
// the n-gram precisions. A precision with no match is replaced as in NIST's mteval (method 3 of
// Chen and Cherry 2014, sacreBLEU's "exp"): 1 / (2^k * total) for the k-th such order. With no
// match at all the score is 0; an order without any hypothesis n-gram leaves its precision at 0,
// whose log sacreBLEU floors at -9999999999, which also gives 0.
void score_bleu(BleuResult& result) {
    result.brevity_penalty = 1.0;
    if (result.hyp_len < result.ref_len) {
        result.brevity_penalty =
            result.hyp_len > 0
                ? std::exp(1.0 - static_cast<double>(result.ref_len) / static_cast<double>(result.hyp_len))
                : 0.0;
    }
    result.precisions.fill(0.0);
    result.score = 0.0;
    if (std::all_of(result.matches.begin(), result.matches.end(), [](int64_t m) { return m == 0; })) return;

    double smoothing = 1.0;
    for (int n = 0; n < kBleuOrder; ++n) {
        if (result.totals[n] == 0) break;
        const auto total = static_cast<double>(result.totals[n]);
        if (result.matches[n] == 0) {
            smoothing *= 2.0;
            result.precisions[n] = 100.0 / (smoothing * total);
        } else {
            result.precisions[n] = 100.0 * static_cast<double>(result.matches[n]) / total;
        }
    }
    double log_sum = 0.0;
    for (const double p : result.precisions) log_sum += p == 0.0 ? -9999999999.0 : std::log(p);
    result.score = result.brevity_penalty * std::exp(log_sum / kBleuOrder);
}

void check_corpus(const char* op, const std::vector<std::string>& hypotheses,
                  const std::vector<std::vector<std::string>>& references) {
    check(!hypotheses.empty(), op, "no hypotheses to score");
    check(hypotheses.size() == references.size(), op, hypotheses.size(), " hypotheses but ", references.size(),
          " reference lists (one list per hypothesis)");
    for (size_t i = 0; i < references.size(); ++i)
        check(!references[i].empty(), op, "hypothesis ", i, " has no reference");
}

// ---------------------------------------------------------------------------------------------
// chrF

// Character n-gram counts by order (index 0: single characters).
using CharNgrams = std::vector<std::unordered_map<std::u32string, int64_t>>;

CharNgrams char_ngrams(const std::u32string& decoded, const ChrfOptions& options) {
    std::u32string line;
    if (options.keep_whitespace) {
        line = decoded;
    } else {
        std::copy_if(decoded.begin(), decoded.end(), std::back_inserter(line), [](char32_t c) { return !is_space(c); });
    }
    CharNgrams ngrams(static_cast<size_t>(options.char_order));
    for (size_t n = 1; n <= ngrams.size(); ++n)
        for (size_t start = 0; start + n <= line.size(); ++start) ++ngrams[n - 1][line.substr(start, n)];
    return ngrams;
}

// Per order: hypothesis n-grams, reference n-grams, matches (clipped by the reference count).
// sacreBLEU counts no hypothesis n-grams for an order the reference has none of, so that order
// drops out of its averages instead of scoring 0.
std::vector<int64_t> chrf_statistics(const CharNgrams& hypothesis, const CharNgrams& reference) {
    std::vector<int64_t> stats;
    stats.reserve(3 * hypothesis.size());
    for (size_t n = 0; n < hypothesis.size(); ++n) {
        int64_t hyp_count = 0;
        int64_t ref_count = 0;
        int64_t matches = 0;
        for (const auto& [gram, count] : hypothesis[n]) {
            hyp_count += count;
            if (const auto found = reference[n].find(gram); found != reference[n].end())
                matches += std::min(count, found->second);
        }
        for (const auto& entry : reference[n]) ref_count += entry.second;
        stats.push_back(reference[n].empty() ? 0 : hyp_count);
        stats.push_back(ref_count);
        stats.push_back(matches);
    }
    return stats;
}

// The F-beta score of chrF (Popović 2015) in percent, with the smoothing ChrfOptions describes.
double chrf_score(const std::vector<int64_t>& stats, const ChrfOptions& options) {
    constexpr double kEps = 1e-16;
    const auto factor = static_cast<double>(options.beta) * static_cast<double>(options.beta);
    const size_t orders = stats.size() / 3;
    double eps_sum = 0.0;
    double precision_sum = 0.0;
    double recall_sum = 0.0;
    int effective_orders = 0;
    for (size_t n = 0; n < orders; ++n) {
        const int64_t hyp = stats[3 * n];
        const int64_t ref = stats[3 * n + 1];
        const auto matches = static_cast<double>(stats[3 * n + 2]);
        const double precision = hyp > 0 ? matches / static_cast<double>(hyp) : kEps;
        const double recall = ref > 0 ? matches / static_cast<double>(ref) : kEps;
        const double denominator = factor * precision + recall;
        eps_sum += denominator > 0 ? (1.0 + factor) * precision * recall / denominator : kEps;
        if (hyp > 0 && ref > 0) {
            precision_sum += precision;
            recall_sum += recall;
            ++effective_orders;
        }
    }
    if (options.eps_smoothing) return 100.0 * eps_sum / static_cast<double>(orders);

    if (effective_orders == 0) return 0.0;
    const double precision = precision_sum / effective_orders;
    const double recall = recall_sum / effective_orders;
    if (precision + recall == 0.0) return 0.0;
    double score = (1.0 + factor) * precision * recall;
    score /= factor * precision + recall;
    return 100.0 * score;
}

}  // namespace

std::string tokenize_13a(std::string_view line) {
    std::u32string decoded;
    const size_t bad = decode_utf8(line, decoded);
    check(bad == kValid, "tokenize_13a", "the line is not valid UTF-8 (byte ", bad, ")");
    std::string joined;
    for (const std::string& token : tokens_13a(std::move(decoded))) {
        if (!joined.empty()) joined += ' ';
        joined += token;
    }
    return joined;
}

BleuResult corpus_bleu(const std::vector<std::string>& hypotheses,
                       const std::vector<std::vector<std::string>>& references) {
    check_corpus("bleu", hypotheses, references);
    BleuResult result;
    std::u32string decoded;
    for (size_t i = 0; i < hypotheses.size(); ++i) {
        // The clipping counts: each n-gram's largest count in any one reference.
        WordNgrams reference_max;
        std::vector<int64_t> reference_lengths;
        for (size_t r = 0; r < references[i].size(); ++r) {
            const size_t bad = decode_utf8(references[i][r], decoded);
            check(bad == kValid, "bleu", "reference ", r, " of hypothesis ", i, " is not valid UTF-8 (byte ", bad, ")");
            const std::vector<std::string> tokens = bleu_tokens(decoded);
            reference_lengths.push_back(static_cast<int64_t>(tokens.size()));
            const WordNgrams ngrams = word_ngrams(tokens);
            for (int n = 0; n < kBleuOrder; ++n)
                for (const auto& [gram, count] : ngrams[n]) {
                    int64_t& best = reference_max[n][gram];
                    best = std::max(best, count);
                }
        }

        const size_t bad = decode_utf8(hypotheses[i], decoded);
        check(bad == kValid, "bleu", "hypothesis ", i, " is not valid UTF-8 (byte ", bad, ")");
        const std::vector<std::string> tokens = bleu_tokens(decoded);
        const auto length = static_cast<int64_t>(tokens.size());
        result.hyp_len += length;

        // The effective reference length: the closest, the shorter of two equally close.
        int64_t closest = reference_lengths.front();
        for (const int64_t candidate : reference_lengths) {
            const int64_t distance = std::abs(candidate - length);
            const int64_t best_distance = std::abs(closest - length);
            if (distance < best_distance || (distance == best_distance && candidate < closest)) closest = candidate;
        }
        result.ref_len += closest;

        const WordNgrams ngrams = word_ngrams(tokens);
        for (int n = 0; n < kBleuOrder; ++n) {
            for (const auto& [gram, count] : ngrams[n]) {
                result.totals[n] += count;
                if (const auto found = reference_max[n].find(gram); found != reference_max[n].end())
                    result.matches[n] += std::min(count, found->second);
            }
        }
    }
    score_bleu(result);
    return result;
}

double corpus_chrf(const std::vector<std::string>& hypotheses, const std::vector<std::vector<std::string>>& references,
                   const ChrfOptions& options) {
    check(options.char_order >= 1, "chrf", "char_order must be at least 1, not ", options.char_order);
    check(options.beta >= 0, "chrf", "beta must not be negative, not ", options.beta);
    check_corpus("chrf", hypotheses, references);
    std::vector<int64_t> corpus(3 * static_cast<size_t>(options.char_order), 0);
    std::u32string decoded;
    for (size_t i = 0; i < hypotheses.size(); ++i) {
        size_t bad = decode_utf8(hypotheses[i], decoded);
        check(bad == kValid, "chrf", "hypothesis ", i, " is not valid UTF-8 (byte ", bad, ")");
        const CharNgrams hypothesis = char_ngrams(decoded, options);
        // The reference that scores best against this hypothesis alone; ties keep the first.
        std::vector<int64_t> best;
        double best_score = -1.0;
        for (size_t r = 0; r < references[i].size(); ++r) {
            bad = decode_utf8(references[i][r], decoded);
            check(bad == kValid, "chrf", "reference ", r, " of hypothesis ", i, " is not valid UTF-8 (byte ", bad, ")");
            std::vector<int64_t> stats = chrf_statistics(hypothesis, char_ngrams(decoded, options));
            const double score = chrf_score(stats, options);
            if (score > best_score) {
                best_score = score;
                best = std::move(stats);
            }
        }
        for (size_t k = 0; k < corpus.size(); ++k) corpus[k] += best[k];
    }
    return chrf_score(corpus, options);
}

}  // namespace seqgrad::training
