// Tests of one's own data: the line and pair readers (plain and gzip, TSV and aligned files, bad
// lines by file and line), the tokenizers (characters, symbols, bytes, SentencePiece) and their exact
// detokenization, vocabularies from counts, the data pipeline (carved and given splits, several
// references, limits, unknown tokens), G2P through that same pipeline, and checkpoints that carry
// their tokenizers.
#include "helpers.h"

#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <set>
#include <span>
#include <thread>

#include "seqgrad/models/registry.h"
#include "seqgrad/text.h"
#include "seqgrad/training.h"

using namespace seqgrad::training;
namespace text = seqgrad::text;
using seqgrad::Error;
using seqgrad::inference::Translation;
using seqgrad::inference::Translator;
using seqgrad::testing::error_of;
using seqgrad::testing::TempFile;
using seqgrad::testing::TempDir;
using Catch::Matchers::Contains;

namespace {

// A gzip-compressed file of `text`, removed at the end of the test.
class GzipFile {
public:
    explicit GzipFile(const std::string& text) : file_("", ".gz") {
        gzFile out = gzopen(file_.path().c_str(), "wb");
        REQUIRE(out != nullptr);
        REQUIRE(gzwrite(out, text.data(), static_cast<unsigned>(text.size())) == static_cast<int>(text.size()));
        gzclose(out);
    }
    std::string path() const { return file_.path(); }

private:
    TempFile file_;
};

std::vector<std::string> lines_of(const std::string& path) {
    LineReader reader(path);
    std::vector<std::string> lines;
    for (std::string line; reader.next(line);) lines.push_back(line);
    return lines;
}

struct ReadPair {
    std::string source, target, problem, where;
};

std::vector<ReadPair> pairs_of(const std::vector<std::string>& paths) {
    PairReader reader(paths);
    std::vector<ReadPair> pairs;
    ReadPair p;
    while (reader.next(p.source, p.target, p.problem)) {
        p.where = reader.where();
        pairs.push_back(p);
    }
    return pairs;
}

TrainingOptions corpus_options(const std::vector<std::string>& train) {
    TrainingOptions o;
    o.task = "corpus";
    o.train_files = train;
    o.max_steps = 1;
    return o;
}

// A TSV of `n` pairs "w<i>" -> "x<i>" whose dev and test lines are carved by hash.
std::string numbered_tsv(int n) {
    std::string text;
    for (int i = 0; i < n; ++i) text += "w" + std::to_string(i) + "\tx" + std::to_string(i) + "\n";
    return text;
}

}  // namespace

// ---- reading ----

TEST_CASE("a line reader reads plain and gzip files alike, CRLF and a last line without a newline", "[corpus]") {
    const std::string text = "first\r\nsecond\n\nlast";
    const TempFile plain(text);
    const GzipFile compressed(text);
    const std::vector<std::string> expected = {"first", "second", "", "last"};
    CHECK(lines_of(plain.path()) == expected);
    CHECK(lines_of(compressed.path()) == expected);
    CHECK_THAT(error_of([] { LineReader("/no/such/corpus.tsv"); }),
               Contains("/no/such/corpus.tsv") && Contains("cannot open"));
}

TEST_CASE("a corrupt gzip file is an Error naming the file", "[corpus]") {
    std::string bytes;
    {
        const GzipFile good(numbered_tsv(2000));
        std::ifstream in(good.path(), std::ios::binary);
        bytes.assign(std::istreambuf_iterator<char>(in), {});
    }
    bytes.resize(bytes.size() / 2);  // cut in the middle of the stream
    const TempFile cut(bytes, ".gz");
    CHECK_THAT(error_of([&] { lines_of(cut.path()); }), Contains(cut.path()) && Contains("cannot read"));
}

TEST_CASE("a TSV gives its pairs and names each bad line's problem", "[corpus]") {
    const TempFile tsv("cat\tK AE T\nno tab here\na\tb\tc\n\tempty source\nempty target\t\n\n\xff\tbad\n");
    const std::vector<ReadPair> pairs = pairs_of({tsv.path()});
    REQUIRE(pairs.size() == 7);
    CHECK(pairs[0].problem.empty());
    CHECK(pairs[0].source == "cat");
    CHECK(pairs[0].target == "K AE T");
    CHECK(pairs[0].where == tsv.path() + ":1");
    CHECK_THAT(pairs[1].problem, Contains("no tab"));
    CHECK_THAT(pairs[2].problem, Contains("more than one tab"));
    CHECK_THAT(pairs[3].problem, Contains("source is empty"));
    CHECK_THAT(pairs[4].problem, Contains("target is empty"));
    CHECK_THAT(pairs[5].problem, Contains("empty line"));
    CHECK_THAT(pairs[6].problem, Contains("not valid UTF-8"));
    CHECK(pairs[6].where == tsv.path() + ":7");
}

