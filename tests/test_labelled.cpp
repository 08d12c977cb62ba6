// Tests of the reader of labelled texts: single texts and pairs of texts (plain and gzip), the
// labels sorted with their ids, dev and test given or carved by a hash of the text, and every bad
// input named by its file and line: a wrong number of fields, an empty text or label, invalid
// UTF-8, a label that training lacks.
#include "helpers.h"

#include <zlib.h>

#include <memory>

#include "seqgrad/training.h"

using namespace seqgrad::training;
using seqgrad::Error;
using seqgrad::testing::error_of;
using seqgrad::testing::TempFile;
using Catch::Matchers::Contains;

namespace {

// A gzip-compressed file of `text`.
std::unique_ptr<TempFile> gzip_file(const std::string& text) {
    auto file = std::make_unique<TempFile>("", ".gz");
    gzFile out = gzopen(file->path().c_str(), "wb");
    REQUIRE(out != nullptr);
    REQUIRE(gzwrite(out, text.data(), static_cast<unsigned>(text.size())) == static_cast<int>(text.size()));
    gzclose(out);
    return file;
}

// `n` lines "text i TAB label", the labels c, a, b in turn.
std::string numbered(int n) {
    std::string lines;
    for (int i = 0; i < n; ++i) lines += seqgrad::detail::concat("text ", i, "\t", "cab"[i % 3], "\n");
    return lines;
}

// Why read_labelled refuses `files`.
std::string refused(const LabelledFiles& files) {
    return error_of([&] { read_labelled(files); });
}

bool reported(const LabelledData& data, const std::string& part) {
    for (const std::string& line : data.report)
        if (line.find(part) != std::string::npos) return true;
    return false;
}

}  // namespace

TEST_CASE("labelled texts: a label set sorts its labels by their bytes, each label's id its place", "[labelled]") {
    const LabelSet labels({"pos", "neg", "Neutral", "neg", "ñ"});
    CHECK(labels.names() == std::vector<std::string>{"Neutral", "neg", "pos", "ñ"});
    CHECK(labels.size() == 4);
    CHECK(labels.id("neg") == 1);
    CHECK(labels.id("ñ") == 3);
    CHECK_FALSE(labels.id("neutral").has_value());
    CHECK(labels.name(2) == "pos");
    CHECK_THAT(error_of([&] { (void)labels.name(4); }), Contains("no label has id 4 (there are 4)"));
    CHECK_THAT(error_of([] { LabelSet({"a", ""}); }), Contains("an empty label"));
}

TEST_CASE("labelled texts: single texts with dev and test files, labels from the training file", "[labelled]") {
    const TempFile train("good film\tpos\nbad film\tneg\ndull\tNeutral\nfine\tpos\n"), dev("great\tpos\nawful\tneg\n"),
        test("meh\tNeutral\n");
    const LabelledData data = read_labelled({train.path(), dev.path(), test.path()});
    CHECK_FALSE(data.pairs);
    CHECK(data.labels.names() == std::vector<std::string>{"Neutral", "neg", "pos"});
    CHECK(data.train.texts == std::vector<std::string>{"good film", "bad film", "dull", "fine"});
    CHECK(data.train.labels == std::vector<int32_t>{2, 1, 0, 2});
    CHECK(data.train.second_texts.empty());
    CHECK(data.dev.texts == std::vector<std::string>{"great", "awful"});
    CHECK(data.dev.labels == std::vector<int32_t>{2, 1});
    CHECK(data.test.texts == std::vector<std::string>{"meh"});
    CHECK(data.test.labels == std::vector<int32_t>{0});
    CHECK(reported(data, "4 training texts, 2 dev, 1 test"));
    CHECK(reported(data, "train " + train.path() + ", dev " + dev.path() + ", test " + test.path()));
    CHECK(reported(data, "3 labels, with their training counts: Neutral 1, neg 1, pos 2"));
}

