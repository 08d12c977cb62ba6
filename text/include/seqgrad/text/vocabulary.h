// Symbols <-> ids for one side of a task, with the special tokens every model shares. The text
// layer's: a checkpoint carries its vocabularies, so that a program using the model needs no
// training to read them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace seqgrad::text {

// The largest vocabulary a file or a corpus may ask for (the models' config keys allow no more).
inline constexpr int64_t kMaxVocabulary = int64_t{1} << 22;

// Symbols <-> ids. Ids 0..3 are the special tokens of docs/parity.md (<pad>, <s>, </s>, <unk>); an
// encoder's vocabulary has its three next (<cls>, <sep>, <mask>: models::kCls, kSep, kMask). The
// data's symbols follow, in byte order when built from data, so the same data gives the same ids.
class Vocabulary {
public:
    static constexpr const char* kSpecials[4] = {"<pad>", "<s>", "</s>", "<unk>"};
    static constexpr const char* kEncoderSpecials[3] = {"<cls>", "<sep>", "<mask>"};

    Vocabulary();  // the four special tokens only
    // Sorts and de-duplicates `symbols`. A special token (an encoder's too, for an encoder's
    // vocabulary) or an empty string among them is an Error.
    static Vocabulary from_symbols(std::vector<std::string> symbols, bool encoder = false);
    // The symbols counted at least `min_count` times and, if max_size > 0, only the max_size most
    // frequent of those (ties: byte order), besides the specials; ids in byte order, as
    // from_symbols gives them.
    static Vocabulary from_counts(const std::vector<std::pair<std::string, int64_t>>& counts, int64_t min_count,
                                  int64_t max_size, bool encoder = false);
    static bool is_special(std::string_view symbol);          // one of the four
    static bool is_encoder_special(std::string_view symbol);  // one of an encoder's three
    // Whether ids 4..6 are an encoder's special tokens.
    bool for_encoder() const;

    int64_t size() const { return static_cast<int64_t>(symbols_.size()); }
    int64_t id(std::string_view symbol) const;  // kUnk for a symbol not in the vocabulary
    bool contains(std::string_view symbol) const;
    const std::string& symbol(int64_t id) const;                          // Error when out of range
    const std::vector<std::string>& symbols() const { return symbols_; }  // by id, specials first

    std::vector<int64_t> encode(const std::vector<std::string>& symbols) const;  // no <s>, </s> added
    // Reads ids up to the first </s>, skipping <pad> and <s>. An <unk> stays as "<unk>": in a
    // prediction it is a wrong symbol and must count as one. An id out of range is an Error.
    std::vector<std::string> decode(const std::vector<int64_t>& ids) const;

    // A JSON array of every symbol in id order, specials included, for checkpoint metadata.
    std::string to_json() const;
    // Validates what it reads: an array of strings, the four specials first, no empty or
    // repeated symbol. The order is kept (ids are the positions), so it need not be sorted.
    static Vocabulary from_json(const std::string& text);

    friend bool operator==(const Vocabulary& a, const Vocabulary& b) { return a.symbols_ == b.symbols_; }

private:
    explicit Vocabulary(std::vector<std::string> symbols);  // checked by the callers
    std::vector<std::string> symbols_;
    std::vector<std::pair<std::string, int64_t>> sorted_ids_;  // for id(): binary search by symbol
};

}  // namespace seqgrad::text