TEST_CASE("aligned files give line i of each as a pair, and different lengths name both counts", "[corpus]") {
    const TempFile source("one\ntwo\nthree\n"), target("uno\ndos\ntres\n"), short_target("uno\n");
    const std::vector<ReadPair> pairs = pairs_of({source.path(), target.path()});
    REQUIRE(pairs.size() == 3);
    CHECK(pairs[2].source == "three");
    CHECK(pairs[2].target == "tres");
    CHECK_THAT(pairs[2].where, Contains("line 3"));
    CHECK_THAT(error_of([&] {
                   pairs_of({source.path(), short_target.path()});
               }),
               Contains(source.path() + " has 3") && Contains(short_target.path() + " has 1"));
}

// ---- tokenizers ----

TEST_CASE("the char tokenizer reads code points, and lowercases ASCII when asked", "[corpus][tokenizer]") {
    CHECK(text::Tokenizer::characters().tokenize("Añb c") == std::vector<std::string>{"A", "ñ", "b", " ", "c"});
    CHECK(text::Tokenizer::characters(true).tokenize("AbÑ") == std::vector<std::string>{"a", "b", "Ñ"});
    CHECK(text::Tokenizer::characters().detokenize({"A", "ñ", "b", " ", "c"}) == "Añb c");
    CHECK_THAT(error_of([] { text::Tokenizer::characters().tokenize("a\xc3"); }), Contains("not valid UTF-8"));
}

TEST_CASE("the space tokenizer reads whitespace-separated symbols and joins them with one space",
          "[corpus][tokenizer]") {
    const text::Tokenizer t = text::Tokenizer::spaces();
    CHECK(t.tokenize("  K AE\tT ") == std::vector<std::string>{"K", "AE", "T"});
    CHECK(t.detokenize({"K", "AE", "T"}) == "K AE T");
}

namespace {

// `count` bytes from a fixed seed, every value 0..255 alike.
std::string random_bytes(size_t count, uint32_t seed) {
    std::mt19937 gen(seed);
    std::uniform_int_distribution<int> byte(0, 255);
    std::string bytes;
    for (size_t i = 0; i < count; ++i) bytes += static_cast<char>(byte(gen));
    return bytes;
}

}  // namespace

TEST_CASE("the byte tokenizer gives each byte one symbol: printable ASCII, newline and tab as themselves",
          "[corpus][tokenizer]") {
    const text::Tokenizer t = text::Tokenizer::bytes();
    CHECK(t.kind() == "byte");
    CHECK(t.describe() == "byte");
    CHECK(t.tokenize("añ\r\n\t~\x7f") ==
          std::vector<std::string>{"a", "<0xC3>", "<0xB1>", "<0x0D>", "\n", "\t", "~", "<0x7F>"});
    CHECK(t.tokenize(std::string("\0 \xff", 3)) == std::vector<std::string>{"<0x00>", " ", "<0xFF>"});
    std::set<std::string> symbols;
    for (int b = 0; b < 256; ++b) {
        const std::string byte(1, static_cast<char>(b));
        const std::vector<std::string> one = t.tokenize(byte);
        INFO("byte " << b);
        REQUIRE(one.size() == 1);
        const bool plain = (b >= 0x20 && b <= 0x7E) || b == '\n' || b == '\t';
        char hex[7];
        std::snprintf(hex, sizeof hex, "<0x%02X>", b);
        CHECK(one[0] == (plain ? byte : std::string(hex)));
        CHECK(t.detokenize(one) == byte);
        symbols.insert(one[0]);
    }
    CHECK(symbols.size() == 256);
}

TEST_CASE("the byte tokenizer gives back any bytes exactly, and special tokens as they are written",
          "[corpus][tokenizer]") {
    const text::Tokenizer t = text::Tokenizer::bytes();
    std::string every_byte;
    for (int b = 0; b < 256; ++b) every_byte += static_cast<char>(b);
    CHECK(t.detokenize(t.tokenize(every_byte)) == every_byte);
    for (uint32_t seed = 1; seed <= 20; ++seed) {
        const std::string bytes = random_bytes(seed * 37, seed);
        INFO("seed " << seed);
        const std::vector<std::string> symbols = t.tokenize(bytes);
        CHECK(symbols.size() == bytes.size());
        CHECK(t.detokenize(symbols) == bytes);
        std::vector<std::string> each;
        t.each_symbol(bytes, [&](std::string_view s) { each.emplace_back(s); });
        CHECK(each == symbols);
    }
    const std::string looks_like_a_symbol = "<0xC3><unk>";  // text, not symbols: one symbol per byte
    CHECK(t.tokenize(looks_like_a_symbol).size() == looks_like_a_symbol.size());
    CHECK(t.detokenize(t.tokenize(looks_like_a_symbol)) == looks_like_a_symbol);
    CHECK(t.detokenize({"a", "<unk>", "<0x41>", "<0xc3>", "<0x4", "b"}) == "a<unk>A<0xc3><0x4b");
}

