// Tests of the data layer: the strict dictionary reader (on small files written here), the
// FNV-1a split by headword and its counts on the real CMUdict, vocabularies, the synthetic tasks,
// and batching.
#include "helpers.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "seqgrad/models/model.h"
#include "seqgrad/text.h"
#include "seqgrad/training.h"

using namespace seqgrad::models;
using namespace seqgrad::training;
namespace text = seqgrad::text;
using seqgrad::Error;
using seqgrad::Generator;
using seqgrad::fnv1a_32;
using Catch::Matchers::Contains;

namespace {

// Dictionaries are written with this suffix.
struct TempFile : seqgrad::testing::TempFile {
    explicit TempFile(const std::string& bytes) : seqgrad::testing::TempFile(bytes, ".dict") {}
};
using seqgrad::testing::error_of;

std::vector<std::string> split_words(const std::string& text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string w; in >> w;) out.push_back(w);
    return out;
}

Example example(const std::string& source, const std::vector<std::string>& references) {
    Example e{source, {}, {}, {}};
    for (char c : source) e.source.emplace_back(1, c);
    for (const auto& r : references) e.references.push_back(split_words(r));
    return e;
}

// Rows of an IntTensor [B, L] as vectors.
std::vector<std::vector<int64_t>> rows_of(const seqgrad::IntTensor& t) {
    std::vector<std::vector<int64_t>> rows;
    for (int64_t b = 0; b < t.size(0); ++b) rows.emplace_back(t.data() + b * t.size(1), t.data() + (b + 1) * t.size(1));
    return rows;
}

// Random examples with sources of 1..max_length ids and targets of 1..max_length ids.
std::vector<EncodedExample> random_examples(int64_t count, int64_t max_length, uint64_t seed) {
    Generator gen(seed);
    std::vector<EncodedExample> examples;
    for (int64_t i = 0; i < count; ++i) {
        EncodedExample e;
        const auto source_length = 1 + gen.below(static_cast<uint64_t>(max_length));
        const auto target_length = 1 + gen.below(static_cast<uint64_t>(max_length));
        for (uint64_t k = 0; k < source_length; ++k) e.source.push_back(4 + static_cast<int64_t>(gen.below(20)));
        for (uint64_t k = 0; k < target_length; ++k) e.target.push_back(4 + static_cast<int64_t>(gen.below(20)));
        e.index = i;
        examples.push_back(std::move(e));
    }
    return examples;
}

// One epoch's batches as BatchStream makes them: planned, then each built from its rows.
std::vector<Batch> batches_of(const EncodedPairs& examples, const BatchOptions& options, Generator& gen) {
    std::vector<Batch> batches;
    for (const std::vector<int64_t>& rows : plan_batches(examples, options, gen))
        batches.push_back(make_batch(examples, rows));
    return batches;
}

// Padding cells over all cells of src and tgt.
double padding_fraction(const std::vector<Batch>& batches) {
    int64_t cells = 0, real = 0;
    for (const Batch& b : batches) {
        cells += b.src.numel() + b.tgt.numel();
        real += b.source_tokens + b.target_tokens + b.tgt.size(0);  // + each row's <s>
    }
    return 1.0 - static_cast<double>(real) / static_cast<double>(cells);
}

}  // namespace

// ---- Dictionary reader ------------------------------------------------------------------------

