// Tokenizers: code points, whitespace-separated symbols, bytes, and SentencePiece models (tokenizer.h).
#include "seqgrad/text/tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <array>
#include <exception>
#include <unordered_map>

#include "seqgrad/core/error.h"
#include "seqgrad/internal/option_table.h"
#include "seqgrad/text/utf8.h"

namespace seqgrad::text {

namespace {

const char* kOp = "tokenizer";

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

// The bytes that are their own "byte" symbol; every other byte is written <0xNN>.
bool is_plain_byte(unsigned char b) { return (b >= 0x20 && b <= 0x7E) || b == '\n' || b == '\t'; }

constexpr char kHexDigits[] = "0123456789ABCDEF";

// The byte that a symbol "<0xNN>" (two uppercase hex digits) stands for, or -1.
int hex_byte(std::string_view symbol) {
    if (symbol.size() != 6 || symbol.substr(0, 3) != "<0x" || symbol[5] != '>') return -1;
    const auto digit = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1; };
    const int high = digit(symbol[3]), low = digit(symbol[4]);
    return high < 0 || low < 0 ? -1 : high * 16 + low;
}

// Feeds SentencePiece's trainer from a callback.
class CallbackSentences : public sentencepiece::SentenceIterator {
public:
    explicit CallbackSentences(const std::function<bool(std::string&)>& next) : next_(next) { Next(); }
    bool done() const override { return done_; }
    void Next() override { done_ = !next_(value_); }
    const std::string& value() const override { return value_; }
    sentencepiece::util::Status status() const override { return {}; }

private:
    const std::function<bool(std::string&)>& next_;
    std::string value_;
    bool done_ = false;
};

}  // namespace

Tokenizer::Tokenizer() = default;

Tokenizer Tokenizer::characters(bool lowercase) {
    Tokenizer t;
    t.lowercase_ = lowercase;
    return t;
}

Tokenizer Tokenizer::spaces() {
    Tokenizer t;
    t.kind_ = "space";
    return t;
}

Tokenizer Tokenizer::bytes() {
    Tokenizer t;
    t.kind_ = "byte";
    return t;
}

Tokenizer Tokenizer::sentencepiece(std::string model_bytes, const std::string& origin) {
    auto processor = std::make_shared<sentencepiece::SentencePieceProcessor>();
    // Most faults come back as a status; a few come out of SentencePiece's trie builder as a C++
    // exception instead (a piece that begins with a NUL byte is a key of length zero there).
    std::string fault;
    try {
        const auto status = processor->LoadFromSerializedProto(model_bytes);
        if (!status.ok()) fault = status.ToString();
    } catch (const std::exception& e) {
        fault = e.what();
    }
    check(fault.empty(), kOp, origin, " is not a SentencePiece model that loads: ", fault);
    Tokenizer t;
    t.kind_ = "sentencepiece";
    t.model_ = std::move(model_bytes);
    t.processor_ = std::move(processor);
    return t;
}

Tokenizer Tokenizer::load_sentencepiece(const std::string& path) { return sentencepiece(read_file(path), path); }

Tokenizer Tokenizer::train_sentencepiece(const std::function<bool(std::string&)>& next,
                                         const SentencePieceOptions& options) {
    check(options.model_type == "unigram" || options.model_type == "bpe", kOp,
          "the SentencePiece model type must be unigram or bpe, got \"", options.model_type, "\"");
    check(options.vocab_size >= 8, kOp, "a SentencePiece vocabulary needs at least 8 pieces, got ", options.vocab_size);
    CallbackSentences sentences(next);
    check(!sentences.done(), kOp, "no text to train a SentencePiece model on");
    sentencepiece::SetRandomGeneratorSeed(static_cast<unsigned int>(options.seed));
    // Identity normalisation and whitespace kept: detokenize(tokenize(x)) == x. Every character
    // of the training side is covered, so none of it becomes <unk>.
    const std::unordered_map<std::string, std::string> settings = {
        {"model_type", options.model_type},
        {"vocab_size", std::to_string(options.vocab_size)},
        {"character_coverage", "1.0"},
        {"normalization_rule_name", "identity"},
        {"remove_extra_whitespaces", "false"},
        {"input_sentence_size", "2000000"},
        {"shuffle_input_sentence", "true"},
        {"num_threads", std::to_string(std::max<int64_t>(1, options.threads))},
        {"minloglevel", "2"},  // its progress lines would drown the program's own
        {"byte_fallback", options.byte_fallback ? "true" : "false"},
    };
    std::string model;
    const auto status = sentencepiece::SentencePieceTrainer::Train(settings, &sentences, &model);
    check(status.ok(), kOp, "training a SentencePiece model (", options.model_type, ", ", options.vocab_size,
          " pieces) failed: ", status.ToString());
    return sentencepiece(std::move(model), "the trained SentencePiece model");
}