TEST_CASE("byte symbols make a vocabulary that travels as JSON, and the byte tokenizer travels too",
          "[corpus][tokenizer]") {
    const text::Tokenizer t = text::Tokenizer::bytes();
    const std::string bytes = random_bytes(4000, 7);
    std::vector<std::string> symbols = t.tokenize(bytes);
    const text::Vocabulary vocab = text::Vocabulary::from_symbols(symbols);
    CHECK(vocab.size() == 4 + 256);  // 4000 random bytes hold every value
    const text::Vocabulary back = text::Vocabulary::from_json(vocab.to_json());
    CHECK(back == vocab);
    CHECK(t.detokenize(back.decode(back.encode(symbols))) == bytes);
    CHECK(text::Tokenizer::from_json(t.to_json()) == t);
    CHECK_FALSE(text::Tokenizer::from_json(t.to_json()) == text::Tokenizer::characters());
    CHECK_THAT(error_of([] { text::Tokenizer::from_json(R"({"kind": "byte", "lowercase": true})"); }),
               Contains("only the \"char\" tokenizer lowercases"));
}

namespace {

// A SentencePiece model trained on `count` sentences of `length` words each from `words`, in many
// orders.
text::Tokenizer trained_on_words(const std::vector<std::string>& words, size_t count, size_t length,
                                 const text::SentencePieceOptions& options) {
    std::vector<std::string> sentences;
    for (size_t i = 0; i < count; ++i) {
        std::string sentence;
        for (size_t k = 0; k < length; ++k) sentence += (k ? " " : "") + words[(i * 7 + k * 13 + i / 3) % words.size()];
        sentences.push_back(sentence);
    }
    size_t next = 0;
    return text::Tokenizer::train_sentencepiece(
        [&](std::string& s) {
        if (next == sentences.size()) return false;
        s = sentences[next++];
        return true;
        },
        options);
}

// Stream's text, a symbol at a time, joined.
std::string streamed(const text::Tokenizer& t, const std::vector<std::string>& symbols) {
    text::Tokenizer::Stream stream(t);
    std::string text;
    for (const std::string& s : symbols) text += stream.add(s);
    return text + stream.finish();
}

}  // namespace

TEST_CASE("a SentencePiece model trained here detokenizes exactly, and travels as JSON", "[corpus][tokenizer]") {
    text::SentencePieceOptions options;
    options.vocab_size = 60;
    const text::Tokenizer spm = trained_on_words({"the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog",
                                                  "café", "naïve", "item", "river", "stone", "green", "house"},
                                                 2000, 8, options);
    CHECK(spm.kind() == "sentencepiece");
    for (const std::string text : {"the fox", "  two  spaces ", "unseen wörds: ß and 42", "café naïve"}) {
        INFO(text);
        CHECK(spm.detokenize(spm.tokenize(text)) == text);
    }
    CHECK(spm.tokenize("the fox") == std::vector<std::string>{"\u2581the", "\u2581fox"});  // words it saw are pieces
    const text::Tokenizer back = text::Tokenizer::from_json(spm.to_json());
    CHECK(back == spm);
    CHECK(back.tokenize("the lazy dog") == spm.tokenize("the lazy dog"));
    CHECK(text::Tokenizer::from_json(text::Tokenizer::characters(true).to_json()) == text::Tokenizer::characters(true));
    CHECK(text::Tokenizer::from_json(text::Tokenizer::spaces().to_json()) == text::Tokenizer::spaces());
}