TEST_CASE("the dictionary reader reports malformed lines by number and keeps the good ones", "[data]") {
    const TempFile file("abc EY B IY S IY\n"       // 1 good
                        "nophones\n"               // 2 no phones
                        "\n"                       // 3 blank: ignored
                        "stressed AH0 B\n"         // 4 a phone with stress
                        "   \t \n"                 // 5 blank: ignored
                        "xyz(2) Z IY\r\n"          // 6 a variant before its base word, CRLF
                        "xyz\tEH K S\r\n"          // 7 the base word, a tab, CRLF
                        "\xFF\xFEoops AH\n"        // 8 not UTF-8
                        "abc EY B IY S IY\n"       // 9 a repeated pronunciation
                        "lower ah\n"               // 10 lower-case phone
                        "caf\xC3\xA9 K AE F EY");  // 11 UTF-8 headword, no final newline
    const Lexicon lexicon = read_dictionary(file.path());

    CHECK(lexicon.lines == 11);
    CHECK(lexicon.skipped_lines == 5);
    REQUIRE(lexicon.warnings.size() == 5);
    const std::string prefix = file.path() + ":";
    CHECK_THAT(lexicon.warnings[0], Contains(prefix + "2: no phones for 'nophones'"));
    CHECK_THAT(lexicon.warnings[1], Contains(prefix + "4:"));
    CHECK_THAT(lexicon.warnings[1], Contains("'AH0' is not one of the 39 ARPAbet phones"));
    CHECK_THAT(lexicon.warnings[1], Contains("stress"));
    CHECK_THAT(lexicon.warnings[2], Contains(prefix + "8:"));
    CHECK_THAT(lexicon.warnings[2], Contains("\\xFF\\xFEoops"));  // the bad bytes, escaped
    CHECK_THAT(lexicon.warnings[2], Contains("UTF-8"));
    CHECK_THAT(lexicon.warnings[3], Contains(prefix + "9:"));
    CHECK_THAT(lexicon.warnings[3], Contains("repeats a pronunciation"));
    CHECK_THAT(lexicon.warnings[4], Contains(prefix + "10:"));
    CHECK_THAT(lexicon.warnings[4], Contains("'ah'"));

    REQUIRE(lexicon.words.size() == 3);
    const Example& abc = lexicon.words[0];
    CHECK(abc.name == "abc");
    CHECK(abc.source == std::vector<std::string>{"a", "b", "c"});
    CHECK(abc.references == std::vector<std::vector<std::string>>{{"EY", "B", "IY", "S", "IY"}});
    // The variant and its base word are one word, pronunciations in file order, no "\r" left.
    const Example& xyz = lexicon.words[1];
    CHECK(xyz.name == "xyz");
    CHECK(xyz.references == std::vector<std::vector<std::string>>{{"Z", "IY"}, {"EH", "K", "S"}});
    const Example& cafe = lexicon.words[2];
    CHECK(cafe.source == std::vector<std::string>{"c", "a", "f", "\xC3\xA9"});  // characters, not bytes
}

TEST_CASE("an unreadable dictionary is an Error naming the path", "[data]") {
    const std::string missing = "/nonexistent/seqgrad/no-such.dict";
    const std::string message = error_of([&] { read_dictionary(missing); });
    CHECK_THAT(message, Contains(missing));
    CHECK_THAT(message, Contains("cannot open"));

    const std::string directory = std::filesystem::temp_directory_path().string();
    CHECK_THAT(error_of([&] { read_dictionary(directory); }), Contains(directory));
}

TEST_CASE("a dictionary with no valid entry is an Error naming the path and the first problems", "[data]") {
    const TempFile empty("");
    CHECK_THAT(error_of([&] { read_dictionary(empty.path()); }), Contains(empty.path() + ": no valid entries"));
    const TempFile all_bad("word\nother AH1\n\n");
    const std::string message = error_of([&] { read_dictionary(all_bad.path()); });
    CHECK_THAT(message, Contains(all_bad.path()));
    CHECK_THAT(message, Contains("3 lines, 2 skipped"));
    // It shows why, so that a dictionary in another format is recognised at once.
    CHECK_THAT(message, Contains(all_bad.path() + ":1: no phones for 'word'"));
    CHECK_THAT(message, Contains(all_bad.path() + ":2: in 'other': 'AH1' is not one of the 39 ARPAbet phones (it "
                                                  "carries a stress mark"));
}

TEST_CASE("a variant mark is only (digits) after a word", "[data]") {
    CHECK(strip_variant("word(2)") == "word");
    CHECK(strip_variant("word(12)") == "word");
    CHECK(strip_variant("word") == "word");
    CHECK(strip_variant("word()") == "word()");
    CHECK(strip_variant("word(x)") == "word(x)");
    CHECK(strip_variant("(2)") == "(2)");
    CHECK(strip_variant("a(2)b") == "a(2)b");
}

// ---- Split ------------------------------------------------------------------------------------

TEST_CASE("FNV-1a-32 matches hand-computed values", "[data]") {
    CHECK(fnv1a_32("") == 0x811C9DC5u);  // the offset basis itself
    // "a": (0x811C9DC5 ^ 0x61) * 0x01000193 mod 2^32 = 0x811C9DA4 * 0x01000193 = 0xE40C292C.
    CHECK(fnv1a_32("a") == 0xE40C292Cu);
    // Python: h = 0x811C9DC5; for b in w.encode(): h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    CHECK(fnv1a_32("hello") == 0x4F9F2CABu);
    CHECK(fnv1a_32("through") == 0xFD8FC87Au);
    CHECK(fnv1a_32("amo") == 0x3627C174u);
    CHECK(fnv1a_32("zebra") == 0x7499948Fu);
}

