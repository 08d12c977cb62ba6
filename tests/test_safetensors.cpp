// Tests of the safetensors reader and writer: round trips, the committed PyTorch fixtures, and
// corrupt files built here byte by byte (each must be refused with a clear Error, never a crash).
#include "helpers.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>

#include "seqgrad/core/safetensors.h"

using seqgrad::DType;
using seqgrad::Error;
using seqgrad::IntTensor;
using seqgrad::SafetensorsEntry;
using seqgrad::SafetensorsFile;
using seqgrad::Shape;
using seqgrad::Tensor;
using seqgrad::testing::TempDir;
using Catch::Matchers::Contains;

namespace {

using Bytes = std::vector<std::byte>;

// A file from header text and data bytes; the length field is the header's unless overridden.
Bytes make_file(const std::string& header, const std::string& data = "",
                std::optional<uint64_t> header_length = std::nullopt) {
    const uint64_t length = header_length.value_or(header.size());
    Bytes out(8 + header.size() + data.size());
    std::memcpy(out.data(), &length, 8);
    std::memcpy(out.data() + 8, header.data(), header.size());
    if (!data.empty()) std::memcpy(out.data() + 8 + header.size(), data.data(), data.size());
    return out;
}

// The message parse() throws for these bytes; fails the test if it accepts them.
std::string error_of(const Bytes& bytes) {
    try {
        SafetensorsFile::parse(bytes, "bad.safetensors");
    } catch (const Error& e) {
        return e.what();
    }
    FAIL("parse accepted a file it should refuse");
    return {};
}

// One valid F32 entry of shape [2] at the given offsets.
std::string f32_pair(const std::string& name, int begin, int end) {
    return "\"" + name + "\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[" + std::to_string(begin) + "," +
           std::to_string(end) + "]}";
}

// A header object from its members, e.g. object_of({f32_pair("a", 0, 8), "\"b\":..."}).
std::string object_of(const std::vector<std::string>& members) {
    std::string out = "{";
    for (size_t i = 0; i < members.size(); ++i) {
        if (i) out += ',';
        out += members[i];
    }
    out += '}';
    return out;
}

// A small valid file with metadata, an F32 matrix, an I64 vector and a scalar.
SafetensorsFile small_file() {
    SafetensorsFile f;
    f.set_metadata("config", "{\"d_model\": 4}");
    f.set_metadata("note", "h\xC3\xA9llo \"quoted\"");
    f.put("weight", Tensor::from_vector({1.5f, -2.0f, 0.25f, 3.0f, -0.0f, 1e-30f}, Shape{2, 3}));
    f.put("ids", IntTensor::from_vector({0, -1, 1LL << 40}, Shape{3}));
    f.put("loss", Tensor::scalar(0.75f));
    return f;
}

std::vector<float> values_of(const Tensor& t) { return t.to_vector(); }

std::string read_text(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

// ---- round trips and the written format ----

TEST_CASE("safetensors round-trips F32 and I64 tensors with metadata", "[safetensors]") {
    const SafetensorsFile original = small_file();
    const SafetensorsFile back = SafetensorsFile::parse(original.serialize(), "round.safetensors");

    CHECK(back.names() == std::vector<std::string>{"weight", "ids", "loss"});
    CHECK(back.metadata() == original.metadata());
    CHECK(back.metadata("note") == "h\xC3\xA9llo \"quoted\"");

    const Tensor w = back.tensor("weight");
    CHECK(w.shape() == Shape{2, 3});
    CHECK(values_of(w) == std::vector<float>{1.5f, -2.0f, 0.25f, 3.0f, -0.0f, 1e-30f});
    CHECK(std::signbit(w.data()[4]));  // bytes are copied exactly, sign of zero included
    CHECK_FALSE(w.requires_grad());

    const IntTensor ids = back.int_tensor("ids");
    CHECK(ids.shape() == Shape{3});
    CHECK(ids.to_vector() == std::vector<int64_t>{0, -1, 1LL << 40});
    CHECK(back.entry("ids").dtype == DType::I64);
    CHECK(back.serialize() == original.serialize());
}

TEST_CASE("safetensors round-trips zero-dimensional and empty tensors", "[safetensors]") {
    SafetensorsFile f;
    f.put("scalar", Tensor::scalar(-4.5f));
    f.put("empty_rows", Tensor::zeros(Shape{0, 3}));
    f.put("int_scalar", IntTensor::from_vector({7}, Shape{}));
    f.put("empty_ids", IntTensor::zeros(Shape{2, 0}));
    f.put("after", Tensor::from_vector({1.0f, 2.0f}, Shape{2}));

    const SafetensorsFile back = SafetensorsFile::parse(f.serialize(), "zero.safetensors");
    CHECK(back.names() == f.names());
    CHECK(back.tensor("scalar").shape() == Shape{});
    CHECK(back.tensor("scalar").item() == -4.5f);
    CHECK(back.tensor("empty_rows").shape() == Shape{0, 3});
    CHECK(back.tensor("empty_rows").numel() == 0);
    CHECK(back.int_tensor("int_scalar").shape() == Shape{});
    CHECK(back.int_tensor("int_scalar").to_vector() == std::vector<int64_t>{7});
    CHECK(back.int_tensor("empty_ids").shape() == Shape{2, 0});
    CHECK(values_of(back.tensor("after")) == std::vector<float>{1.0f, 2.0f});
}

TEST_CASE("safetensors writes metadata first, entries in put order, a space-padded header and packed data",
          "[safetensors]") {
    SafetensorsFile f;
    f.put("b", Tensor::from_vector({1.0f}, Shape{1}));
    f.put("a", IntTensor::from_vector({2, 3}, Shape{2}));
    f.set_metadata("k", "v");
    const Bytes bytes = f.serialize();

    uint64_t header_length = 0;
    std::memcpy(&header_length, bytes.data(), 8);
    CHECK(header_length % 8 == 0);
    const std::string header(reinterpret_cast<const char*>(bytes.data() + 8), header_length);
    const std::string expected = "{\"__metadata__\":{\"k\":\"v\"},"
                                 "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                                 "\"a\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[4,20]}}";
    CHECK(header.substr(0, expected.size()) == expected);
    CHECK(header.find_first_not_of(' ', expected.size()) == std::string::npos);
    CHECK(bytes.size() == 8 + header_length + 20);

    float first = 0;
    std::memcpy(&first, bytes.data() + 8 + header_length, 4);
    CHECK(first == 1.0f);
}

TEST_CASE("safetensors writes no __metadata__ when there is none", "[safetensors]") {
    SafetensorsFile f;
    f.put("x", Tensor::scalar(1.0f));
    const Bytes bytes = f.serialize();
    const std::string text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    CHECK(text.find("__metadata__") == std::string::npos);
    CHECK(SafetensorsFile::parse(bytes, "x").metadata().empty());

    const Bytes empty = SafetensorsFile().serialize();
    CHECK(empty.size() == 16);  // "{}" padded to 8
    CHECK(SafetensorsFile::parse(empty, "empty").names().empty());
}

TEST_CASE("safetensors put replaces a tensor in place and refuses reserved names or inconsistent entries",
          "[safetensors]") {
    SafetensorsFile f;
    f.put("first", Tensor::scalar(1.0f));
    f.put("second", Tensor::scalar(2.0f));
    f.put("first", IntTensor::from_vector({5, 6}, Shape{2}));
    CHECK(f.names() == std::vector<std::string>{"first", "second"});
    CHECK(f.int_tensor("first").to_vector() == std::vector<int64_t>{5, 6});

    CHECK_THROWS_WITH(f.put("__metadata__", Tensor::scalar(1.0f)), Contains("reserved"));
    CHECK_THROWS_WITH(f.put("undefined", Tensor()), Contains("undefined"));
    CHECK_THROWS_WITH(f.put("short", SafetensorsEntry{DType::F32, Shape{3}, Bytes(8)}),
                      Contains("8 bytes given") && Contains("needs 12"));
    CHECK_THROWS_WITH(f.put("negative", SafetensorsEntry{DType::I64, Shape{-1}, Bytes{}}), Contains("negative"));
    CHECK_THROWS_WITH(f.put("bad\xFFutf8", Tensor::scalar(1.0f)), Contains("UTF-8"));
    CHECK_THROWS_WITH(f.set_metadata("k", "bad\xC3"), Contains("UTF-8"));
    CHECK(f.names().size() == 2);  // nothing half-added
}

TEST_CASE("safetensors accessors name the file and the tensor when it is missing or of the other dtype",
          "[safetensors]") {
    const SafetensorsFile f = SafetensorsFile::parse(small_file().serialize(), "model.safetensors");
    CHECK(f.contains("ids"));
    CHECK_FALSE(f.contains("nope"));
    CHECK_THROWS_WITH(f.tensor("nope"), Contains("model.safetensors") && Contains("no tensor named \"nope\""));
    CHECK_THROWS_WITH(f.int_tensor("weight"), Contains("model.safetensors") && Contains("\"weight\" is F32, not I64"));
    CHECK_THROWS_WITH(f.tensor("ids"), Contains("model.safetensors") && Contains("\"ids\" is I64, not F32"));
    CHECK_THROWS_WITH(f.metadata("absent"), Contains("model.safetensors") && Contains("no metadata named \"absent\""));
}

// ---- the PyTorch fixtures ----

TEST_CASE("safetensors reads every committed PyTorch fixture", "[safetensors]") {
    int files = 0;
    int model_files = 0;
    for (const auto& item : std::filesystem::directory_iterator(SEQGRAD_FIXTURES_DIR)) {
        if (item.path().extension() != ".safetensors") continue;
        ++files;
        INFO(item.path());
        const SafetensorsFile f = SafetensorsFile::load(item.path().string());
        CHECK(f.name() == item.path().string());
        CHECK(f.metadata().count("config") == 1);

        REQUIRE(f.contains("expect.loss"));
        CHECK(f.entry("expect.loss").dtype == DType::F32);
        CHECK(f.tensor("expect.loss").shape() == Shape{});
        CHECK(std::isfinite(f.tensor("expect.loss").item()));

        if (f.contains("input.src")) {
            ++model_files;
            CHECK(f.entry("input.src").dtype == DType::I64);
            CHECK(f.entry("input.tgt").dtype == DType::I64);
            const IntTensor src = f.int_tensor("input.src");
            CHECK(src.dim() == 2);
            for (int64_t id : src.to_vector()) CHECK(id >= 0);
            CHECK(f.tensor("expect.logits").dim() == 3);
        }

        // Written back, the data section is byte-identical: order and bytes are preserved.
        const std::string original = read_text(item.path());
        const Bytes again = f.serialize();
        uint64_t original_header = 0, new_header = 0;
        std::memcpy(&original_header, original.data(), 8);
        std::memcpy(&new_header, again.data(), 8);
        const std::string original_data = original.substr(8 + original_header);
        const std::string new_data(reinterpret_cast<const char*>(again.data()) + 8 + new_header,
                                   again.size() - 8 - new_header);
        CHECK(new_data == original_data);
        CHECK(SafetensorsFile::parse(again, "again").names() == f.names());
    }
    CHECK(files >= 10);
    CHECK(model_files >= 5);
}

TEST_CASE("safetensors reads the values PyTorch wrote", "[safetensors]") {
    const SafetensorsFile f =
        SafetensorsFile::load(std::string(SEQGRAD_FIXTURES_DIR) + "/transformer_post_relu.safetensors");
    // Values read independently with Python's struct module.
    CHECK(f.names().front() == "input.src");
    CHECK(f.int_tensor("input.src").shape() == Shape{4, 7});
    CHECK(f.int_tensor("input.src").to_vector() == std::vector<int64_t>{9, 8, 10, 10, 9, 0, 0, 9, 10, 6, 4,  8, 10, 6,
                                                                        7, 4, 0,  0,  0, 0, 0, 9, 4,  5, 10, 4, 6,  0});
    CHECK(f.tensor("expect.loss").item() == 3.512383222579956f);
    const Tensor emb = f.tensor("src_embedding.weight");
    CHECK(emb.shape() == Shape{11, 16});
    CHECK(emb.data()[0] == -0.28468167781829834f);
    CHECK(emb.data()[2] == -0.38570183515548706f);
    CHECK_THAT(f.metadata("config"), Contains("\"model\": \"transformer\""));
}

// ---- corrupt files ----

TEST_CASE("safetensors refuses every truncated prefix of a valid file", "[safetensors]") {
    const Bytes valid = small_file().serialize();
    REQUIRE_NOTHROW(SafetensorsFile::parse(valid, "ok"));
    for (size_t length = 0; length < valid.size(); ++length) {
        INFO("prefix length " << length);
        const Bytes prefix(valid.begin(), valid.begin() + static_cast<std::ptrdiff_t>(length));
        CHECK_THROWS_AS(SafetensorsFile::parse(prefix, "cut.safetensors"), Error);
    }
}

TEST_CASE("safetensors refuses a file shorter than the header length field", "[safetensors]") {
    CHECK_THAT(error_of(Bytes(5)), Contains("bad.safetensors") && Contains("5 bytes, shorter than"));
    CHECK_THAT(error_of(Bytes{}), Contains("0 bytes"));
}

TEST_CASE("safetensors refuses a header length beyond the file", "[safetensors]") {
    const std::string header = "{}";
    // One byte past the end.
    CHECK_THAT(error_of(make_file(header, "", 3)), Contains("header length 3") && Contains("past the end"));
    // Absurd lengths, including ones that would overflow 8 + length.
    CHECK_THAT(error_of(make_file(header, "", 1LL << 40)), Contains("past the end"));
    CHECK_THAT(error_of(make_file(header, "", std::numeric_limits<uint64_t>::max())), Contains("past the end"));
    CHECK_THAT(error_of(make_file(header, "", std::numeric_limits<int64_t>::max())), Contains("past the end"));
}

TEST_CASE("safetensors refuses a header length above 100 MB even when the file is that long", "[safetensors]") {
    const std::string header(100'000'001, ' ');
    CHECK_THAT(error_of(make_file(header)), Contains("exceeds the limit"));
}

TEST_CASE("safetensors refuses a header that is not valid JSON", "[safetensors]") {
    CHECK_THAT(error_of(make_file("{\"a\":")), Contains("not valid JSON"));
    CHECK_THAT(error_of(make_file("")), Contains("not valid JSON"));
    CHECK_THAT(error_of(make_file("{'a': 1}")), Contains("not valid JSON") && Contains("near file byte 9"));
    CHECK_THAT(error_of(make_file("{} {}")), Contains("not valid JSON"));
    CHECK_THAT(error_of(make_file(std::string("{\"a\0\":1}", 8))), Contains("not valid JSON"));
    CHECK_THAT(error_of(make_file("{\"\xFF\":{}}")), Contains("not valid JSON"));  // not UTF-8
}

TEST_CASE("safetensors refuses a header that is not a JSON object", "[safetensors]") {
    CHECK_THAT(error_of(make_file("[]")), Contains("not a JSON object but a JSON array"));
    CHECK_THAT(error_of(make_file("\"text\"")), Contains("not a JSON object"));
    CHECK_THAT(error_of(make_file("12   ")), Contains("not a JSON object"));
    CHECK_THAT(error_of(make_file("null")), Contains("not a JSON object"));
}

TEST_CASE("safetensors refuses a header nested absurdly deep", "[safetensors]") {
    const std::string deep = "{\"x\":" + std::string(1000, '[') + std::string(1000, ']') + "}";
    CHECK_THAT(error_of(make_file(deep)), Contains("nests deeper"));
}

TEST_CASE("safetensors refuses unsupported dtypes and names them", "[safetensors]") {
    for (const std::string dtype : {"F16", "BF16", "X", "f32", "F64", "I32"}) {
        const std::string header = "{\"t\":{\"dtype\":\"" + dtype + "\",\"shape\":[1],\"data_offsets\":[0,4]}}";
        CHECK_THAT(error_of(make_file(header, "abcd")),
                   Contains("tensor \"t\" has dtype \"" + dtype + "\"") && Contains("only F32 and I64"));
    }
}

TEST_CASE("safetensors refuses a byte range whose length is not shape times dtype size", "[safetensors]") {
    const std::string header = "{\"t\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}";
    CHECK_THAT(error_of(make_file(header, std::string(8, 'x'))),
               Contains("tensor \"t\"") && Contains("span 8 bytes but F32 [3] needs 12"));
    const std::string as_i64 = "{\"t\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    CHECK_THAT(error_of(make_file(as_i64, std::string(8, 'x'))), Contains("needs 16"));
    const std::string scalar = "{\"t\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,0]}}";
    CHECK_THAT(error_of(make_file(scalar)), Contains("needs 4"));
}

TEST_CASE("safetensors refuses offsets outside the data section", "[safetensors]") {
    CHECK_THAT(error_of(make_file(object_of({f32_pair("t", 0, 8)}), "1234")),
               Contains("tensor \"t\"") && Contains("reach past the end of the data section (4 bytes)"));
    CHECK_THAT(error_of(make_file(object_of({f32_pair("t", 8, 16)}), std::string(8, 'x'))), Contains("reach past"));
    const std::string huge =
        "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[9223372036854775800,9223372036854775807]}}";
    CHECK_THROWS_AS(SafetensorsFile::parse(make_file(huge, std::string(8, 'x')), "x"), Error);
    const std::string beyond_int64 =
        "{\"t\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[18446744073709551615,18446744073709551615]}}";
    CHECK_THAT(error_of(make_file(beyond_int64)), Contains("too large"));
    // An empty tensor must still point inside the data section.
    const std::string empty_far = "{\"t\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[5,5]}}";
    CHECK_THAT(error_of(make_file(empty_far, "1234")), Contains("reach past"));
}

TEST_CASE("safetensors refuses overlapping byte ranges", "[safetensors]") {
    const std::string header = object_of({f32_pair("a", 0, 8), f32_pair("b", 4, 12)});
    CHECK_THAT(error_of(make_file(header, std::string(12, 'x'))),
               Contains("tensor \"b\"") && Contains("overlaps tensor \"a\""));
    const std::string same = object_of({f32_pair("a", 0, 8), f32_pair("b", 0, 8)});
    CHECK_THAT(error_of(make_file(same, std::string(8, 'x'))), Contains("overlaps"));
}

TEST_CASE("safetensors refuses reversed offsets", "[safetensors]") {
    const std::string header = "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}";
    CHECK_THAT(error_of(make_file(header, std::string(8, 'x'))), Contains("data_offsets [8, 0] are reversed"));
}

TEST_CASE("safetensors refuses negative, fractional or overflowing shape extents", "[safetensors]") {
    auto with_shape = [](const std::string& shape) {
        return make_file("{\"t\":{\"dtype\":\"F32\",\"shape\":" + shape + ",\"data_offsets\":[0,0]}}");
    };
    CHECK_THAT(error_of(with_shape("[2,-1]")), Contains("shape extent 1 is negative: -1"));
    CHECK_THAT(error_of(with_shape("[1.5]")), Contains("shape extent 0 is not an integer: 1.5"));
    CHECK_THAT(error_of(with_shape("[2.0]")), Contains("not an integer"));
    CHECK_THAT(error_of(with_shape("[\"2\"]")), Contains("not an integer"));
    CHECK_THAT(error_of(with_shape("[1e30]")), Contains("not an integer"));
    CHECK_THAT(error_of(with_shape("[4294967296,4294967296]")), Contains("overflows"));
    CHECK_THAT(error_of(with_shape("[3037000500,3037000500]")), Contains("overflows"));  // numel fits, bytes do not
    // Refused whatever the position of a zero extent (the tensor would have no bytes).
    CHECK_THAT(error_of(with_shape("[0,9223372036854775807,9223372036854775807]")), Contains("overflows"));
    CHECK_THAT(error_of(with_shape("[4611686018427387904,4611686018427387904,0]")), Contains("overflows"));
    CHECK_THAT(error_of(with_shape("{}")), Contains("shape is not an array"));
}

TEST_CASE("safetensors refuses metadata that is not an object of strings", "[safetensors]") {
    CHECK_THAT(error_of(make_file("{\"__metadata__\":{\"a\":1}}")),
               Contains("__metadata__ value for \"a\" is not a string: 1"));
    CHECK_THAT(error_of(make_file("{\"__metadata__\":{\"a\":null}}")), Contains("not a string"));
    CHECK_THAT(error_of(make_file("{\"__metadata__\":{\"a\":{\"b\":\"c\"}}}")), Contains("not a string"));
    CHECK_THAT(error_of(make_file("{\"__metadata__\":[\"a\"]}")), Contains("__metadata__ is not a JSON object"));
    CHECK_THAT(error_of(make_file("{\"__metadata__\":\"a\"}")), Contains("__metadata__ is not a JSON object"));
    CHECK(SafetensorsFile::parse(make_file("{\"__metadata__\":{}}"), "x").metadata().empty());
}

TEST_CASE("safetensors refuses malformed entries", "[safetensors]") {
    CHECK_THAT(error_of(make_file("{\"t\":[1,2]}")), Contains("tensor \"t\": entry is not a JSON object"));
    CHECK_THAT(error_of(make_file("{\"t\":{\"shape\":[0],\"data_offsets\":[0,0]}}")), Contains("has no \"dtype\""));
    CHECK_THAT(error_of(make_file("{\"t\":{\"dtype\":\"F32\",\"data_offsets\":[0,0]}}")), Contains("has no \"shape\""));
    CHECK_THAT(error_of(make_file("{\"t\":{\"dtype\":\"F32\",\"shape\":[0]}}")), Contains("has no \"data_offsets\""));
    CHECK_THAT(error_of(make_file("{\"t\":{\"dtype\":32,\"shape\":[0],\"data_offsets\":[0,0]}}")),
               Contains("dtype is not a string"));
    CHECK_THAT(error_of(make_file("{\"t\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0,0]}}")),
               Contains("not an array of two integers"));
    CHECK_THAT(error_of(make_file("{\"t\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":\"0-0\"}}")),
               Contains("not an array of two integers"));
    CHECK_THAT(error_of(make_file("{\"t\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,-1]}}")),
               Contains("data_offsets[1] is negative"));
    CHECK_THAT(error_of(make_file("{\"t\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0.5,0]}}")),
               Contains("data_offsets[0] is not an integer"));
    CHECK_THAT(error_of(make_file("{\"t\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0],\"extra\":1}}")),
               Contains("unknown field \"extra\""));
}

TEST_CASE("safetensors refuses trailing bytes and holes in the data section", "[safetensors]") {
    CHECK_THAT(error_of(make_file(object_of({f32_pair("t", 0, 8)}), std::string(9, 'x'))),
               Contains("1 trailing bytes after the last tensor's data"));
    CHECK_THAT(error_of(make_file("{}", "junk")), Contains("4 trailing bytes"));
    const std::string hole = object_of({f32_pair("a", 0, 8), f32_pair("b", 12, 20)});
    CHECK_THAT(error_of(make_file(hole, std::string(20, 'x'))), Contains("bytes [8, 12) of the data section"));
    const std::string gap_first = object_of({f32_pair("a", 4, 12)});
    CHECK_THAT(error_of(make_file(gap_first, std::string(12, 'x'))), Contains("bytes [0, 4)"));
}

TEST_CASE("safetensors accepts unpadded headers, any key order and empty tensors inside the data", "[safetensors]") {
    const std::string header =
        object_of({f32_pair("z", 0, 8), "\"e\":{\"dtype\":\"I64\",\"shape\":[0,5],\"data_offsets\":[4,4]}",
                   f32_pair("a", 8, 16)});
    const SafetensorsFile f = SafetensorsFile::parse(make_file(header, std::string(16, '\0')), "ok");
    CHECK(f.names() == std::vector<std::string>{"z", "e", "a"});  // by position of the data
    CHECK(f.int_tensor("e").shape() == Shape{0, 5});
}

TEST_CASE("safetensors refuses duplicate keys in the header", "[safetensors]") {
    const std::string twice = object_of({f32_pair("t", 0, 8), f32_pair("t", 0, 8)});
    CHECK_THAT(error_of(make_file(twice, std::string(8, 'x'))), Contains("repeats the key \"t\""));
    CHECK_THAT(error_of(make_file("{\"__metadata__\":{\"a\":\"1\",\"a\":\"2\"}}")), Contains("repeats the key \"a\""));
    CHECK_THAT(error_of(make_file("{\"t\":{\"dtype\":\"F32\",\"dtype\":\"I64\",\"shape\":[0],\"data_offsets\":[0,0]}"
                                  "}")),
               Contains("repeats the key \"dtype\""));
    CHECK_THAT(error_of(make_file("{\"__metadata__\":{},\"__metadata__\":{}}")), Contains("repeats the key"));
    // The same key in different objects is fine.
    const std::string ok = "{\"__metadata__\":{\"dtype\":\"x\"}," + f32_pair("dtype", 0, 8) + "}";
    CHECK_NOTHROW(SafetensorsFile::parse(make_file(ok, std::string(8, 'x')), "ok"));
}

TEST_CASE("safetensors refuses garbage bytes", "[safetensors]") {
    std::mt19937_64 rng(7);
    for (int trial = 0; trial < 200; ++trial) {
        Bytes garbage(rng() % 64);
        for (auto& b : garbage) b = static_cast<std::byte>(rng());
        if (garbage.size() >= 8) {  // keep the length plausible so the JSON parser sees garbage too
            const uint64_t length = rng() % (garbage.size() - 7);
            std::memcpy(garbage.data(), &length, 8);
        }
        CHECK_THROWS_AS(SafetensorsFile::parse(garbage, "garbage"), Error);
    }
}

TEST_CASE("safetensors parses randomly mutated files without crashing", "[safetensors]") {
    const Bytes valid = small_file().serialize();
    uint64_t header_length = 0;
    std::memcpy(&header_length, valid.data(), 8);
    const std::string json_chars = "{}[],:\"0123456789-.e \\";

    std::mt19937_64 rng(20240613);
    int accepted = 0, refused = 0;
    for (int trial = 0; trial < 2000; ++trial) {
        Bytes mutated = valid;
        const int edits = 1 + static_cast<int>(rng() % 4);
        for (int e = 0; e < edits; ++e) {
            // Mostly the header, where the parsing is; sometimes anywhere.
            const size_t limit = rng() % 4 == 0 ? mutated.size() : 8 + header_length;
            const size_t at = rng() % limit;
            const char replacement = rng() % 2 ? json_chars[rng() % json_chars.size()] : static_cast<char>(rng());
            mutated[at] = static_cast<std::byte>(replacement);
        }
        try {
            const SafetensorsFile f = SafetensorsFile::parse(mutated, "mutated");
            ++accepted;
            // Whatever was accepted is self-consistent: it writes and reads back the same.
            const SafetensorsFile again = SafetensorsFile::parse(f.serialize(), "again");
            CHECK(again.names() == f.names());
            CHECK(again.metadata() == f.metadata());
        } catch (const Error&) {
            ++refused;
        }
    }
    CHECK(refused > 0);
    CHECK(accepted > 0);
}

// ---- files on disk ----

TEST_CASE("safetensors save replaces a file atomically and leaves no temporary file", "[safetensors]") {
    TempDir dir("save");
    const std::string path = (dir.path / "model.safetensors").string();
    {
        std::ofstream old(path, std::ios::binary);
        old << "old content";
    }
    const SafetensorsFile f = small_file();
    f.save(path);
    CHECK(dir.listing() == std::vector<std::string>{"model.safetensors"});

    const SafetensorsFile back = SafetensorsFile::load(path);
    CHECK(back.name() == path);
    CHECK(back.names() == f.names());
    CHECK(back.serialize() == f.serialize());

    // Saving again over the new file works too.
    SafetensorsFile g;
    g.put("only", Tensor::scalar(2.0f));
    g.save(path);
    CHECK(SafetensorsFile::load(path).names() == std::vector<std::string>{"only"});
    CHECK(dir.listing() == std::vector<std::string>{"model.safetensors"});
}

TEST_CASE("safetensors save into a missing directory throws an Error naming the path", "[safetensors]") {
    TempDir dir("missing");
    const std::string path = (dir.path / "no_such_dir" / "model.safetensors").string();
    CHECK_THROWS_WITH(small_file().save(path), Contains("cannot write " + path));
    CHECK(dir.listing().empty());
}

TEST_CASE("safetensors save that fails at the rename removes its temporary file and keeps the old content",
          "[safetensors]") {
    TempDir dir("rename");
    // The target is a non-empty directory: the temporary file is written, but cannot replace it.
    const std::filesystem::path target = dir.path / "model.safetensors";
    std::filesystem::create_directories(target);
    { std::ofstream(target / "keep.txt") << "precious"; }

    CHECK_THROWS_WITH(small_file().save(target.string()), Contains(target.string()) && Contains("renaming"));
    CHECK(dir.listing() == std::vector<std::string>{"model.safetensors"});
    CHECK(read_text(target / "keep.txt") == "precious");
}

TEST_CASE("safetensors load names the path of a missing, unreadable or corrupt file", "[safetensors]") {
    TempDir dir("load");
    const std::string missing = (dir.path / "absent.safetensors").string();
    CHECK_THROWS_WITH(SafetensorsFile::load(missing), Contains(missing) && Contains("cannot open"));
    CHECK_THROWS_WITH(SafetensorsFile::load(dir.path.string()), Contains("not a regular file"));
    const std::string fifo = (dir.path / "pipe").string();
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    CHECK_THROWS_WITH(SafetensorsFile::load(fifo), Contains("not a regular file"));  // and does not block

    const std::string corrupt = (dir.path / "corrupt.safetensors").string();
    { std::ofstream(corrupt, std::ios::binary) << "short"; }
    CHECK_THROWS_WITH(SafetensorsFile::load(corrupt), Contains(corrupt) && Contains("shorter than"));
}

TEST_CASE("safetensors keeps error messages short for huge or non-UTF-8 values", "[safetensors]") {
    const std::string long_dtype(5000, 'Q');
    const std::string header = "{\"t\":{\"dtype\":\"" + long_dtype + "\",\"shape\":[0],\"data_offsets\":[0,0]}}";
    CHECK(error_of(make_file(header)).size() < 400);
    const std::string big_entry = "{\"t\":[" + std::string(10000, '1') + "]}";
    CHECK(error_of(make_file(big_entry)).size() < 400);

    SafetensorsFile f;
    CHECK_THROWS_WITH(f.tensor("bad\xFF"), Contains("no tensor named"));  // Error, not a JSON exception
}