TEST_CASE("a tokenizer's stream gives, a symbol at a time, the text of them all", "[corpus][tokenizer]") {
    CHECK(streamed(text::Tokenizer::characters(), {"A", "\u00f1", "b", " ", "c"}) == "A\u00f1b c");
    CHECK(streamed(text::Tokenizer::spaces(), {"K", "AE", "T"}) == "K AE T");
    CHECK(streamed(text::Tokenizer::bytes(), {"a", "<0xC3>", "<0xB1>", "<unk>", "\n"}) == "a\u00f1<unk>\n");
    // SentencePiece, with byte pieces for what it lacks: sequences of its pieces in random orders,
    // words, bytes of unseen characters (whole and cut short), <unk> and control pieces, whose text
    // depends on what came before (a first piece's space, bytes that make a character together).
    text::SentencePieceOptions options;
    options.vocab_size = 300;  // 256 byte pieces among them
    options.byte_fallback = true;
    const text::Tokenizer spm =
        trained_on_words({"the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "caf\u00e9"}, 1000, 6,
                         options);
    std::vector<std::string> pool{"<unk>", "<s>", "</s>", "<pad>", "<0xE6>", "<0x97>", "<0xA5>", "<0xC3>"};
    for (const std::string text : {"the quick dog", " fox  jumps", "caf\u00e9 \u65e5\u672c stra\u00dfe", "overlazy"})
        for (const std::string& piece : spm.tokenize(text)) pool.push_back(piece);
    CHECK(std::find(pool.begin(), pool.end(), "<0xE6>") != pool.end());
    for (const std::string text : {"the quick dog", "  caf\u00e9 \u65e5\u672c stra\u00dfe  ", "\u00df"}) {
        INFO(text);
        CHECK(streamed(spm, spm.tokenize(text)) == text);
    }
    seqgrad::Generator gen(5);
    for (int round = 0; round < 3000; ++round) {
        std::vector<std::string> symbols(1 + gen.next_u64() % 24);
        for (std::string& s : symbols) s = pool[gen.next_u64() % pool.size()];
        std::string shown;
        for (const std::string& s : symbols) shown += "[" + s + "]";
        INFO(shown);
        REQUIRE(streamed(spm, symbols) == spm.detokenize(symbols));
    }
}

TEST_CASE("a SentencePiece model that does not load, and a bad tokenizer JSON, are clear Errors",
          "[corpus][tokenizer]") {
    const TempFile garbage("this is not a model", ".model");
    CHECK_THAT(error_of([&] { text::Tokenizer::load_sentencepiece(garbage.path()); }),
               Contains(garbage.path()) && Contains("not a SentencePiece model"));
    CHECK_THAT(error_of([] { text::Tokenizer::from_json(R"({"kind": "bytes", "lowercase": false})"); }),
               Contains("unknown tokenizer \"bytes\""));
    CHECK_THAT(error_of([] { text::Tokenizer::from_json(R"({"kind": "sentencepiece", "lowercase": false})"); }),
               Contains("without its \"model\""));
    CHECK_THAT(error_of([] { text::Tokenizer::from_json("[]"); }), Contains("expected"));
}

namespace {

// The protocol-buffer bytes of a unigram SentencePiece model with the given pieces, by hand: a
// ModelProto's pieces are field 1, each a message of its text (field 1) and type (field 3).
std::string model_proto_with(const std::vector<std::pair<std::string, int>>& pieces) {
    const auto varint = [](uint64_t v) {
        std::string out;
        for (; v >= 0x80; v >>= 7) out += static_cast<char>((v & 0x7f) | 0x80);
        return out + static_cast<char>(v);
    };
    const auto field = [&](int number, const std::string& bytes) {
        return varint(static_cast<uint64_t>(number) << 3 | 2) + varint(bytes.size()) + bytes;
    };
    std::string model;
    for (const auto& [text, type] : pieces)
        model += field(1, field(1, text) + varint(3 << 3) + varint(static_cast<uint64_t>(type)));
    return model;
}

}  // namespace

TEST_CASE("a SentencePiece model whose pieces its own loader throws on is an Error, not an abort",
          "[corpus][tokenizer]") {
    const int normal = 1, unknown = 2, control = 3;
    const auto as_json = [](const std::string& model) {
        return R"({"kind": "sentencepiece", "lowercase": false, "model": ")" + text::base64_encode(model) + "\"}";
    };
    const std::vector<std::pair<std::string, int>> good = {
        {"<unk>", unknown}, {"<s>", control}, {"</s>", control}, {"a", normal}, {"\u2581a", normal}};
    const text::Tokenizer loads = text::Tokenizer::from_json(as_json(model_proto_with(good)));
    CHECK(loads.detokenize(loads.tokenize("a a")) == "a a");
    // A piece that begins with a NUL byte: SentencePiece's trie builder throws its own exception.
    std::vector<std::pair<std::string, int>> bad = good;
    bad.emplace_back(std::string("\0b", 2), normal);
    CHECK_THAT(error_of([&] { text::Tokenizer::from_json(as_json(model_proto_with(bad))); }),
               Contains("not a SentencePiece model that loads") && Contains("zero-length key"));
    // One whose loader says no with a status is refused as before.
    bad.back().first.clear();
    CHECK_THAT(error_of([&] { text::Tokenizer::from_json(as_json(model_proto_with(bad))); }),
               Contains("not a SentencePiece model that loads") && Contains("must not be empty"));
}

TEST_CASE("base64 round-trips every byte and refuses what is not base64", "[corpus]") {
    std::string bytes;
    for (int i = 0; i < 256; ++i) bytes += static_cast<char>(i);
    for (size_t n : {0, 1, 2, 3, 4, 255, 256})
        CHECK(text::base64_decode(text::base64_encode(bytes.substr(0, n))) == bytes.substr(0, n));
    CHECK(text::base64_encode("Man") == "TWFu");
    CHECK(text::base64_encode("Ma") == "TWE=");
    CHECK(text::base64_encode("M") == "TQ==");
    CHECK_THAT(error_of([] { text::base64_decode("TWF"); }), Contains("multiple of 4"));
    CHECK_THAT(error_of([] { text::base64_decode("TW!u"); }), Contains("invalid character"));
}

// ---- vocabularies ----

TEST_CASE("a vocabulary from counts keeps the frequent symbols, ties broken by byte order", "[corpus]") {
    const std::vector<std::pair<std::string, int64_t>> counts = {{"c", 5}, {"a", 1}, {"b", 5}, {"d", 2}, {"e", 2}};
    CHECK(text::Vocabulary::from_counts(counts, 1, 0).size() == 4 + 5);
    const text::Vocabulary frequent = text::Vocabulary::from_counts(counts, 2, 0);
    CHECK(frequent.size() == 4 + 4);
    CHECK_FALSE(frequent.contains("a"));
    const text::Vocabulary top3 = text::Vocabulary::from_counts(counts, 1, 3);
    CHECK(std::vector<std::string>(top3.symbols().begin() + 4, top3.symbols().end()) ==
          std::vector<std::string>{"b", "c", "d"});  // c and b (5), then d before e (2, byte order); ids sorted
}