TEST_CASE("the G2P split buckets headwords by hash mod 100, variants with their word", "[data]") {
    CHECK(g2p_split("through") == Split::train);  // 0xFD8FC87A % 100 = 18
    CHECK(g2p_split("amo") == Split::dev);        // 92
    CHECK(g2p_split("zebra") == Split::test);     // 95
    CHECK(g2p_split("fish") == Split::test);      // 99
    CHECK(g2p_split("zebra(2)") == Split::test);
    CHECK(g2p_split("amo(3)") == Split::dev);
    CHECK(std::string(split_name(Split::dev)) == "dev");
}

TEST_CASE("the real CMUdict reads cleanly and splits into the expected counts", "[data]") {
    if (!std::filesystem::exists(kCmudictPath)) {
        // Under CI a missing dictionary fails; elsewhere the case skips.
        const char* ci = std::getenv("CI");
        if (ci != nullptr && std::string(ci) == "true")
            FAIL(kCmudictPath << " is absent under CI (install pocketsphinx-en-us)");
        seqgrad::testing::skip_test(std::string(kCmudictPath) + " is absent (install pocketsphinx-en-us)");
        return;
    }
    Lexicon lexicon = read_dictionary();  // its speed is for bench/, not for a timed test

    CHECK(lexicon.lines == 134723);
    CHECK(lexicon.warnings.empty());
    CHECK(lexicon.words.size() == 125945);
    std::set<std::string> characters;
    for (const Example& word : lexicon.words) characters.insert(word.source.begin(), word.source.end());
    CHECK(characters.size() == 36);

    // The G2P task's data, as a run reads it: a pair per pronunciation of the training words.
    TrainingOptions options;
    options.task = "g2p";
    DataRequest request;
    request.test = true;
    const PairData data = prepare_pairs(options, request);
    std::set<std::vector<int32_t>> train_words;
    for (int64_t i = 0; i < data.train.size(); ++i)
        train_words.emplace(data.train.source(i).begin(), data.train.source(i).end());
    CHECK(train_words.size() == 113309);
    CHECK(data.train.size() == 121197);
    CHECK(data.dev.size() == 6371);
    CHECK(data.test.size() == 6265);

    // The training split's phone vocabulary is the 39 phones after the four specials.
    const text::Vocabulary& phones = data.target_vocab;
    CHECK(phones.size() == 4 + 39);
    CHECK(std::vector<std::string>(phones.symbols().begin() + 4, phones.symbols().end()) == arpabet_phones());
}

// ---- Vocabulary -------------------------------------------------------------------------------

TEST_CASE("a vocabulary puts the specials first and the symbols sorted after them", "[data]") {
    const text::Vocabulary vocab = text::Vocabulary::from_symbols({"c", "a", "b", "a"});
    CHECK(vocab.size() == 7);
    CHECK(vocab.symbols() == std::vector<std::string>{"<pad>", "<s>", "</s>", "<unk>", "a", "b", "c"});
    CHECK(vocab.id("<pad>") == kPad);
    CHECK(vocab.id("<s>") == kSos);
    CHECK(vocab.id("</s>") == kEos);
    CHECK(vocab.id("a") == 4);
    CHECK(vocab.id("c") == 6);
    CHECK(vocab.symbol(5) == "b");
    CHECK(text::Vocabulary().size() == 4);
}

TEST_CASE("unknown symbols encode as <unk>", "[data]") {
    const text::Vocabulary vocab = text::Vocabulary::from_symbols({"a", "b"});
    CHECK(vocab.id("z") == kUnk);
    CHECK_FALSE(vocab.contains("z"));
    CHECK(vocab.contains("a"));
    CHECK(vocab.encode({"a", "z", "b"}) == std::vector<int64_t>{4, kUnk, 5});
    CHECK_THROWS_AS(vocab.symbol(7), Error);
    CHECK_THROWS_AS(vocab.symbol(-1), Error);
}