void Tokenizer::each_symbol(std::string_view text, const std::function<void(std::string_view)>& symbol) const {
    if (kind_ == "byte") {
        char hex[] = "<0xNN>";
        for (size_t at = 0; at < text.size(); ++at) {
            const auto b = static_cast<unsigned char>(text[at]);
            if (is_plain_byte(b)) {
                symbol(text.substr(at, 1));
            } else {
                hex[3] = kHexDigits[b >> 4];
                hex[4] = kHexDigits[b & 15];
                symbol(std::string_view(hex, 6));
            }
        }
        return;
    }
    check(is_utf8(text), kOp, "\"", printable(text), "\" is not valid UTF-8");
    if (kind_ == "space") {
        for (size_t at = 0; at < text.size();) {
            while (at < text.size() && is_space(text[at])) ++at;
            const size_t start = at;
            while (at < text.size() && !is_space(text[at])) ++at;
            if (at > start) symbol(text.substr(start, at - start));
        }
        return;
    }
    if (kind_ == "sentencepiece") {
        std::vector<std::string> pieces;
        const auto status = processor_->Encode(text, &pieces);
        check(status.ok(), kOp, "SentencePiece could not encode \"", printable(text), "\": ", status.ToString());
        for (const std::string& piece : pieces) symbol(piece);
        return;
    }
    std::string lowered;
    if (lowercase_) {
        lowered.assign(text);
        for (char& c : lowered)
            if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
        text = lowered;
    }
    for (size_t at = 0; at < text.size();) {
        const size_t length = utf8_length(text, at);  // valid: checked above
        symbol(text.substr(at, length));
        at += length;
    }
}

std::vector<std::string> Tokenizer::tokenize(std::string_view text) const {
    std::vector<std::string> symbols;
    each_symbol(text, [&](std::string_view s) { symbols.emplace_back(s); });
    return symbols;
}

std::string Tokenizer::decode_pieces(const std::vector<std::string>& pieces) const {
    std::string text;
    const auto status = processor_->Decode(pieces, &text);
    check(status.ok(), kOp, "SentencePiece could not decode its pieces: ", status.ToString());
    return text;
}

std::string Tokenizer::detokenize(const std::vector<std::string>& symbols) const {
    if (kind_ == "sentencepiece") return decode_pieces(symbols);
    std::string text;
    Stream stream(*this);
    for (const std::string& s : symbols) text += stream.add(s);
    return text;
}

std::string Tokenizer::Stream::add(const std::string& symbol) {
    const Tokenizer& t = *tokenizer_;
    ++added_;
    if (t.kind_ == "byte") {
        const int b = hex_byte(symbol);
        return b >= 0 ? std::string(1, static_cast<char>(b)) : symbol;  // a special token as it is written
    }
    if (t.kind_ == "space") return added_ > 1 ? " " + symbol : symbol;
    if (t.kind_ != "sentencepiece") return symbol;
    pending_.push_back(symbol);
    const int id = t.processor_->PieceToId(symbol);
    if (t.processor_->IsByte(id)) return "";  // the character's next byte may follow
    const std::string text = window_text();
    std::string out = text.substr(std::min(shown_, text.size()));
    shown_ = text.size();
    // After a normal piece, what follows decodes the same whether that piece comes alone or after
    // everything before it (not so after <unk> or a control piece, which do not end a first word).
    if (!t.processor_->IsControl(id) && !t.processor_->IsUnknown(id) && !t.processor_->IsUnused(id)) {
        anchor_ = symbol;
        anchor_text_ = t.decode_pieces({anchor_});
        pending_.clear();
        shown_ = 0;
    }
    return out;
}

std::string Tokenizer::Stream::finish() {
    std::string out;
    if (!pending_.empty()) {
        const std::string text = window_text();
        out = text.substr(std::min(shown_, text.size()));
    }
    *this = Stream(*tokenizer_);
    return out;
}