// ---- the pipeline ----

TEST_CASE("a corpus without dev files is carved by a hash of the source, every line of a source together", "[corpus]") {
    std::string text = numbered_tsv(400);
    text += "w7\tanother answer\n";  // a second reference of w7, far from its first
    const TempFile tsv(text);
    TrainingOptions o = corpus_options({tsv.path()});
    DataRequest request;
    request.test = true;
    const PairData data = prepare_pairs(o, request);
    int64_t train_pairs = 0;
    for (int i = 0; i < 400; ++i) train_pairs += split_by_hash(seqgrad::detail::concat("w", i)) == Split::train;
    train_pairs += split_by_hash("w7") == Split::train;
    CHECK(data.train.size() == train_pairs);
    for (const Example& e : data.dev) CHECK(split_by_hash(e.name) == Split::dev);
    for (const Example& e : data.test) CHECK(split_by_hash(e.name) == Split::test);
    CHECK(static_cast<int64_t>(data.dev.size() + data.test.size()) + train_pairs ==
          401 - (split_by_hash("w7") != Split::train));
    CHECK_THAT(data.report.front(), Contains(std::to_string(train_pairs) + " training pairs"));
    CHECK_THAT(data.report[1], Contains("carved"));
    // The second reference joins its source wherever it fell.
    for (const std::vector<Example>* split : {&data.dev, &data.test})
        for (const Example& e : *split)
            if (e.name == "w7") CHECK(e.reference_texts == std::vector<std::string>{"x7", "another answer"});
}

TEST_CASE("dev and test files replace the carved splits", "[corpus]") {
    const TempFile train("a\tA\nb\tB\n"), dev("c\tC\nc\tC2\n"), test_source("d\ne\n"), test_target("D\nE\n");
    TrainingOptions o = corpus_options({train.path()});
    o.dev_files = {dev.path()};
    o.test_files = {test_source.path(), test_target.path()};
    DataRequest request;
    request.test = true;
    const PairData data = prepare_pairs(o, request);
    CHECK(data.train.size() == 2);
    REQUIRE(data.dev.size() == 1);
    CHECK(data.dev[0].references.size() == 2);  // one source, two references
    CHECK(data.test.size() == 2);
    CHECK(data.target_vocab.contains("A"));
    CHECK_FALSE(data.target_vocab.contains("C"));  // vocabularies come from training only
}

TEST_CASE("bad lines refuse the corpus with their file and line, or are skipped and counted", "[corpus]") {
    const TempFile tsv("a\tA\nno tab\nb\tB\n\xfe\tX\n" + numbered_tsv(100));
    TrainingOptions o = corpus_options({tsv.path()});
    const std::string refused = error_of([&] { prepare_pairs(o); });
    CHECK_THAT(refused, Contains("2 lines are not valid pairs") && Contains(tsv.path() + ":2: no tab") &&
                            Contains(tsv.path() + ":4: the source") && Contains("--skip-invalid"));
    o.skip_invalid = true;
    const PairData data = prepare_pairs(o);
    bool reported = false;
    for (const std::string& line : data.report)
        reported = reported || line.find("skipped 2 invalid lines") != std::string::npos;
    CHECK(reported);
}

TEST_CASE("a side longer than the model takes is a bad line, and the target counts its </s>", "[corpus]") {
    const TempFile tsv("abcd\tABC\nab\tABCD\n" + numbered_tsv(50));
    DataRequest request;
    request.max_source_length = request.max_target_length = 4;
    TrainingOptions o = corpus_options({tsv.path()});
    const std::string message = error_of([&] { prepare_pairs(o, request); });
    CHECK_THAT(message, Contains(":2: the target has 4 symbols (and </s>); the model takes at most 3"));
    CHECK_THAT(message, Contains("1 line is not a valid pair"));  // abcd -> ABC fits: 4, and 3 + 1
}

TEST_CASE("a special token used as a symbol is a bad line, but <unk> reads as unknown", "[corpus]") {
    TrainingOptions o = corpus_options({});
    o.tgt_tokens = "space";
    const TempFile bad("a\tx <s> y\n" + numbered_tsv(30));
    o.train_files = {bad.path()};
    CHECK_THAT(error_of([&] { prepare_pairs(o); }), Contains(":1: the target uses the special token <s>"));
    const TempFile unknown("a\tx <unk> y\n" + numbered_tsv(30));
    o.train_files = {unknown.path()};
    CHECK_NOTHROW(prepare_pairs(o));
}