TEST_CASE("decoding stops at </s> and skips <pad> and <s>", "[data]") {
    const text::Vocabulary vocab = text::Vocabulary::from_symbols({"AH", "B"});
    CHECK(vocab.decode({kSos, 4, 5, kEos, 4, kPad}) == std::vector<std::string>{"AH", "B"});
    CHECK(vocab.decode({4, kPad, 5}) == std::vector<std::string>{"AH", "B"});
    CHECK(vocab.decode({4, kUnk}) == std::vector<std::string>{"AH", "<unk>"});  // a wrong phone stays visible
    CHECK(vocab.decode({kEos, 4}).empty());
    CHECK_THROWS_AS(vocab.decode({9}), Error);
}

TEST_CASE("a vocabulary survives a round trip through JSON", "[data]") {
    const text::Vocabulary vocab = text::Vocabulary::from_symbols({"'", "-", "a", "\xC3\xA9", "\"quoted\""});
    const text::Vocabulary back = text::Vocabulary::from_json(vocab.to_json());
    CHECK(back == vocab);
    CHECK(back.id("\xC3\xA9") == vocab.id("\xC3\xA9"));
    // A stored order is kept as it is, sorted or not: ids are positions.
    const text::Vocabulary unsorted = text::Vocabulary::from_json(R"(["<pad>","<s>","</s>","<unk>","z","a"])");
    CHECK(unsorted.id("z") == 4);
    CHECK(unsorted.id("a") == 5);
}

TEST_CASE("loading a vocabulary validates what it reads", "[data]") {
    CHECK_THAT(error_of([] { text::Vocabulary::from_json("not json"); }), Contains("not valid JSON"));
    CHECK_THAT(error_of([] { text::Vocabulary::from_json(R"({"a": 1})"); }), Contains("array"));
    CHECK_THAT(error_of([] { text::Vocabulary::from_json(R"(["<pad>","<s>"])"); }), Contains("four special"));
    CHECK_THAT(error_of([] { text::Vocabulary::from_json(R"(["<s>","<pad>","</s>","<unk>"])"); }), Contains("id 0"));
    CHECK_THAT(error_of([] { text::Vocabulary::from_json(R"(["<pad>","<s>","</s>","<unk>","a","a"])"); }),
               Contains("twice"));
    CHECK_THAT(error_of([] { text::Vocabulary::from_json(R"(["<pad>","<s>","</s>","<unk>",""])"); }),
               Contains("empty"));
    CHECK_THAT(error_of([] { text::Vocabulary::from_json(R"(["<pad>","<s>","</s>","<unk>",7])"); }),
               Contains("not a string"));
    CHECK_THAT(error_of([] { text::Vocabulary::from_json(R"(["<pad>","<s>","</s>","<unk>","<s>"])"); }),
               Contains("special"));
    CHECK_THROWS_AS(text::Vocabulary::from_symbols({"a", "</s>"}), Error);
    CHECK_THROWS_AS(text::Vocabulary::from_symbols({"a", ""}), Error);
}

TEST_CASE("vocabularies keep the symbols counted often enough, the most frequent first", "[data]") {
    const std::vector<std::pair<std::string, int64_t>> counts = {{"b", 3}, {"a", 1}, {"c", 3}, {"d", 2}};
    CHECK(text::Vocabulary::from_counts(counts, 1, 0).symbols() ==
          std::vector<std::string>{"<pad>", "<s>", "</s>", "<unk>", "a", "b", "c", "d"});
    CHECK(text::Vocabulary::from_counts(counts, 2, 0).symbols() ==
          std::vector<std::string>{"<pad>", "<s>", "</s>", "<unk>", "b", "c", "d"});
    // At most two: the two most frequent (a tie broken by byte order), in byte order.
    CHECK(text::Vocabulary::from_counts(counts, 1, 2).symbols() ==
          std::vector<std::string>{"<pad>", "<s>", "</s>", "<unk>", "b", "c"});
}

