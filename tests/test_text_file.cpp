// Tests of whole text files (text_file.h): plain and gzip alike, the text byte for byte, invalid
// UTF-8 by byte offset and line, the size limit, and files that cannot be read.
#include "helpers.h"

#include <zlib.h>

#include "seqgrad/training/text_file.h"

using namespace seqgrad::training;
using seqgrad::testing::error_of;
using seqgrad::testing::TempDir;
using seqgrad::testing::TempFile;
using Catch::Matchers::Contains;

namespace {

// `text` as one gzip stream, in memory, so that a test can cut or corrupt it before writing it.
std::string gzip(const std::string& text) {
    z_stream stream{};
    REQUIRE(deflateInit2(&stream, Z_BEST_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK);  // 16: gzip
    std::string out(deflateBound(&stream, text.size()), '\0');
    stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
    stream.avail_in = static_cast<uInt>(text.size());
    stream.next_out = reinterpret_cast<Bytef*>(out.data());
    stream.avail_out = static_cast<uInt>(out.size());
    REQUIRE(deflate(&stream, Z_FINISH) == Z_STREAM_END);
    out.resize(stream.total_out);
    deflateEnd(&stream);
    return out;
}

// Text that does not repeat, so that its gzip stream is long enough to cut in the middle.
std::string numbered_lines(int n) {
    std::string text;
    for (int i = 0; i < n; ++i) text += "line " + std::to_string(i * 7919 % 100003) + ", ñ\n";
    return text;
}

}  // namespace

TEST_CASE("a text file reads whole, plain or gzip alike, its bytes as they are", "[text_file]") {
    const std::string text = "first\r\nsecond ñ 😀\n\n\tlast without a newline";
    const TempFile plain(text);
    const TempFile compressed(gzip(text), ".gz");
    const TempFile compressed_unnamed(gzip(text), ".txt");  // a gzip stream is known by its bytes, not its name
    CHECK(read_text_file(plain.path()) == text);
    CHECK(read_text_file(compressed.path()) == text);
    CHECK(read_text_file(compressed_unnamed.path()) == text);
    const std::string long_text = numbered_lines(100000);  // several of the reader's chunks
    const TempFile long_plain(long_text);
    const TempFile long_compressed(gzip(long_text), ".gz");
    CHECK(read_text_file(long_plain.path()) == long_text);
    CHECK(read_text_file(long_compressed.path()) == long_text);
}

TEST_CASE("an empty text file, plain or gzip, reads as empty text", "[text_file]") {
    const TempFile plain("");
    const TempFile compressed(gzip(""), ".gz");
    CHECK(read_text_file(plain.path()).empty());
    CHECK(read_text_file(compressed.path()).empty());
}

TEST_CASE("invalid UTF-8 names the file, the first invalid byte's offset and its line", "[text_file]") {
    struct Case {
        const char* what;
        std::string text;
        size_t byte, line;
    };
    const std::vector<Case> cases = {
        {"an invalid first byte",
         "\xff"
         "abc\n",
         0, 1},
        {"a stray continuation byte in the middle", "ab\ncd\n\x80x\nmore\n", 6, 3},
        {"after characters of several bytes", "ñ😀\nü\xf8z\n", 9, 2},
        {"a sequence cut short at the end", "héllo\nwörld\n\xe2\x82", 14, 3},
        {"an overlong form",
         "a\n\xc0\xaf"
         "b",
         2, 2},
        {"a surrogate", "x\r\ny\xed\xa0\x80", 4, 2},
        {"a code point above U+10FFFF", "ok\n\n\n\xf4\x90\x80\x80", 5, 4},
    };
    for (const Case& c : cases) {
        INFO(c.what);
        const std::string expected =
            ": invalid UTF-8 at byte " + std::to_string(c.byte) + " (line " + std::to_string(c.line) + ")";
        const TempFile plain(c.text);
        CHECK(error_of([&] { read_text_file(plain.path()); }) == plain.path() + expected);
        const TempFile compressed(gzip(c.text), ".gz");  // offsets in the text, not in the file
        CHECK(error_of([&] { read_text_file(compressed.path()); }) == compressed.path() + expected);
        CHECK(read_text_file(plain.path(), false) == c.text);
    }
}

TEST_CASE("without require_utf8 any bytes read as they are", "[text_file]") {
    std::string bytes;
    for (int repeat = 0; repeat < 3; ++repeat)
        for (int b = 255; b >= 0; --b) bytes += static_cast<char>(b);
    const TempFile plain(bytes);
    const TempFile compressed(gzip(bytes), ".gz");
    CHECK(read_text_file(plain.path(), false) == bytes);
    CHECK(read_text_file(compressed.path(), false) == bytes);
}

TEST_CASE("a missing file and a directory are Errors with the system's reason", "[text_file]") {
    CHECK(error_of([] { read_text_file("/no/such/text.txt"); }) ==
          "/no/such/text.txt: cannot open: No such file or directory");
    const TempDir dir("text_file");
    CHECK(error_of([&] { read_text_file(dir.path.string()); }) == dir.path.string() + ": cannot read: Is a directory");
}

TEST_CASE("a gzip stream cut short or corrupt is an Error, not less text", "[text_file]") {
    const std::string stream = gzip(numbered_lines(20000));
    for (const size_t keep : {stream.size() / 2, stream.size() - 4, size_t{5}}) {  // -4: without its length
        INFO("the first " << keep << " of " << stream.size() << " bytes");
        const TempFile cut(stream.substr(0, keep), ".gz");
        CHECK(error_of([&] { read_text_file(cut.path(), false); }) ==
              cut.path() + ": cannot read (unexpected end of file)");
    }
    std::string corrupt = stream;
    corrupt[corrupt.size() - 6] ^= 0x55;  // the CRC-32 of the text
    const TempFile bad(corrupt, ".gz");
    CHECK(error_of([&] { read_text_file(bad.path(), false); }) == bad.path() + ": cannot read (incorrect data check)");
}

TEST_CASE("a text file larger than the limit is refused, one of the limit's size is not", "[text_file]") {
    const std::string text = numbered_lines(1000);
    const TempFile plain(text);
    const TempFile compressed(gzip(text), ".gz");
    for (const std::string& path : {plain.path(), compressed.path()}) {
        INFO(path);
        CHECK(read_text_file(path, true, text.size()) == text);
        CHECK(error_of([&] { read_text_file(path, true, text.size() - 1); }) ==
              path + ": more than " + std::to_string(text.size() - 1) +
                  " bytes of text, the most a text file may hold");
    }
    CHECK(kMaxTextFileBytes == size_t{1} << 30);
}