TEST_CASE("min_count and max_vocab shape the vocabularies and the report counts unknown tokens", "[corpus]") {
    std::string text;
    for (int i = 0; i < 200; ++i) text += (i % 50 == 0 ? "zq" : "ab") + std::string("\tAB\n");
    const TempFile tsv(text);
    TrainingOptions o = corpus_options({tsv.path()});
    o.min_count = 10;  // z and q are rare
    const PairData data = prepare_pairs(o);
    CHECK(data.source_vocab.contains("a"));
    CHECK_FALSE(data.source_vocab.contains("z"));
    int64_t unknown = 0;
    for (int64_t i = 0; i < data.train.size(); ++i)
        for (int32_t id : data.train.source(i)) unknown += id == seqgrad::models::kUnk;
    CHECK(unknown > 0);
    const std::string expected = seqgrad::detail::concat("unknown tokens: ", unknown, " of");
    CHECK_THAT(data.report.back(), Contains(expected));
    o.min_count = 1;
    o.max_vocab = 2;
    CHECK(prepare_pairs(o).source_vocab.size() == 4 + 2);
}

TEST_CASE("an empty corpus is refused and leaves no directory behind", "[corpus]") {
    const TempFile empty("");
    TrainingOptions o = corpus_options({empty.path()});
    CHECK_THAT(error_of([&] { train(seqgrad::training::recipe("seq2seq").model, o, "/tmp/seqgrad_never_made"); }),
               Contains("empty train or dev split"));
    CHECK_FALSE(std::filesystem::exists("/tmp/seqgrad_never_made"));
}

TEST_CASE("G2P through the pipeline gives the dictionary's pairs in its splits, and vocabularies of train",
          "[corpus][g2p]") {
    TrainingOptions o;
    o.task = "g2p";
    DataRequest request;
    request.test = true;
    const PairData data = prepare_pairs(o, request);
    // The expectation, worked out here from the dictionary reader and the hash split alone.
    const Lexicon lexicon = read_dictionary(o.dictionary);
    std::vector<std::pair<std::vector<std::string>, std::vector<std::string>>> train_pairs;
    std::vector<const Example*> dev, test;
    std::set<std::string> letters, phones;
    for (const Example& word : lexicon.words) {
        const Split split = g2p_split(word.name);
        if (split == Split::dev) dev.push_back(&word);
        if (split == Split::test) test.push_back(&word);
        if (split != Split::train) continue;
        for (const auto& pronunciation : word.references) {
            train_pairs.emplace_back(word.source, pronunciation);
            letters.insert(word.source.begin(), word.source.end());
            phones.insert(pronunciation.begin(), pronunciation.end());
        }
    }
    CHECK(data.source_vocab == text::Vocabulary::from_symbols({letters.begin(), letters.end()}));
    CHECK(data.target_vocab == text::Vocabulary::from_symbols({phones.begin(), phones.end()}));
    REQUIRE(data.train.size() == static_cast<int64_t>(train_pairs.size()));
    const auto symbols = [](const text::Vocabulary& vocab, std::span<const int32_t> ids) {
        std::vector<std::string> out;
        for (const int32_t id : ids) out.push_back(vocab.symbol(id));
        return out;
    };
    for (int64_t i = 0; i < data.train.size(); ++i) {
        const auto& [source, target] = train_pairs[static_cast<size_t>(i)];
        if (symbols(data.source_vocab, data.train.source(i)) != source ||
            symbols(data.target_vocab, data.train.target(i)) != target)
            FAIL("training pair " << i << " differs");
    }
    REQUIRE(data.dev.size() == dev.size());
    REQUIRE(data.test.size() == test.size());
    for (size_t i = 0; i < data.dev.size(); ++i) {
        CHECK(data.dev[i].name == dev[i]->name);
        CHECK(data.dev[i].source == dev[i]->source);
        CHECK(data.dev[i].references == dev[i]->references);
    }
}

// ---- checkpoints and the Translator ----

namespace {

// A tiny trained run on a corpus, once per test program.
const std::string& tiny_run() {
    static const std::string dir = [] {
        static const TempDir scratch("corpus_run");
        const std::filesystem::path& root = scratch.path;
        std::string text;
        for (int i = 1; i <= 300; ++i) {
            std::string word;  // i in base 6, letters a-f: 300 different words of 1 to 4 letters
            for (int n = i; n > 0; n /= 6) word += static_cast<char>('a' + n % 6);
            std::string reversed = word;
            std::reverse(reversed.begin(), reversed.end());
            text += word + "\t" + reversed + "\n";
        }
        std::ofstream(root / "pairs.tsv") << text;
        TrainingOptions o;
        o.task = "corpus";
        o.train_files = {(root / "pairs.tsv").string()};
        o.src_tokens = "sentencepiece";
        o.spm_vocab_size = 12;
        o.max_steps = 30;
        o.batches.max_sentences = 32;
        o.schedule = "constant";
        o.lr = 3e-3;
        seqgrad::models::ModelConfig c = seqgrad::training::recipe("attn_seq2seq").model;
        c.keys<seqgrad::models::AttnSeq2SeqKeys>().hidden_size = 16;
        c.keys<seqgrad::models::AttnSeq2SeqKeys>().num_layers = 1;
        train(c, o, (root / "run").string());
        return (root / "run").string();
    }();
    return dir;
}

}  // namespace