TEST_CASE("utf8_characters splits code points and refuses invalid UTF-8", "[data]") {
    CHECK(text::utf8_characters("a\xC3\xA9z") == std::vector<std::string>{"a", "\xC3\xA9", "z"});
    CHECK(text::utf8_characters("\xE2\x82\xAC\xF0\x9F\x98\x80") ==
          std::vector<std::string>{"\xE2\x82\xAC", "\xF0\x9F\x98\x80"});
    CHECK(text::utf8_characters("").empty());
    CHECK_THROWS_AS(text::utf8_characters("\xFF"), Error);
    CHECK_THROWS_AS(text::utf8_characters("\xC3"), Error);          // truncated
    CHECK_THROWS_AS(text::utf8_characters("\xC0\xAF"), Error);      // overlong '/'
    CHECK_THROWS_AS(text::utf8_characters("\xED\xA0\x80"), Error);  // a surrogate
}

// ---- Synthetic tasks --------------------------------------------------------------------------

TEST_CASE("synthetic tasks give each source its copy, reverse or sorted symbols", "[data]") {
    for (const std::string task : {"copy", "reverse", "sort"}) {
        SyntheticOptions options;
        options.task = task;
        options.vocab_size = 5;
        options.min_length = 2;
        options.max_length = 6;
        options.train_size = 300;
        options.dev_size = 20;
        options.test_size = 10;
        Generator gen(7);
        const Dataset data = synthetic_dataset(options, gen);
        CHECK(data.task == task);
        CHECK(data.train.size() == 300);
        CHECK(data.dev.size() == 20);
        CHECK(data.test.size() == 10);
        std::set<size_t> lengths;
        for (const Example& e : data.train) {
            lengths.insert(e.source.size());
            REQUIRE(e.references.size() == 1);
            std::vector<std::string> expected = e.source;
            if (task == "reverse") std::reverse(expected.begin(), expected.end());
            if (task == "sort") std::sort(expected.begin(), expected.end());
            CHECK(e.references[0] == expected);
            for (const std::string& s : e.source) CHECK((s.size() == 1 && s[0] >= 'a' && s[0] <= 'e'));
            CHECK(e.name.size() == e.source.size());
        }
        CHECK(lengths == std::set<size_t>{2, 3, 4, 5, 6});  // every length in range, no other
        std::set<std::string> symbols;
        for (const Example& e : data.train) symbols.insert(e.source.begin(), e.source.end());
        CHECK(symbols.size() == 5);
    }
}

TEST_CASE("synthetic tasks are reproducible from the generator's seed", "[data]") {
    SyntheticOptions options;
    options.task = "reverse";
    options.train_size = 50;
    Generator a(3), b(3), c(4);
    const Dataset first = synthetic_dataset(options, a);
    const Dataset second = synthetic_dataset(options, b);
    const Dataset other = synthetic_dataset(options, c);
    for (size_t i = 0; i < first.train.size(); ++i) CHECK(first.train[i].source == second.train[i].source);
    CHECK(first.test.back().source == second.test.back().source);
    bool all_same = true;
    for (size_t i = 0; i < first.train.size(); ++i)
        all_same = all_same && first.train[i].source == other.train[i].source;
    CHECK_FALSE(all_same);
}

TEST_CASE("synthetic task options are validated", "[data]") {
    Generator gen(1);
    SyntheticOptions options;
    options.task = "shuffle";
    CHECK_THAT(error_of([&] { synthetic_dataset(options, gen); }), Contains("unknown task"));
    options = {};
    options.vocab_size = 27;
    CHECK_THROWS_AS(synthetic_dataset(options, gen), Error);
    options = {};
    options.min_length = 5;
    options.max_length = 4;
    CHECK_THROWS_AS(synthetic_dataset(options, gen), Error);
    options = {};
    options.min_length = 0;
    CHECK_THROWS_AS(synthetic_dataset(options, gen), Error);
    CHECK(is_synthetic_task("sort"));
    CHECK_FALSE(is_synthetic_task("g2p"));
}

// ---- Batches ----------------------------------------------------------------------------------