std::string Tokenizer::Stream::window_text() const {
    std::vector<std::string> pieces;
    pieces.reserve(pending_.size() + 1);
    if (!anchor_.empty()) pieces.push_back(anchor_);
    pieces.insert(pieces.end(), pending_.begin(), pending_.end());
    const std::string text = tokenizer_->decode_pieces(pieces);
    return anchor_.empty() ? text : text.substr(std::min(anchor_text_.size(), text.size()));
}

std::string Tokenizer::to_json() const {
    internal::Json j = {{"kind", kind_}, {"lowercase", lowercase_}};
    if (kind_ == "sentencepiece") j["model"] = base64_encode(model_);
    return j.dump();
}

Tokenizer Tokenizer::from_json(const std::string& text) {
    const internal::Json j = internal::parse_json(text, kOp);
    check(j.is_object() && j.contains("kind") && j.at("kind").is_string() && j.contains("lowercase") &&
              j.at("lowercase").is_boolean(),
          kOp, "expected {\"kind\": ..., \"lowercase\": ...}, got ", text.substr(0, 200));
    const std::string kind = j.at("kind").get<std::string>();
    const bool lowercase = j.at("lowercase").get<bool>();
    if (kind == "char") return characters(lowercase);
    check(!lowercase, kOp, "only the \"char\" tokenizer lowercases, got a \"", kind, "\" one that does");
    if (kind == "space") return spaces();
    if (kind == "byte") return bytes();
    check(kind == "sentencepiece", kOp, "unknown tokenizer \"", kind, "\" (char, space, byte or sentencepiece)");
    check(j.contains("model") && j.at("model").is_string(), kOp, "a sentencepiece tokenizer without its \"model\"");
    return sentencepiece(base64_decode(j.at("model").get<std::string>()), "the stored SentencePiece model");
}

std::string Tokenizer::describe() const {
    if (kind_ == "char") return lowercase_ ? "char (lowercased)" : "char";
    if (kind_ == "space" || kind_ == "byte") return kind_;
    return "sentencepiece (" + std::to_string(processor_->GetPieceSize()) + " pieces)";
}

std::vector<int64_t> TextSides::encode_source(std::string_view text) const {
    std::vector<int64_t> ids;
    source_tokenizer.each_symbol(text, [&](std::string_view symbol) { ids.push_back(source_vocab.id(symbol)); });
    return ids;
}

std::string TextSides::decode_target(const std::vector<int64_t>& ids) const {
    return target_tokenizer.detokenize(target_vocab.decode(ids));
}

// ---- base64 ----

namespace {

constexpr char kBase64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

}  // namespace

std::string base64_encode(std::string_view bytes) {
    std::string out;
    out.reserve((bytes.size() + 2) / 3 * 4);
    for (size_t i = 0; i < bytes.size(); i += 3) {
        const size_t n = std::min<size_t>(3, bytes.size() - i);
        uint32_t group = 0;
        for (size_t k = 0; k < 3; ++k) group = (group << 8) | (k < n ? static_cast<unsigned char>(bytes[i + k]) : 0u);
        for (size_t k = 0; k < 4; ++k) out += k <= n ? kBase64[(group >> (18 - 6 * k)) & 63] : '=';
    }
    return out;
}

std::string base64_decode(std::string_view text) {
    check(text.size() % 4 == 0, "base64", "a length of ", text.size(), " is not a multiple of 4");
    std::array<int, 256> value;
    value.fill(-1);
    for (int i = 0; i < 64; ++i) value[static_cast<unsigned char>(kBase64[i])] = i;
    std::string out;
    out.reserve(text.size() / 4 * 3);
    for (size_t i = 0; i < text.size(); i += 4) {
        const bool last = i + 4 == text.size();
        const size_t padding = last ? (text[i + 3] == '=') + (text[i + 2] == '=' && text[i + 3] == '=') : 0;
        uint32_t group = 0;
        for (size_t k = 0; k < 4; ++k) {
            const bool pad = k >= 4 - padding;
            const int v = pad ? 0 : value[static_cast<unsigned char>(text[i + k])];
            check(v >= 0, "base64", "an invalid character at ", i + k);
            group = (group << 6) | static_cast<uint32_t>(v);
        }
        for (size_t k = 0; k < 3 - padding; ++k) out += static_cast<char>((group >> (16 - 8 * k)) & 0xFF);
    }
    return out;
}

}  // namespace seqgrad::text