TEST_CASE("a checkpoint carries its tokenizers: the SentencePiece model comes back from the file", "[corpus]") {
    const text::LoadedModel loaded = text::load_model(tiny_run());
    CHECK(loaded.source_tokenizer.kind() == "sentencepiece");
    CHECK(loaded.target_tokenizer.kind() == "char");
    CHECK(loaded.task == "corpus");
    CHECK(loaded.source_tokenizer.detokenize(loaded.source_tokenizer.tokenize("abcab")) == "abcab");
    const std::vector<int64_t> ids = loaded.encode_source("abcab");
    CHECK(!ids.empty());
    CHECK(std::count(ids.begin(), ids.end(), seqgrad::models::kUnk) == 0);  // every piece was seen in training
}

TEST_CASE("a model file from before tokenizers were stored reads with the tokenizers of its task", "[corpus]") {
    // tiny_run()'s weights without their tokenizers, as the G2P and synthetic tasks wrote files
    // before tokenizers were stored: they read as a new run of their task reads its data.
    const seqgrad::SafetensorsFile file = seqgrad::SafetensorsFile::load(text::weights_to_use(tiny_run()));
    const TempDir scratch("corpus_older");
    const TrainingOptions options;  // a new run's, which picks each task's tokenizers
    for (const std::string& name : std::vector<std::string>{"g2p", "copy", "reverse", "sort", "corpus", "text"}) {
        seqgrad::SafetensorsFile older;
        for (const auto& [key, value] : file.metadata())
            if (key != "source_tokenizer" && key != "target_tokenizer")
                older.set_metadata(key, key == "task" ? name : value);
        for (const std::string& tensor : file.names()) older.put(tensor, file.tensor(tensor));
        const std::string path = (scratch.path / (name + ".safetensors")).string();
        older.save(path);
        INFO(name);
        if (name == "corpus" || name == "text") {  // files that always held their tokenizers
            CHECK_THAT(error_of([&] { text::load_model(path); }), Contains("lacks its tokenizers"));
            continue;
        }
        const text::LoadedModel loaded = text::load_model(path);
        const auto [source, target] = dynamic_cast<const PairsTask&>(task(name)).tokenizers(options);
        CHECK(loaded.source_tokenizer == source);
        CHECK(loaded.target_tokenizer == target);
    }
}

TEST_CASE("resuming on data whose vocabularies changed is refused", "[corpus]") {
    const TempDir scratch("corpus_changed");
    const std::filesystem::path& root = scratch.path;
    std::ofstream(root / "pairs.tsv") << numbered_tsv(100);
    TrainingOptions o = corpus_options({(root / "pairs.tsv").string()});
    o.max_steps = 2;
    seqgrad::models::ModelConfig c = seqgrad::training::recipe("seq2seq").model;
    c.keys<seqgrad::models::Seq2SeqKeys>().hidden_size = 8;
    train(c, o, (root / "run").string());
    std::ofstream(root / "pairs.tsv") << numbered_tsv(100) << "QQ\tZZ\n";  // new symbols
    CHECK_THAT(error_of([&] { resume((root / "run").string(), 0, 0, 4); }), Contains("vocabularies differ"));
}

TEST_CASE("the Translator turns text into n-best text, in input order, from several threads", "[corpus]") {
    const Translator translator(tiny_run());
    seqgrad::models::DecodingOptions options;
    options.beam_size = 4;
    options.nbest = 3;
    const std::vector<std::string> inputs = {"abc", "", "fedcba", "a"};
    const auto results = translator.translate(inputs, options);
    REQUIRE(results.size() == 4);
    CHECK(results[1].size() == 1);
    CHECK(results[1][0].text.empty());
    for (size_t i : {0, 2, 3}) {
        REQUIRE(results[i].size() == 3);
        CHECK(results[i][0].score >= results[i][1].score);
        CHECK(results[i][1].score >= results[i][2].score);
        CHECK(results[i][0].text != results[i][1].text);
    }
    // The best equals a one-input call and greedy search's choice at beam 1 equals the model's own.
    CHECK(translator.translate({"fedcba"}, options)[0][0].text == results[2][0].text);
    std::vector<std::vector<std::vector<Translation>>> parallel(2);
    std::thread a([&] { parallel[0] = translator.translate(inputs, options); });
    std::thread b([&] { parallel[1] = translator.translate(inputs, options); });
    a.join();
    b.join();
    for (const auto& run : parallel)
        for (size_t i = 0; i < inputs.size(); ++i) CHECK(run[i][0].text == results[i][0].text);
    options.nbest = 5;
    CHECK_THAT(error_of([&] { translator.translate(inputs, options); }), Contains("nbest"));
}