TEST_CASE("training encodes one example per pronunciation, evaluation one per word", "[data]") {
    // A word with two pronunciations in training, one with one; dev holds a word whose letter
    // training never saw, and has no reference.
    const seqgrad::testing::TempFile train("ab\tX Y\nab\tZ\nb\tY\n", ".tsv"), dev("q\tY\n", ".tsv");
    TrainingOptions options;
    options.task = "corpus";
    options.train_files = {train.path()};
    options.dev_files = {dev.path()};
    options.tgt_tokens = "space";
    const PairData data = prepare_pairs(options);
    const text::Vocabulary& source = data.source_vocab;
    const text::Vocabulary& target = data.target_vocab;
    const EncodedPairs& training = data.train;
    REQUIRE(training.size() == 3);
    CHECK(training[0].index == 0);
    CHECK(training[1].index == 1);
    CHECK(training[2].index == 2);
    CHECK(training[0].source == std::vector<int64_t>{4, 5});
    CHECK(training[1].source == std::vector<int64_t>{4, 5});
    CHECK(training[1].target == std::vector<int64_t>{target.id("Z")});
    const std::vector<Example> words = {example("ab", {"X Y", "Z"}), example("b", {"Y"}), example("q", {})};
    const auto evaluation = encode_for_evaluation(words, source, target);
    REQUIRE(evaluation.size() == 3);
    CHECK(evaluation[0].target == target.encode({"X", "Y"}));
    CHECK(evaluation[2].index == 2);
    CHECK(evaluation[2].source == std::vector<int64_t>{kUnk});  // 'q' was not in training
    CHECK(evaluation[2].target.empty());
}

TEST_CASE("a batch is right-padded with <s> and </s> around each target", "[data]") {
    const std::vector<EncodedExample> examples = {
        {{4, 5, 6}, {7}, 10},
        {{8}, {9, 10, 11}, 11},
    };
    const Batch batch = make_batch(examples, {0, 1});
    CHECK(batch.src.shape() == seqgrad::Shape{2, 3});
    CHECK(batch.tgt.shape() == seqgrad::Shape{2, 5});
    CHECK(rows_of(batch.src) == std::vector<std::vector<int64_t>>{{4, 5, 6}, {8, kPad, kPad}});
    CHECK(rows_of(batch.tgt) ==
          std::vector<std::vector<int64_t>>{{kSos, 7, kEos, kPad, kPad}, {kSos, 9, 10, 11, kEos}});
    CHECK(batch.example_index == std::vector<int64_t>{10, 11});
    CHECK(batch.source_tokens == 4);
    CHECK(batch.target_tokens == 6);  // 1 + 3 phones and two </s>
    // The model's input and output: tgt[:, :-1] and tgt[:, 1:].
    CHECK(rows_of(batch.tgt.slice_last(1, 5))[0] == std::vector<int64_t>{7, kEos, kPad, kPad});

    const std::vector<EncodedExample> with_empty_source = {{{}, {7}, 0}};
    CHECK_THROWS_AS(make_batch(with_empty_source, {0}), Error);
    CHECK_THROWS_AS(make_batch(examples, {2}), Error);
    CHECK_THROWS_AS(make_batch(examples, {}), Error);
}

