// How one side of a corpus turns text into symbols and back:
//   "char"           Unicode code points (the default): "ship" -> s h i p
//   "space"          symbols separated by whitespace, e.g. phones or words: "SH IH P" -> SH IH P
//   "byte"           bytes, of any text, UTF-8 or not: "añ\r\n" -> a <0xC3> <0xB1> <0x0D> \n. Printable
//                    ASCII, '\n' and '\t' are themselves; any other byte is <0xNN>, as SentencePiece
//                    writes byte pieces, so that every symbol is a string a vocabulary's JSON holds
//   "sentencepiece"  subword pieces of a SentencePiece model (Kudo and Richardson, 2018), trained
//                    on the training side (unigram or BPE) or loaded from a .model file
// A tokenizer travels inside a checkpoint (to_json, with a SentencePiece model's bytes), so that
// a checkpoint alone turns raw text into raw text: the tokenizers are the text layer's, what a
// program that uses a model needs beside it, below both training and inference.
//
// Detokenization is exact: detokenize(tokenize(text)) == text for "char" (lowercasing aside), for
// "byte" (whatever the bytes) and for SentencePiece models trained here (identity normalisation,
// whitespace kept); "space" joins symbols with one space, so it gives back text whose symbols were
// separated by single spaces.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "seqgrad/text/vocabulary.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace seqgrad::text {

// How to train a SentencePiece model on one side of the training data.
struct SentencePieceOptions {
    std::string model_type = "unigram";  // or "bpe"
    int64_t vocab_size = 8000;
    uint64_t seed = 1;  // SentencePiece's sampling of sentences and pieces
    int64_t threads = 1;
    // Characters the model lacks become their UTF-8 bytes as pieces <0x00> ... <0xFF>, not <unk>.
    bool byte_fallback = false;
};

class Tokenizer {
public:
    Tokenizer();  // "char"
    // Code points; with `lowercase`, ASCII A-Z are read as a-z first (the G2P task's source side).
    static Tokenizer characters(bool lowercase = false);
    static Tokenizer spaces();
    static Tokenizer bytes();
    // A SentencePiece model from its serialized bytes (a .model file's contents). Error naming
    // `origin` if they do not load.
    static Tokenizer sentencepiece(std::string model_bytes, const std::string& origin = "a SentencePiece model");
    static Tokenizer load_sentencepiece(const std::string& path);
    // Trains a model on the texts `next` hands out (it returns false after the last), with
    // identity normalisation and whitespace kept, so that detokenization is exact.
    static Tokenizer train_sentencepiece(const std::function<bool(std::string&)>& next,
                                         const SentencePieceOptions& options);

    const std::string& kind() const { return kind_; }  // "char", "space", "byte" or "sentencepiece"
    bool lowercase() const { return lowercase_; }

    // Calls `symbol` for each symbol of `text`, in order. The views live until the call returns.
    // Invalid UTF-8 is an Error, but for "byte".
    void each_symbol(std::string_view text, const std::function<void(std::string_view)>& symbol) const;
    std::vector<std::string> tokenize(std::string_view text) const;
    // For "byte", a symbol that is neither one byte nor <0xNN> (a special token such as "<unk>")
    // comes back as it is written.
    std::string detokenize(const std::vector<std::string>& symbols) const;

    // The text of symbols as they come, one at a time (a generator's output, shown as it is made):
    // the strings add() and finish() return, joined, are detokenize() of every symbol added, and
    // each call decodes a few symbols, not all of them so far. For SentencePiece a symbol's text can
    // depend on the ones before it (the first word's leading space, byte pieces that make one
    // character together): add() decodes the symbols since the last normal piece, after that
    // piece, and holds back byte pieces until a character's bytes end.
    class Stream {
    public:
        explicit Stream(const Tokenizer& tokenizer) : tokenizer_(&tokenizer) {}
        std::string add(const std::string& symbol);
        std::string finish();  // what add() held back, if anything; the stream then starts over

    private:
        std::string window_text() const;  // the text of pending_, after anchor_
        const Tokenizer* tokenizer_;
        size_t added_ = 0;                  // symbols so far ("space": whether to join with ' ')
        std::string anchor_, anchor_text_;  // SentencePiece: the last normal piece, and its text alone
        std::vector<std::string> pending_;  // SentencePiece: the symbols since anchor_
        size_t shown_ = 0;                  // of window_text(), the bytes returned already
    };

    // {"kind": ..., "lowercase": ..., "model": base64 of a SentencePiece model's bytes}
    std::string to_json() const;
    static Tokenizer from_json(const std::string& text);  // Error for anything but to_json's form
    std::string describe() const;  // "char", "space", "byte", "sentencepiece (unigram, 8000 pieces)"

    friend bool operator==(const Tokenizer& a, const Tokenizer& b) {
        return a.kind_ == b.kind_ && a.lowercase_ == b.lowercase_ && a.model_ == b.model_;
    }

private:
    std::string decode_pieces(const std::vector<std::string>& pieces) const;  // SentencePiece's text of them

    std::string kind_ = "char";
    bool lowercase_ = false;
    std::string model_;  // a SentencePiece model's bytes
    std::shared_ptr<const sentencepiece::SentencePieceProcessor> processor_;
};

// What turns text into a model's ids and back: each side's tokenizer and vocabulary.
struct TextSides {
    Tokenizer source_tokenizer, target_tokenizer;
    Vocabulary source_vocab, target_vocab;
    // A classifier's classes: each class id's label (an encoder trained to classify); empty
    // otherwise.
    std::vector<std::string> labels;

    // The ids of a source text (no <s> or </s>); unknown symbols are <unk>.
    std::vector<int64_t> encode_source(std::string_view text) const;
    // The text of target ids, up to the first </s>.
    std::string decode_target(const std::vector<int64_t>& ids) const;
};

// Base64 (RFC 4648, with padding), for bytes in JSON metadata.
std::string base64_encode(std::string_view bytes);
std::string base64_decode(std::string_view text);  // Error for anything but base64

}  // namespace seqgrad::text