TEST_CASE("labelled texts: pairs of texts read from gzip as from plain files", "[labelled]") {
    const std::string lines = "a man sleeps\ta man rests\tentailment\r\nit rains\tthe sun shines\tcontradiction\n"
                              "a dog\ta cat\tneutral";  // CRLF, and a last line without a newline
    const auto train = gzip_file(lines);
    const TempFile dev("x\ty\tneutral\n");
    const LabelledData data = read_labelled({train->path(), dev.path(), ""});
    CHECK(data.pairs);
    CHECK(data.labels.names() == std::vector<std::string>{"contradiction", "entailment", "neutral"});
    CHECK(data.train.texts == std::vector<std::string>{"a man sleeps", "it rains", "a dog"});
    CHECK(data.train.second_texts == std::vector<std::string>{"a man rests", "the sun shines", "a cat"});
    CHECK(data.train.labels == std::vector<int32_t>{1, 0, 2});
    CHECK(data.dev.second_texts == std::vector<std::string>{"y"});
    CHECK(data.test.empty());
    CHECK(reported(data, "3 training pairs of texts, 1 dev, 0 test"));
    const TempFile plain(lines);
    const LabelledData same = read_labelled({plain.path(), dev.path(), ""});
    CHECK(same.train.texts == data.train.texts);
    CHECK(same.train.second_texts == data.train.second_texts);
}

TEST_CASE("labelled texts without a dev file are carved by a hash of the text, the labels from every line",
          "[labelled]") {
    const TempFile train(numbered(300) + "text 7\tz\n");  // a label on one line only, wherever it falls
    const LabelledData data = read_labelled({train.path(), "", ""});
    CHECK(data.labels.names() == std::vector<std::string>{"a", "b", "c", "z"});
    int64_t sizes[3] = {0, 0, 0};
    for (int i = 0; i < 300; ++i) ++sizes[static_cast<int>(split_by_hash(seqgrad::detail::concat("text ", i)))];
    ++sizes[static_cast<int>(split_by_hash("text 7"))];
    CHECK(data.train.size() == sizes[0]);
    CHECK(data.dev.size() == sizes[1]);
    CHECK(data.test.size() == sizes[2]);
    REQUIRE(data.dev.size() > 0);
    REQUIRE(data.test.size() > 0);
    using SplitTexts = std::pair<Split, const LabelledTexts*>;
    for (const auto& [split, texts] : {SplitTexts{Split::train, &data.train}, SplitTexts{Split::dev, &data.dev},
                                       SplitTexts{Split::test, &data.test}})
        for (int64_t i = 0; i < texts->size(); ++i) {
            const std::string& text = texts->texts[static_cast<size_t>(i)];
            CHECK(split_by_hash(text) == split);
            const int n = std::stoi(text.substr(5));
            const bool z = text == "text 7" && texts->labels[static_cast<size_t>(i)] == 3;
            CHECK((z || data.labels.name(texts->labels[static_cast<size_t>(i)]) == std::string(1, "cab"[n % 3])));
        }
    CHECK(reported(data, "dev and test carved from " + train.path() + " by a hash of the text"));

    // A test file replaces the carved test split, whose lines are then unused.
    const TempFile test("new\tb\n");
    const LabelledData with_test = read_labelled({train.path(), "", test.path()});
    CHECK(with_test.train.size() == data.train.size());
    CHECK(with_test.dev.size() == data.dev.size());
    CHECK(with_test.test.texts == std::vector<std::string>{"new"});
    CHECK(reported(with_test, "dev carved from " + train.path() + " by a hash of the text, test " + test.path()));
}

TEST_CASE("labelled texts: each kind of bad line is named by its file and line", "[labelled]") {
    const TempFile train("one field only\n"      // 1: no line has decided the number of fields yet
                         "first\tpos\n"          // 2: decides: two fields
                         "\n"                    // 3
                         "a\tb\tpos\n"           // 4
                         "  \tneg\n"             // 5
                         "text\t \n"             // 6
                         "bad \xff byte\tpos\n"  // 7
                         "fine\tne\xc3\n"        // 8: a truncated code point in the label
                         "second\tneg\n" +       // 9
                         numbered(12));
    const std::string p = train.path();
    const std::string message = refused({p, "", ""});
    CHECK_THAT(message, Contains("7 lines are not valid labelled texts; the first:"));
    CHECK_THAT(message, Contains(p + ":1: 1 field; a line is text TAB label, or text_a TAB text_b TAB label"));
    CHECK_THAT(message, Contains(p + ":3: an empty line"));
    CHECK_THAT(message, Contains(p + ":4: 3 fields where the file's lines have 2 (text TAB label)"));
    CHECK_THAT(message, Contains(p + ":5: the text is empty"));
    CHECK_THAT(message, Contains(p + ":6: the label is empty"));
    CHECK_THAT(message, Contains("--skip-invalid"));
    // The first five are shown; with skip_invalid all seven are skipped and counted.
    const LabelledData data = read_labelled({p, "", "", true});
    CHECK(reported(data, "skipped 7 invalid lines of " + p));
    CHECK(data.train.size() + data.dev.size() + data.test.size() == 14);

    const TempFile utf8("ok\tpos\nbad \xff byte\tpos\nfine\tne\xc3\nx\tneg\n");
    const std::string bad_utf8 = refused({utf8.path(), "", ""});
    CHECK_THAT(bad_utf8, Contains(utf8.path() + ":2: the text \"bad \\xFF byte\" is not valid UTF-8"));
    CHECK_THAT(bad_utf8, Contains(utf8.path() + ":3: the label \"ne\\xC3\" is not valid UTF-8"));

    // Its one good line has one label: the bad lines, which may be why, are reported first.
    const TempFile pairs("a\tb\tpos\n\tb\tneg\na\t \tneg\na\tb\n");
    const std::string bad_pairs = refused({pairs.path(), "", ""});
    CHECK_THAT(bad_pairs, Contains(pairs.path() + ":2: the first text is empty"));
    CHECK_THAT(bad_pairs, Contains(pairs.path() + ":3: the second text is empty"));
    CHECK_THAT(bad_pairs, Contains(pairs.path() + ":4: 2 fields where the file's lines have 3 (text_a TAB text_b TAB "
                                                  "label)"));
}