namespace {

// Inputs for the Translator of tiny_run(): words of its letters, of 1 to 6 of them.
const std::vector<std::string> kWords = {"abc", "fedcba", "a", "cab", "ddeeff", "bab", "efa", "cc", "afbecd", "dab"};

void require_same_translations(const std::vector<std::vector<Translation>>& a,
                               const std::vector<std::vector<Translation>>& b) {
    REQUIRE(a.size() == b.size());
    for (size_t i = 0; i < a.size(); ++i) {
        REQUIRE(a[i].size() == b[i].size());
        for (size_t r = 0; r < a[i].size(); ++r) {
            INFO(kWords[i] << ", rank " << r + 1 << ": " << a[i][r].text << " " << a[i][r].score << " vs "
                           << b[i][r].text << " " << b[i][r].score);
            CHECK(a[i][r].text == b[i][r].text);
            CHECK(std::abs(a[i][r].score - b[i][r].score) < 1e-4f);
        }
    }
}

}  // namespace

TEST_CASE("the Translator's n-best are the decoders' own on the checkpoint's model", "[corpus]") {
    const Translator translator(tiny_run());
    const text::LoadedModel loaded = text::load_model(tiny_run());  // not packed: sgemm
    for (const int64_t beam : {1, 4}) {
        seqgrad::models::DecodingOptions options;
        options.beam_size = beam;
        options.nbest = beam == 1 ? 1 : 3;
        options.max_len = 12;
        const auto results = translator.translate(kWords, options);
        REQUIRE(results.size() == kWords.size());
        for (size_t i = 0; i < kWords.size(); ++i) {
            const std::vector<int64_t> ids = loaded.encode_source(kWords[i]);
            const auto src = seqgrad::IntTensor::from_vector(ids, {1, static_cast<int64_t>(ids.size())});
            const std::vector<seqgrad::models::Hypothesis> own =
                beam == 1 ? seqgrad::models::greedy_decode(*loaded.model, src, options.max_len)
                          : seqgrad::models::beam_search(*loaded.model, src, seqgrad::models::start_of_sequence(1),
                                                         options)[0];
            REQUIRE(results[i].size() == own.size());
            for (size_t r = 0; r < own.size(); ++r) {
                INFO(kWords[i] << ", beam " << beam << ", rank " << r + 1);
                CHECK(results[i][r].text == loaded.decode_target(own[r].tokens));
                CHECK(results[i][r].tokens == static_cast<int64_t>(own[r].tokens.size()));
                CHECK(std::abs(results[i][r].score - own[r].score) < 1e-4f);
            }
        }
    }
}

TEST_CASE("where packing is unavailable the Translator decodes on sgemm, with the same translations",
          "[corpus][packed]") {
    seqgrad::models::DecodingOptions options;
    options.beam_size = 4;
    options.nbest = 3;
    const Translator packed(tiny_run());
    CHECK(packed.checkpoint().model->weights_packed() == seqgrad::packing_available(seqgrad::Precision::float32));
    const auto expected = packed.translate(kWords, options);
    const seqgrad::testing::PackingDisabled off;
    const Translator fallback(tiny_run());
    CHECK_FALSE(fallback.checkpoint().model->weights_packed());
    require_same_translations(fallback.translate(kWords, options), expected);
    CHECK_THAT(error_of([] { Translator int8(tiny_run(), seqgrad::Precision::int8); }), Contains("oneDNN"));
}

TEST_CASE("the Translator at int8 runs int8 weights and translates as float32 does, within rounding",
          "[corpus][packed][int8]") {
    if (!seqgrad::packing_available(seqgrad::Precision::int8)) {
        seqgrad::testing::skip_test("this build has no oneDNN, so no int8 (its refusal is tested with packing "
                                    "unavailable)");
        return;
    }
    seqgrad::models::DecodingOptions options;
    options.beam_size = 4;
    options.nbest = 2;
    const Translator float32(tiny_run());
    const Translator int8(tiny_run(), seqgrad::Precision::int8);
    REQUIRE(int8.checkpoint().model->weights_packed());
    REQUIRE(int8.checkpoint().model->packed_precision() == seqgrad::Precision::int8);
    const auto expected = float32.translate(kWords, options);
    const auto got = int8.translate(kWords, options);
    // Rounding to 255 levels per row moves the log-probabilities a little: the best translations are
    // mostly the same, and their scores close, but not the same to the last bit.
    int same = 0;
    float largest = 0;
    for (size_t i = 0; i < kWords.size(); ++i) {
        INFO(kWords[i] << ": int8 " << got[i][0].text << " " << got[i][0].score << ", float32 " << expected[i][0].text
                       << " " << expected[i][0].score);
        same += got[i][0].text == expected[i][0].text;
        if (got[i][0].text == expected[i][0].text) {
            CHECK(std::abs(got[i][0].score - expected[i][0].score) < 0.05f);
            largest = std::max(largest, std::abs(got[i][0].score - expected[i][0].score));
        }
    }
    CHECK(same >= static_cast<int>(kWords.size()) - 1);
    CHECK(largest > 0);  // it did run in int8
}