TEST_CASE("every example is in exactly one batch per epoch, within the limits", "[data]") {
    const auto examples = random_examples(5000, 12, 11);
    BatchOptions options;
    options.max_sentences = 64;
    options.max_tokens = 900;
    options.chunk_size = 1024;
    Generator gen(5);
    const auto batches = batches_of(examples, options, gen);
    std::vector<int> seen(examples.size(), 0);
    for (const Batch& batch : batches) {
        const int64_t rows = batch.src.size(0);
        CHECK(rows <= options.max_sentences);
        CHECK(rows * (batch.src.size(1) + batch.tgt.size(1)) <= options.max_tokens);
        for (int64_t index : batch.example_index) ++seen[static_cast<size_t>(index)];
        // Each row holds its own example.
        for (int64_t b = 0; b < rows; ++b) {
            const EncodedExample& e = examples[static_cast<size_t>(batch.example_index[static_cast<size_t>(b)])];
            CHECK(std::equal(e.source.begin(), e.source.end(), batch.src.data() + b * batch.src.size(1)));
        }
    }
    CHECK(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
}

TEST_CASE("an example larger than the token limit still gets a batch of its own", "[data]") {
    const std::vector<EncodedExample> examples = {{{4, 4, 4, 4, 4, 4}, {5, 5, 5, 5}, 0}, {{4}, {5}, 1}};
    BatchOptions options;
    options.max_tokens = 8;
    Generator gen(1);
    const auto batches = batches_of(examples, options, gen);
    CHECK(batches.size() == 2);
}

TEST_CASE("batches are reproducible from the seed and differ between seeds", "[data]") {
    const auto examples = random_examples(2000, 10, 12);
    BatchOptions options;
    options.max_sentences = 32;
    Generator a(9), b(9), c(10);
    const auto first = plan_batches(examples, options, a);
    CHECK(plan_batches(examples, options, b) == first);
    CHECK(plan_batches(examples, options, c) != first);
}

TEST_CASE("bucketing by length keeps padding small and batch order random", "[data]") {
    const auto examples = random_examples(20000, 20, 13);
    BatchOptions options;
    options.max_sentences = 64;
    options.chunk_size = 64 * 50;
    Generator gen(2);
    const auto bucketed = batches_of(examples, options, gen);
    INFO("padding fraction " << padding_fraction(bucketed));
    // Sources are sorted within a chunk, so they are hardly padded; the targets' lengths are
    // independent of the sources' here, so they keep some padding (in G2P they go together).
    int64_t source_cells = 0, source_tokens = 0;
    for (const Batch& b : bucketed) source_cells += b.src.numel(), source_tokens += b.source_tokens;
    CHECK(1.0 - static_cast<double>(source_tokens) / static_cast<double>(source_cells) < 0.05);

    options.chunk_size = 64;  // one batch a chunk: no bucketing at all
    Generator gen2(2);
    const auto unbucketed = batches_of(examples, options, gen2);
    CHECK(padding_fraction(bucketed) < padding_fraction(unbucketed) - 0.1);

    // Batch order is shuffled: source lengths do not rise through the epoch.
    int rises = 0;
    for (size_t i = 1; i < bucketed.size(); ++i) rises += bucketed[i].src.size(1) > bucketed[i - 1].src.size(1);
    CHECK(rises > 30);
    CHECK(rises < static_cast<int>(bucketed.size()) - 30);
}

TEST_CASE("evaluation batches are sorted by length and map rows back to examples", "[data]") {
    const auto examples = random_examples(500, 15, 14);
    BatchOptions options;
    options.max_sentences = 50;
    const auto batches = make_eval_batches(examples, options);
    CHECK(batches.size() == 10);
    std::vector<int> seen(examples.size(), 0);
    int64_t previous_length = 0;
    for (const Batch& batch : batches) {
        for (size_t b = 0; b < batch.example_index.size(); ++b) {
            const int64_t index = batch.example_index[b];
            ++seen[static_cast<size_t>(index)];
            const auto length = static_cast<int64_t>(examples[static_cast<size_t>(index)].source.size());
            CHECK(length >= previous_length);
            previous_length = length;
        }
    }
    CHECK(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
    // Deterministic: the same batches every time.
    const auto again = make_eval_batches(examples, options);
    CHECK(again.front().example_index == batches.front().example_index);
}

TEST_CASE("a batch stream moves through epochs and resumes exactly from its state", "[data]") {
    const auto examples = random_examples(300, 8, 15);
    BatchOptions options;
    options.max_sentences = 16;
    BatchStream stream(examples, options, 42);
    const int64_t per_epoch = stream.batches_in_epoch();
    REQUIRE(per_epoch >= 19);  // 300 / 16, plus chunk ends

    std::vector<std::vector<int64_t>> epoch0, epoch1;
    for (int64_t i = 0; i < per_epoch; ++i) epoch0.push_back(stream.next().example_index);
    CHECK(stream.state().epoch == 1);
    CHECK(stream.state().next_batch == 0);
    for (int64_t i = 0; i < 5; ++i) epoch1.push_back(stream.next().example_index);
    CHECK(epoch1[0] != epoch0[0]);  // each epoch is shuffled anew

    // Resume from the middle of epoch 1, in a fresh stream.
    const BatchStreamState saved = stream.state();
    CHECK(saved.epoch == 1);
    CHECK(saved.next_batch == 5);
    const Batch expected = stream.next();
    BatchStream resumed(examples, options, 42);
    resumed.restore(saved);
    const Batch got = resumed.next();
    CHECK(got.example_index == expected.example_index);
    CHECK(got.src.to_vector() == expected.src.to_vector());
    CHECK(got.tgt.to_vector() == expected.tgt.to_vector());

    // A fresh stream with the same seed replays epoch 0.
    BatchStream replay(examples, options, 42);
    CHECK(replay.next().example_index == epoch0[0]);

    CHECK_THROWS_AS(resumed.restore({0, 100000}), Error);
    CHECK(resumed.state().next_batch == 6);  // a refused restore leaves the stream as it was
    CHECK_THROWS_AS(BatchStream({}, options, 1), Error);
}