TEST_CASE("labelled texts: a dev or test label that training lacks is an Error naming file, line and label",
          "[labelled]") {
    const TempFile train("a\tpos\nb\tneg\n"), dev("c\tpos\nd\tneutral\n"), test("e\tneg\nf\tpos\ng\tmixed\n");
    CHECK_THAT(refused({train.path(), dev.path(), ""}),
               Contains(dev.path() + ":2: the label \"neutral\" is not one of the 2 labels of " + train.path() +
                        " (neg, pos)"));
    const TempFile good_dev("c\tpos\n");
    CHECK_THAT(refused({train.path(), good_dev.path(), test.path()}),
               Contains(test.path() + ":3: the label \"mixed\" is not one of the 2 labels"));
    // So is a carved split's test file: only the training file's labels count.
    CHECK_THAT(refused({train.path(), "", test.path()}), Contains(test.path() + ":3: the label \"mixed\""));
}

TEST_CASE("labelled texts: dev must have the training file's number of fields", "[labelled]") {
    const TempFile train("a\tpos\nb\tneg\n"), dev("c\td\tpos\n");
    CHECK_THAT(refused({train.path(), dev.path(), ""}),
               Contains(dev.path() + ":1: 3 fields (text_a TAB text_b TAB label) where the training data has 2 "
                                     "(text TAB label)"));
}

TEST_CASE("labelled texts: a training file without texts, or with one label, is refused", "[labelled]") {
    const TempFile empty(""), one_label("a\tpos\nb\tpos\n"), all_bad("no tab\n");
    CHECK_THAT(refused({empty.path(), "", ""}), Contains(empty.path() + ": no labelled texts"));
    CHECK_THAT(refused({one_label.path(), "", ""}),
               Contains(one_label.path() + ": one label only (\"pos\"): a classifier needs two or more"));
    CHECK_THAT(refused({all_bad.path(), "", ""}), Contains("1 line is not a valid labelled text"));
    CHECK_THAT(refused({all_bad.path(), "", "", true}), Contains("no labelled texts"));
    CHECK_THAT(refused({"/nonexistent/train.tsv", "", ""}), Contains("/nonexistent/train.tsv"));
}

TEST_CASE("a labelled file read against a model's labels: unknown labels refused, bad lines skipped if asked",
          "[labelled]") {
    const LabelSet labels({"neg", "pos"});
    const TempFile file("a\tpos\nno tab\nb\tneg\n");
    CHECK_THAT(error_of([&] { read_labelled_file(file.path(), labels, 2, false); }),
               Contains(file.path() + ":2: 1 field where the file's lines have 2"));
    std::vector<std::string> report;
    const LabelledTexts texts = read_labelled_file(file.path(), labels, 2, true, &report);
    CHECK(texts.texts == std::vector<std::string>{"a", "b"});
    CHECK(texts.labels == std::vector<int32_t>{1, 0});
    REQUIRE(report.size() == 1);
    CHECK_THAT(report[0], Contains("skipped 1 invalid line of " + file.path()));
    const TempFile unknown("a\tpositive\n");
    CHECK_THAT(error_of([&] { read_labelled_file(unknown.path(), labels, 2, false); }),
               Contains(unknown.path() + ":1: the label \"positive\" is not one of the 2 labels of the model"));
    CHECK_THAT(error_of([&] { read_labelled_file(file.path(), labels, 3, false); }),
               Contains(file.path() + ":1: 2 fields (text TAB label) where the training data has 3"));
}
