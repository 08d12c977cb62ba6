// Tests of corpus BLEU, chrF and the 13a tokenizer against sacreBLEU 2.x. Values come from three
// places, named at each case: sacreBLEU's own test suite and README (github.com/mjpost/sacrebleu,
// test/test_bleu.py, test/test_chrf.py, test/test_sentence_bleu.py, README.md), worked by hand from
// the definitions (Papineni et al. 2002; Popović 2015; Post 2018), and the tokenizer's regular
// expressions applied by hand.
#include "helpers.h"

#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "seqgrad/core/error.h"
#include "seqgrad/training/bleu_chrf.h"

using seqgrad::Error;
using seqgrad::training::BleuResult;
using seqgrad::training::ChrfOptions;
using seqgrad::training::corpus_bleu;
using seqgrad::training::corpus_chrf;
using seqgrad::training::tokenize_13a;
using Lines = std::vector<std::string>;
using References = std::vector<std::vector<std::string>>;

namespace {

// The corpus of sacreBLEU's README and test_bleu.py: three hypotheses with two references each
// (there given as two reference streams; here as the references of each hypothesis).
const Lines kReadmeHypotheses = {"The dog bit the man.", "It wasn't surprising.", "The man had just bitten him."};
const References kReadmeReferences = {
    {"The dog bit the man.", "The dog had bit the man."},
    {"It was not unexpected.", "No one was surprised."},
    {"The man bit him first.", "The man had bitten the dog."},
};

// A sentence pair of test_chrf.py (the hypothesis there once with a leading space, once without).
const std::string kRiskHypothesis =
    "risk assessment must be made of those who are qualified and expertise in the sector - these are the "
    "scientists .";
const std::string kRiskReference =
    "risk assessment has to be undertaken by those who are qualified and expert in that area - that is the "
    "scientists .";

double chrf(const Lines& hypotheses, const References& references, int beta, bool eps_smoothing,
            bool keep_whitespace = false) {
    ChrfOptions options;
    options.beta = beta;
    options.eps_smoothing = eps_smoothing;
    options.keep_whitespace = keep_whitespace;
    return corpus_chrf(hypotheses, references, options);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// The 13a tokenizer

TEST_CASE("13a splits ASCII punctuation and symbols off words but keeps apostrophes and inner dashes",
          "[text_metrics]") {
    CHECK(tokenize_13a("Hello, world!") == "Hello , world !");
    CHECK(tokenize_13a("(hi) [x] {y} a/b a_b a^b a@b") == "( hi ) [ x ] { y } a / b a _ b a ^ b a @ b");
    CHECK(tokenize_13a("It wasn't well-known") == "It wasn't well-known");
}

TEST_CASE("13a splits periods and commas except between digits", "[text_metrics]") {
    CHECK(tokenize_13a("It costs $3.50, or 3,000 yen.") == "It costs $ 3.50 , or 3,000 yen .");
    // A digit on one side only is not enough: ".5" has no digit before the period, "5." none after.
    CHECK(tokenize_13a(".5 and 5.") == ". 5 and 5 .");
    CHECK(tokenize_13a("Wait...") == "Wait . . .");
}

TEST_CASE("13a matches period and comma pairs left to right without overlap", "[text_metrics]") {
    // "a." is one match of (non-digit)(period or comma), so the "," after it cannot pair with the
    // "." as its non-digit; the next rule leaves ",5" (comma before a digit) alone.
    CHECK(tokenize_13a("a.,5") == "a . ,5");
    CHECK(tokenize_13a("a,.5") == "a , .5");
}

TEST_CASE("13a splits a dash that follows a digit and no other", "[text_metrics]") {
    CHECK(tokenize_13a("5-6 years") == "5 - 6 years");
    CHECK(tokenize_13a("a-5 x-y") == "a-5 x-y");
}

TEST_CASE("13a digits are the ASCII digits only", "[text_metrics]") {
    // Arabic-Indic and fullwidth digits are not in the class [0-9]: a period or comma between them
    // is split off, and a dash after them is not.
    CHECK(tokenize_13a("3.5 3-5") == "3.5 3 - 5");
    CHECK(tokenize_13a("\u0663.\u0665 \u0663-\u0665 \uFF13,\uFF15") == "\u0663 . \u0665 \u0663-\u0665 \uFF13 , \uFF15");
}

TEST_CASE("13a decodes the four entities one after another", "[text_metrics]") {
    CHECK(tokenize_13a("&quot;Hi&quot; &amp; &lt;b&gt;") == "\" Hi \" & < b >");
    // &amp; is decoded after &quot; and before &lt;: "&amp;lt;" ends as "<", while "&amp;quot;" stays
    // the text "&quot;", which is then split as punctuation.
    CHECK(tokenize_13a("&amp;lt;") == "<");
    CHECK(tokenize_13a("&amp;quot;") == "& quot ;");
    CHECK(tokenize_13a("&apos;") == "& apos ;");  // not one of the four
}

TEST_CASE("13a removes <skipped> and joins lines broken after a dash", "[text_metrics]") {
    CHECK(tokenize_13a("a <skipped> b") == "a b");
    CHECK(tokenize_13a("a<skipped>b") == "ab");
    CHECK(tokenize_13a("hyphen-\nated line\nbreak") == "hyphenated line break");
    // "<skipped>" is removed before lines are joined, so a marker split by "-\n" survives.
    CHECK(tokenize_13a("<skip-\nped>") == "< skipped >");
}

TEST_CASE("13a splits on Unicode whitespace and treats other non-ASCII characters as letters", "[text_metrics]") {
    CHECK(tokenize_13a("a\u00A0b\tc\u3000d\r\ne") == "a b c d e");  // no-break and ideographic spaces
    CHECK(tokenize_13a("a\u200Bb") == "a\u200Bb");                  // a zero-width space is not whitespace to Python
    CHECK(tokenize_13a("Müller café.") == "Müller café .");
    CHECK(tokenize_13a("") == "");
    CHECK(tokenize_13a(" \t ") == "");
}

// ---------------------------------------------------------------------------------------------
// BLEU

TEST_CASE("BLEU of a hypothesis equal to its reference is 100", "[text_metrics]") {
    // test_bleu.py, test_raw_bleu_cases.
    const BleuResult bleu = corpus_bleu({"this is a test"}, {{"this is a test"}});
    CHECK(bleu.score == Approx(100.0).margin(1e-9));
    CHECK(bleu.brevity_penalty == 1.0);
    CHECK(bleu.precisions == std::array<double, 4>{100.0, 100.0, 100.0, 100.0});
}

TEST_CASE("BLEU precisions, brevity penalty and exp smoothing of one sentence, worked by hand", "[text_metrics]") {
    // Sentences and n-gram counts from test_bleu.py (test_case_statistics): matches 4/2/1/0 of
    // 6/5/4/3 hypothesis n-grams; 6 hypothesis words against 8 reference words.
    // Precisions: 4/6 = 66.67%, 2/5 = 40%, 1/4 = 25%; the 4-grams have no match, so exp smoothing
    // gives 1/(2 * 3) = 16.67%. BP = exp(1 - 8/6) = 0.71653.
    // BLEU = 0.71653 * (66.67 * 40 * 25 * 16.67)^(1/4) = 0.71653 * 1111111^(1/4) = 0.71653 * 32.4668 = 23.2635.
    const BleuResult bleu = corpus_bleu({"am I am a character sequence"}, {{"I am a symbol string sequence a a"}});
    CHECK(bleu.matches == std::array<int64_t, 4>{4, 2, 1, 0});
    CHECK(bleu.totals == std::array<int64_t, 4>{6, 5, 4, 3});
    CHECK(bleu.hyp_len == 6);
    CHECK(bleu.ref_len == 8);
    CHECK(bleu.precisions[0] == Approx(200.0 / 3.0));
    CHECK(bleu.precisions[1] == Approx(40.0));
    CHECK(bleu.precisions[2] == Approx(25.0));
    CHECK(bleu.precisions[3] == Approx(100.0 / 6.0));
    CHECK(bleu.brevity_penalty == Approx(std::exp(1.0 - 8.0 / 6.0)));
    CHECK(bleu.score == Approx(23.2634727).margin(1e-6));
}

TEST_CASE("BLEU's exp smoothing halves the credit of each further order without a match", "[text_metrics]") {
    // Sentences from test_bleu.py (test_raw_bleu_cases), scored here with the default smoothing:
    // matches 3/2/1/0 of 4/3/2/1 -> 75%, 66.67%, 50%, then 1/(2 * 1) = 50%.
    // BLEU = (75 * 66.67 * 50 * 50)^(1/4) = 12500000^(1/4) = 59.4604.
    const BleuResult one_zero = corpus_bleu({"this is a fest"}, {{"this is a test"}});
    CHECK(one_zero.precisions[3] == Approx(50.0));
    CHECK(one_zero.score == Approx(59.4603558).margin(1e-6));

    // Two orders without a match: trigrams 0 of 2 -> 1/(2 * 2) = 25%, 4-grams 0 of 1 -> 1/(4 * 1)
    // = 25%. With unigrams 3/4 and bigrams 2/3 (see the clipping test), BLEU = (75 * 66.67 * 25 *
    // 25)^(1/4) = 3125000^(1/4) = 42.0448.
    const BleuResult two_zeros = corpus_bleu({"the the the cat"}, {{"the cat", "the the mat"}});
    CHECK(two_zeros.precisions[2] == Approx(25.0));
    CHECK(two_zeros.precisions[3] == Approx(25.0));
    CHECK(two_zeros.score == Approx(42.0448208).margin(1e-6));
}

TEST_CASE("BLEU clips each n-gram by its largest count in any one reference", "[text_metrics]") {
    // "the" occurs 3 times in the hypothesis, once in the first reference and twice in the second:
    // 2 of the 3 match, plus "cat" -> 3/4. Bigrams "the the" x2 (at most once in a reference) and
    // "the cat" (once) -> 2/3. Counts are not summed over references, which would allow all 3.
    const BleuResult bleu = corpus_bleu({"the the the cat"}, {{"the cat", "the the mat"}});
    CHECK(bleu.matches == std::array<int64_t, 4>{3, 2, 0, 0});
    CHECK(bleu.totals == std::array<int64_t, 4>{4, 3, 2, 1});
    // Reference lengths 2 and 3 against 4 words: 3 is the closest, and shorter than the hypothesis.
    CHECK(bleu.ref_len == 3);
    CHECK(bleu.brevity_penalty == 1.0);
}

TEST_CASE("BLEU takes the closest reference length, the shorter one on a tie", "[text_metrics]") {
    // 5 hypothesis words; references of 4 and 6 words are equally close. The 4 gives BP = 1; the 6
    // would give exp(1 - 6/5) = 0.82.
    for (const References& references :
         {References{{"a b c d", "a b c d e f"}}, References{{"a b c d e f", "a b c d"}}}) {
        const BleuResult bleu = corpus_bleu({"a b c d e"}, references);
        CHECK(bleu.ref_len == 4);
        CHECK(bleu.brevity_penalty == 1.0);
        CHECK(bleu.score == Approx(100.0).margin(1e-9));
    }
    // A closer longer reference wins over a farther shorter one: 6 (distance 1) over 3 (distance 2),
    // BP = exp(1 - 6/5).
    const BleuResult longer = corpus_bleu({"a b c d e"}, {{"a b c", "a b c d e f"}});
    CHECK(longer.ref_len == 6);
    CHECK(longer.brevity_penalty == Approx(std::exp(1.0 - 6.0 / 5.0)));
}

TEST_CASE("BLEU of the sacreBLEU README corpus with two references per sentence is 48.530827", "[text_metrics]") {
    // test_bleu.py (test_corpus_bleu_cases, default settings) gives the score; the README the
    // rest: 82.4/50.0/45.5/37.5 (BP = 0.943 ratio = 0.944 hyp_len = 17 ref_len = 18).
    const BleuResult bleu = corpus_bleu(kReadmeHypotheses, kReadmeReferences);
    CHECK(bleu.score == Approx(48.530827).margin(1e-6));
    CHECK(bleu.precisions[0] == Approx(82.4).margin(0.05));
    CHECK(bleu.precisions[1] == Approx(50.0).margin(0.05));
    CHECK(bleu.precisions[2] == Approx(45.5).margin(0.05));
    CHECK(bleu.precisions[3] == Approx(37.5).margin(0.05));
    CHECK(bleu.brevity_penalty == Approx(0.943).margin(0.0005));
    CHECK(bleu.hyp_len == 17);
    CHECK(bleu.ref_len == 18);
}

TEST_CASE("BLEU with a variable number of references matches the sacreBLEU README", "[text_metrics]") {
    // README, "Variable Number of References": the first sentence loses its first reference,
    // given there as None or ''. BLEU = 29.44 82.4/42.9/27.3/12.5 (BP = 0.889 hyp_len = 17
    // ref_len = 19). An empty reference has length 0 but is never the closest here.
    References fewer = kReadmeReferences;
    fewer[0].erase(fewer[0].begin());
    References empty_first = kReadmeReferences;
    empty_first[0][0] = "";
    for (const References& references : {fewer, empty_first}) {
        const BleuResult bleu = corpus_bleu(kReadmeHypotheses, references);
        CHECK(bleu.score == Approx(29.44).margin(0.005));
        CHECK(bleu.precisions[0] == Approx(82.4).margin(0.05));
        CHECK(bleu.precisions[1] == Approx(42.9).margin(0.05));
        CHECK(bleu.precisions[2] == Approx(27.3).margin(0.05));
        CHECK(bleu.precisions[3] == Approx(12.5).margin(0.05));
        CHECK(bleu.brevity_penalty == Approx(0.889).margin(0.0005));
        CHECK(bleu.hyp_len == 17);
        CHECK(bleu.ref_len == 19);
    }
}

TEST_CASE("BLEU of sacreBLEU's Romanian example splits off the semicolon and keeps diacritics apart",
          "[text_metrics]") {
    // test_sentence_bleu.py (from sacreBLEU issue 98): 8.493 with exp smoothing and 13a. Its
    // effective-order setting changes nothing here, as the hypothesis has n-grams of every order.
    // "producţia" (t with cedilla) and "Producția" (t with comma below) are different words.
    const BleuResult bleu = corpus_bleu({"Producția de zahăr primă va fi exprimată în ceea ce privește zahărul alb;"},
                                        {{"producţia de zahăr brut se exprimă în zahăr alb;"}});
    CHECK(bleu.score == Approx(8.493).margin(1e-3));
    CHECK(bleu.hyp_len == 14);  // 13 words and ";"
}

TEST_CASE("BLEU is 0 when no n-gram matches and for empty hypotheses", "[text_metrics]") {
    // test_sentence_bleu.py (issue 141) and test_bleu.py (test_raw_bleu_cases).
    CHECK(corpus_bleu({"this is a cat"}, {{"okay thanks"}}).score == 0.0);
    CHECK(corpus_bleu({"this is a test", "another test"}, {{"ref1"}, {"ref2"}}).score == 0.0);
    // test_bleu.py: empty hypotheses are scored, not dropped; 0 words give BP 0.
    const BleuResult empty = corpus_bleu({"", "", ""}, kReadmeReferences);
    CHECK(empty.score == 0.0);
    CHECK(empty.hyp_len == 0);
    CHECK(empty.ref_len == 17);  // the shorter reference of each sentence: 6, 5 and 6 tokens
    CHECK(empty.brevity_penalty == 0.0);
}

TEST_CASE("BLEU of a corpus without 4-grams is 0 even when it equals its references", "[text_metrics]") {
    // No 4-gram at all: sacreBLEU stops at that order, leaving its precision at 0, and the
    // geometric mean of four precisions is then 0 (effective order is off by default).
    const BleuResult bleu = corpus_bleu({"a b c"}, {{"a b c"}});
    CHECK(bleu.precisions == std::array<double, 4>{100.0, 100.0, 100.0, 0.0});
    CHECK(bleu.brevity_penalty == 1.0);
    CHECK(bleu.score == 0.0);
}

TEST_CASE("BLEU sums n-gram statistics over the corpus before scoring", "[text_metrics]") {
    // Alone, "a b c" scores 0 (no 4-gram) and "d e f g h" 100; together the 4-gram precision is
    // 2/2 and every precision is 100 (the mean of sentence scores would be 50).
    const BleuResult bleu = corpus_bleu({"a b c", "d e f g h"}, {{"a b c"}, {"d e f g h"}});
    CHECK(bleu.totals == std::array<int64_t, 4>{8, 6, 4, 2});
    CHECK(bleu.score == Approx(100.0).margin(1e-9));
}

TEST_CASE("BLEU strips trailing whitespace before tokenizing", "[text_metrics]") {
    // Stripped, "well-\n" is "well-", like the reference; unstripped, the tokenizer would join the
    // line break and make it "well".
    const BleuResult bleu = corpus_bleu({"it is going well-\n"}, {{"it is going well-"}});
    CHECK(bleu.score == Approx(100.0).margin(1e-9));
}

// ---------------------------------------------------------------------------------------------
// chrF

TEST_CASE("chrF of the sacreBLEU README corpus with two references per sentence is 59.73", "[text_metrics]") {
    // README: chrf.corpus_score(sys, refs) -> chrF2 = 59.73 with the default CHRF().
    CHECK(corpus_chrf(kReadmeHypotheses, kReadmeReferences) == Approx(59.73).margin(0.005));
}

TEST_CASE("chrF with the default smoothing matches sacreBLEU's published cases", "[text_metrics]") {
    // test_chrf.py, test_cases_effective_order (beta 3, no eps smoothing: sacreBLEU's default).
    CHECK(chrf({"a"}, {{"a"}}, 3, false) == Approx(100.0).margin(1e-4));
    CHECK(chrf({""}, {{"reference"}}, 3, false) == Approx(0.0).margin(1e-4));
    CHECK(chrf({"a b c"}, {{"a b c"}}, 3, false) == Approx(100.0).margin(1e-4));
    CHECK(chrf({"a b c"}, {{"abc"}}, 3, false) == Approx(100.0).margin(1e-4));
    CHECK(chrf({""}, {{"c"}}, 3, false) == Approx(0.0).margin(1e-4));
    CHECK(chrf({"a", "b"}, {{"a"}, {"c"}}, 3, false) == Approx(50.0).margin(1e-4));
    CHECK(chrf({"aa"}, {{"ab"}}, 3, false) == Approx(25.0).margin(1e-4));
}

TEST_CASE("chrF with eps smoothing matches sacreBLEU's published cases", "[text_metrics]") {
    // test_chrf.py, test_cases (beta 3, eps smoothing): orders without n-grams count as 0.
    CHECK(chrf({"abcdefg"}, {{"hijklmnop"}}, 3, true) == Approx(0.0).margin(1e-4));
    CHECK(chrf({"a"}, {{"b"}}, 3, true) == Approx(0.0).margin(1e-4));
    CHECK(chrf({""}, {{"b"}}, 3, true) == Approx(0.0).margin(1e-4));
    CHECK(chrf({""}, {{"ref"}}, 3, true) == Approx(0.0).margin(1e-4));
    CHECK(chrf({""}, {{"reference"}}, 3, true) == Approx(0.0).margin(1e-4));
    CHECK(chrf({"aa"}, {{"ab"}}, 3, true) == Approx(8.3333).margin(1e-4));
    CHECK(chrf({"a", "b"}, {{"a"}, {"c"}}, 3, true) == Approx(8.3333).margin(1e-4));
    CHECK(chrf({"a"}, {{"a"}}, 3, true) == Approx(16.6667).margin(1e-4));
    CHECK(chrf({"a b c"}, {{"a b c"}}, 3, true) == Approx(50.0).margin(1e-4));
    CHECK(chrf({"a b c"}, {{"abc"}}, 3, true) == Approx(50.0).margin(1e-4));
    CHECK(chrf({" " + kRiskHypothesis}, {{kRiskReference}}, 3, true) == Approx(63.361730).margin(1e-4));
    CHECK(chrf({" Die    Beziehung zwischen  Obama und Netanjahu ist nicht gerade  freundlich. "},
               {{"Das Verhältnis zwischen Obama und Netanyahu ist nicht gerade freundschaftlich."}}, 3,
               true) == Approx(64.1302698).margin(1e-4));
    CHECK(chrf({"Niemand hat die Absicht, eine Mauer zu errichten"},
               {{"Niemand hat die Absicht, eine Mauer zu errichten"}}, 3, true) == Approx(100.0).margin(1e-4));
}

TEST_CASE("chrF of sacreBLEU's Czech sentences with eps smoothing counts accented letters once", "[text_metrics]") {
    // test_chrf.py, test_sentence_level_chrf (beta 2, eps smoothing), each sentence a corpus.
    CHECK(chrf({"Co nás nejvíc trápí, protože lékaři si vybírají, kdo bude žít a kdo zemře."},
               {{"Nejvíce smutní jsme z toho, že musíme rozhodovat o tom, kdo bude žít a kdo zemře."}}, 2,
               true) == Approx(39.14078509).margin(1e-4));
    CHECK(chrf({"Nebo prostě nemají vybavení, které by jim pomohlo, uvedli lékaři."},
               {{"A někdy nemáme ani potřebný materiál, abychom jim pomohli, popsali lékaři."}}, 2,
               true) == Approx(31.22557079).margin(1e-4));
    CHECK(chrf({"Lapali po dechu, jejich životy skončily dřív, než skutečně začaly."},
               {{"Lapali po dechu a pak jejich život skončil - dřív, než skutečně mohl začít, připomněli."}}, 2,
               true) == Approx(57.15704367).margin(1e-4));
}

TEST_CASE("chrF keeping whitespace matches sacreBLEU's published cases", "[text_metrics]") {
    // test_chrf.py, test_cases_keep_whitespace (beta 3, whitespace kept, default smoothing).
    CHECK(chrf({"Die Beziehung zwischen Obama und Netanjahu ist nicht gerade freundlich."},
               {{"Das Verhältnis zwischen Obama und Netanyahu ist nicht gerade freundschaftlich."}}, 3, false,
               true) == Approx(67.3481606).margin(1e-4));
    CHECK(chrf({kRiskHypothesis}, {{kRiskReference}}, 3, false, true) == Approx(65.2414427).margin(1e-4));
}

TEST_CASE("chrF weighs recall beta times as much as precision, worked by hand", "[text_metrics]") {
    // "ab" against "abcd": unigrams P = 2/2, R = 2/4; bigrams P = 1/1, R = 1/3. The hypothesis has
    // no trigram, so orders 3 to 6 drop out of the averages: P = 1, R = (1/2 + 1/3) / 2 = 5/12.
    // F_beta = (1 + b^2) P R / (b^2 P + R):
    //   beta 2: 5 * 5/12 / (4 + 5/12) = 25/53 = 47.1698%
    //   beta 1: 2 * 5/12 / (1 + 5/12) = 10/17 = 58.8235%
    //   beta 0: P = 100%
    CHECK(corpus_chrf({"ab"}, {{"abcd"}}) == Approx(2500.0 / 53.0));
    CHECK(chrf({"ab"}, {{"abcd"}}, 1, false) == Approx(1000.0 / 17.0));
    CHECK(chrf({"ab"}, {{"abcd"}}, 0, false) == Approx(100.0));
}

TEST_CASE("chrF picks per sentence the reference with the best F-score and sums statistics", "[text_metrics]") {
    // Sentence 1, "ab": "xy" scores 0, "abcd" 47.17 (previous test), so "abcd" is used: unigrams
    // 2 hyp / 4 ref / 2 matches, bigrams 1/3/1, no hypothesis n-grams beyond. Sentence 2, "a"
    // against "a": unigrams 1/1/1. Corpus: unigrams P = 3/3, R = 3/5; bigrams P = 1, R = 1/3;
    // P = 1, R = 7/15, F2 = 5 * 7/15 / (4 + 7/15) = 35/67 = 52.2388% (the sentence mean would be 73.6).
    CHECK(corpus_chrf({"ab", "a"}, {{"xy", "abcd"}, {"a"}}) == Approx(3500.0 / 67.0));
    CHECK(corpus_chrf({"ab", "a"}, {{"abcd", "xy"}, {"a"}}) == Approx(3500.0 / 67.0));
}

TEST_CASE("chrF keeps the first of equally good references", "[text_metrics]") {
    // "a" scores 0 against both "b" and "bc", but their statistics differ: unigrams 1 hyp / 1 ref
    // against 1 / 2. With a second sentence "a"/"a" (1/1/1), the corpus unigrams are 2/2/1 if "b"
    // is kept (P = R = 1/2, F = 50%) and 2/3/1 if "bc" is (P = 1/2, R = 1/3, F2 = 5 * 1/6 / (2 +
    // 1/3) = 5/14 = 35.71%). No bigram counts: the hypotheses have none.
    CHECK(corpus_chrf({"a", "a"}, {{"b", "bc"}, {"a"}}) == Approx(50.0));
    CHECK(corpus_chrf({"a", "a"}, {{"bc", "b"}, {"a"}}) == Approx(500.0 / 14.0));
}

TEST_CASE("chrF counts no hypothesis n-grams of an order its reference is too short for", "[text_metrics]") {
    // "abc" against "a": the reference has no bigram, so the sentence adds no hypothesis bigrams
    // either (sacreBLEU's rule); "ab" against "ab" adds 1 of 1. Corpus: unigrams 5 hyp / 3 ref / 3
    // matches (P = 3/5, R = 1), bigrams 1/1/1 (P = R = 1), no trigram in any reference.
    // P = 4/5, R = 1, F2 = 5 * 4/5 / (4 * 4/5 + 1) = 4/4.2 = 95.24%. Counting the 2 bigrams of
    // "abc" would make the bigram precision 1/3 and F2 81.40%.
    CHECK(corpus_chrf({"abc", "ab"}, {{"a"}, {"ab"}}) == Approx(2000.0 / 21.0));
}

TEST_CASE("chrF counts Unicode code points, not bytes", "[text_metrics]") {
    // "aé" against "aè": unigrams 1 of 2 match (P = R = 1/2), bigrams none (P = R = 0), so F = 25%.
    // Counting bytes, é (C3 A9) and è (C3 A8) would share their first byte and score higher.
    CHECK(corpus_chrf({"aé"}, {{"aè"}}) == Approx(25.0));
    CHECK(corpus_chrf({"é"}, {{"è"}}) == 0.0);
    CHECK(corpus_chrf({"日本語"}, {{"日本語"}}) == Approx(100.0));
}

TEST_CASE("chrF removes Unicode whitespace unless asked to keep it", "[text_metrics]") {
    CHECK(corpus_chrf({"a\u00A0b c\u3000d"}, {{"abcd"}}) == Approx(100.0));
    // Kept, the three spaces are characters: unigrams P = 4/7, R = 4/4; no longer n-gram matches
    // (bigrams 0 of 6 / 3, trigrams 0 of 5 / 2, 4-grams 0 of 4 / 1; "abcd" has no 5-gram). P = (4/7) / 4
    // = 1/7, R = 1/4, F2 = 5 * 1/28 / (4/7 + 1/4) = 5/23 = 21.74%.
    ChrfOptions keep;
    keep.keep_whitespace = true;
    CHECK(corpus_chrf({"a\u00A0b c\u3000d"}, {{"abcd"}}, keep) == Approx(500.0 / 23.0));
}

// ---------------------------------------------------------------------------------------------
// Errors

TEST_CASE("BLEU and chrF reject hypothesis and reference lists of different lengths", "[text_metrics]") {
    CHECK_THROWS_WITH(corpus_bleu({"a", "b"}, {{"a"}}), Catch::Contains("bleu: 2 hypotheses but 1 reference lists"));
    CHECK_THROWS_WITH(corpus_chrf({"a"}, {{"a"}, {"b"}}), Catch::Contains("chrf: 1 hypotheses but 2"));
}

TEST_CASE("BLEU and chrF reject a hypothesis without references", "[text_metrics]") {
    CHECK_THROWS_WITH(corpus_bleu({"a", "b"}, {{"a"}, {}}), Catch::Contains("bleu: hypothesis 1 has no reference"));
    CHECK_THROWS_WITH(corpus_chrf({"a"}, {{}}), Catch::Contains("chrf: hypothesis 0 has no reference"));
}

TEST_CASE("BLEU and chrF reject an empty corpus", "[text_metrics]") {
    CHECK_THROWS_AS(corpus_bleu({}, {}), Error);
    CHECK_THROWS_AS(corpus_chrf({}, {}), Error);
}

TEST_CASE("BLEU, chrF and 13a reject text that is not UTF-8", "[text_metrics]") {
    const std::string truncated = "caf\xC3";       // a lead byte without its continuation
    const std::string overlong = "a\xC0\xAF";      // "/" in two bytes
    const std::string surrogate = "\xED\xA0\x80";  // U+D800
    CHECK_THROWS_WITH(corpus_bleu({truncated}, {{"cafe"}}),
                      Catch::Contains("bleu: hypothesis 0 is not valid UTF-8 (byte 3)"));
    CHECK_THROWS_WITH(corpus_bleu({"a"}, {{"a", overlong}}),
                      Catch::Contains("bleu: reference 1 of hypothesis 0 is not valid UTF-8 (byte 1)"));
    CHECK_THROWS_WITH(corpus_chrf({surrogate}, {{"a"}}), Catch::Contains("chrf: hypothesis 0 is not valid UTF-8"));
    CHECK_THROWS_WITH(corpus_chrf({"a"}, {{truncated}}), Catch::Contains("chrf: reference 0 of hypothesis 0"));
    CHECK_THROWS_AS(tokenize_13a(overlong), Error);
}

TEST_CASE("chrF rejects a character order below 1 and a negative beta", "[text_metrics]") {
    ChrfOptions no_order;
    no_order.char_order = 0;
    CHECK_THROWS_WITH(corpus_chrf({"a"}, {{"a"}}, no_order), Catch::Contains("chrf: char_order must be at least 1"));
    ChrfOptions negative_beta;
    negative_beta.beta = -1;
    CHECK_THROWS_WITH(corpus_chrf({"a"}, {{"a"}}, negative_beta), Catch::Contains("chrf: beta must not be negative"));
}
