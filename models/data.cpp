// Vocabularies, the G2P and synthetic tasks, and length-bucketed batches (see data.h, which states
// the G2P reading and split rules that this file follows).
#include "seqgrad/models/data.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <unordered_set>

#include "seqgrad/core/error.h"
#include "seqgrad/models/model.h"

namespace seqgrad::models {

// ---- Vocabulary -------------------------------------------------------------------------------

Vocabulary::Vocabulary() : Vocabulary(std::vector<std::string>(std::begin(kSpecials), std::end(kSpecials))) {}

Vocabulary::Vocabulary(std::vector<std::string> symbols) : symbols_(std::move(symbols)) {
    sorted_ids_.reserve(symbols_.size());
    for (size_t i = 0; i < symbols_.size(); ++i) sorted_ids_.emplace_back(symbols_[i], static_cast<int64_t>(i));
    std::sort(sorted_ids_.begin(), sorted_ids_.end());
}

namespace {

bool is_special(std::string_view symbol) {
    return std::find(std::begin(Vocabulary::kSpecials), std::end(Vocabulary::kSpecials), symbol) !=
           std::end(Vocabulary::kSpecials);
}

}  // namespace

Vocabulary Vocabulary::from_symbols(std::vector<std::string> symbols) {
    std::sort(symbols.begin(), symbols.end());
    symbols.erase(std::unique(symbols.begin(), symbols.end()), symbols.end());
    std::vector<std::string> all(std::begin(kSpecials), std::end(kSpecials));
    for (std::string& symbol : symbols) {
        check(!symbol.empty(), "Vocabulary", "an empty symbol");
        check(!is_special(symbol), "Vocabulary", "the data uses the special token ", symbol, " as a symbol");
        all.push_back(std::move(symbol));
    }
    return Vocabulary(std::move(all));
}

int64_t Vocabulary::id(std::string_view symbol) const {
    const auto it = std::lower_bound(sorted_ids_.begin(), sorted_ids_.end(), symbol,
                                     [](const auto& entry, std::string_view s) { return entry.first < s; });
    return it != sorted_ids_.end() && it->first == symbol ? it->second : kUnk;
}

bool Vocabulary::contains(std::string_view symbol) const {
    return id(symbol) != kUnk || symbol == kSpecials[kUnk];
}

const std::string& Vocabulary::symbol(int64_t id) const {
    check(id >= 0 && id < size(), "Vocabulary::symbol", "id ", id, " is out of range for a vocabulary of ",
          size(), " symbols");
    return symbols_[static_cast<size_t>(id)];
}

std::vector<int64_t> Vocabulary::encode(const std::vector<std::string>& symbols) const {
    std::vector<int64_t> ids;
    ids.reserve(symbols.size());
    for (const std::string& s : symbols) ids.push_back(id(s));
    return ids;
}

std::vector<std::string> Vocabulary::decode(const std::vector<int64_t>& ids) const {
    std::vector<std::string> symbols;
    for (int64_t id : ids) {
        if (id == kEos) break;
        if (id == kPad || id == kSos) continue;
        symbols.push_back(symbol(id));
    }
    return symbols;
}

std::string Vocabulary::to_json() const { return nlohmann::json(symbols_).dump(); }

Vocabulary Vocabulary::from_json(const std::string& text) {
    const char* op = "Vocabulary::from_json";
    nlohmann::json parsed;
    try {
        parsed = nlohmann::json::parse(text);
    } catch (const nlohmann::json::parse_error& e) {
        throw Error(detail::concat(op, ": not valid JSON (", e.what(), ")"));
    }
    check(parsed.is_array(), op, "expected a JSON array of symbols");
    check(parsed.size() >= 4, op, "expected the four special tokens first, got ", parsed.size(), " symbols");
    std::vector<std::string> symbols;
    std::unordered_set<std::string> seen;
    for (size_t i = 0; i < parsed.size(); ++i) {
        check(parsed[i].is_string(), op, "symbol ", i, " is not a string");
        std::string symbol = parsed[i].get<std::string>();
        if (i < 4) {
            check(symbol == kSpecials[i], op, "id ", i, " must be ", kSpecials[i], ", got \"", symbol, "\"");
        } else {
            check(!symbol.empty(), op, "symbol ", i, " is empty");
            check(!is_special(symbol), op, "symbol ", i, " repeats the special token ", symbol);
        }
        check(seen.insert(symbol).second, op, "symbol \"", symbol, "\" appears twice");
        symbols.push_back(std::move(symbol));
    }
    return Vocabulary(std::move(symbols));
}

// ---- Examples and datasets --------------------------------------------------------------------

const std::vector<Example>& Dataset::split(std::string_view name) const {
    if (name == "train") return train;
    if (name == "dev") return dev;
    if (name == "test") return test;
    throw Error(detail::concat("Dataset::split: unknown split \"", name, "\" (train, dev or test)"));
}

Vocabulary source_vocabulary(const std::vector<Example>& examples) {
    std::unordered_set<std::string> symbols;
    for (const Example& e : examples) symbols.insert(e.source.begin(), e.source.end());
    return Vocabulary::from_symbols({symbols.begin(), symbols.end()});
}

Vocabulary target_vocabulary(const std::vector<Example>& examples) {
    std::unordered_set<std::string> symbols;
    for (const Example& e : examples)
        for (const auto& reference : e.references) symbols.insert(reference.begin(), reference.end());
    return Vocabulary::from_symbols({symbols.begin(), symbols.end()});
}

namespace {

// The byte length of the UTF-8 code point that starts at text[at], or 0 if it is not valid
// (a stray continuation byte, a truncated sequence, an overlong form, a surrogate, > U+10FFFF).
size_t utf8_length(std::string_view text, size_t at) {
    const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
    const unsigned char lead = byte(at);
    if (lead < 0x80) return 1;
    size_t length;
    uint32_t code;
    if ((lead & 0xE0) == 0xC0) length = 2, code = lead & 0x1F;
    else if ((lead & 0xF0) == 0xE0) length = 3, code = lead & 0x0F;
    else if ((lead & 0xF8) == 0xF0) length = 4, code = lead & 0x07;
    else return 0;
    if (at + length > text.size()) return 0;
    for (size_t i = 1; i < length; ++i) {
        if ((byte(at + i) & 0xC0) != 0x80) return 0;
        code = (code << 6) | (byte(at + i) & 0x3F);
    }
    static constexpr uint32_t kSmallest[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (code < kSmallest[length] || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) return 0;
    return length;
}

bool is_utf8(std::string_view text) {
    for (size_t at = 0; at < text.size();) {
        const size_t length = utf8_length(text, at);
        if (length == 0) return false;
        at += length;
    }
    return true;
}

// Text for a message: control bytes (and every non-ASCII byte, if the text is not UTF-8) as \xNN,
// so a corrupt line cannot garble the terminal it is reported on.
std::string printable(std::string_view text) {
    const bool utf8 = is_utf8(text);
    std::string out;
    for (const char c : text) {
        const auto b = static_cast<unsigned char>(c);
        if (b < 0x20 || b == 0x7F || (b >= 0x80 && !utf8)) {
            char escaped[5];
            std::snprintf(escaped, sizeof escaped, "\\x%02X", b);
            out += escaped;
        } else {
            out += c;
        }
    }
    return out;
}

}  // namespace

std::vector<std::string> utf8_characters(std::string_view text) {
    std::vector<std::string> characters;
    for (size_t at = 0; at < text.size();) {
        const size_t length = utf8_length(text, at);
        if (length == 0)  // not check(): its message would be built for every valid string too
            throw Error(detail::concat("utf8_characters: \"", printable(text), "\" is not valid UTF-8 (byte ", at, ")"));
        characters.emplace_back(text.substr(at, length));
        at += length;
    }
    return characters;
}

// ---- G2P on CMUdict ---------------------------------------------------------------------------

const std::vector<std::string>& arpabet_phones() {
    static const std::vector<std::string> phones = {
        "AA", "AE", "AH", "AO", "AW", "AY", "B",  "CH", "D",  "DH", "EH", "ER", "EY",
        "F",  "G",  "HH", "IH", "IY", "JH", "K",  "L",  "M",  "N",  "NG", "OW", "OY",
        "P",  "R",  "S",  "SH", "T",  "TH", "UH", "UW", "V",  "W",  "Y",  "Z",  "ZH"};
    return phones;
}

std::string_view strip_variant(std::string_view headword) {
    // Only "(digits)" after a non-empty word is a variant mark; "(x)" or "(2)" alone is kept.
    if (headword.size() < 4 || headword.back() != ')') return headword;
    const size_t open = headword.rfind('(');
    if (open == std::string_view::npos || open == 0 || open + 2 >= headword.size()) return headword;
    for (size_t i = open + 1; i + 1 < headword.size(); ++i)
        if (headword[i] < '0' || headword[i] > '9') return headword;
    return headword.substr(0, open);
}

uint32_t fnv1a_32(std::string_view bytes) {
    uint32_t hash = 0x811C9DC5u;
    for (const char c : bytes) {
        hash ^= static_cast<unsigned char>(c);
        hash *= 0x01000193u;
    }
    return hash;
}

const char* split_name(Split split) {
    switch (split) {
        case Split::train: return "train";
        case Split::dev: return "dev";
        case Split::test: return "test";
    }
    return "?";
}

Split g2p_split(std::string_view headword) {
    const uint32_t bucket = fnv1a_32(strip_variant(headword)) % 100;
    if (bucket < 90) return Split::train;
    if (bucket < 95) return Split::dev;
    return Split::test;
}

namespace {

// The whole file, or an Error naming the path and the system's reason.
std::string read_file(const std::string& path) {
    std::FILE* file = std::fopen(path.c_str(), "rb");
    if (file == nullptr) throw Error(detail::concat(path, ": cannot open: ", std::strerror(errno)));
    std::string text;
    char buffer[1 << 16];
    size_t got;
    while ((got = std::fread(buffer, 1, sizeof buffer, file)) > 0) text.append(buffer, got);
    const bool failed = std::ferror(file) != 0;
    const int reason = errno;
    std::fclose(file);
    if (failed) throw Error(detail::concat(path, ": cannot read: ", std::strerror(reason)));
    return text;
}

// The fields of a line, split on spaces and tabs, into `fields` (reused from line to line).
void split_fields(std::string_view line, std::vector<std::string_view>& fields) {
    fields.clear();
    size_t at = 0;
    while (at < line.size()) {
        while (at < line.size() && (line[at] == ' ' || line[at] == '\t')) ++at;
        const size_t start = at;
        while (at < line.size() && line[at] != ' ' && line[at] != '\t') ++at;
        if (at > start) fields.push_back(line.substr(start, at - start));
    }
}

bool is_arpabet_phone(std::string_view phone) {
    // 39 sorted short strings: a binary search is all it takes.
    const std::vector<std::string>& phones = arpabet_phones();
    return std::binary_search(phones.begin(), phones.end(), phone, std::less<>());
}

// Why a phone is not one of the 39, with a hint where one is likely.
std::string unknown_phone_message(std::string_view phone) {
    std::string message = "'" + printable(phone) + "' is not one of the 39 ARPAbet phones";
    if (phone.size() > 1 && phone.back() >= '0' && phone.back() <= '2' &&
        is_arpabet_phone(phone.substr(0, phone.size() - 1)))
        message += " (it carries a stress mark; this reader expects phones without stress)";
    return message;
}

}  // namespace

Lexicon read_dictionary(const std::string& path) {
    const std::string text = read_file(path);

    Lexicon lexicon;
    std::unordered_map<std::string, size_t> word_index;  // base headword -> position in words
    const auto estimated_lines = static_cast<size_t>(std::count(text.begin(), text.end(), '\n')) + 1;
    word_index.reserve(estimated_lines);
    lexicon.words.reserve(estimated_lines);
    const auto skip = [&](int64_t line_number, const std::string& message) {
        lexicon.warnings.push_back(detail::concat(path, ":", line_number, ": ", message));
        ++lexicon.skipped_lines;
    };

    std::vector<std::string_view> fields;
    for (size_t start = 0; start < text.size();) {
        size_t end = text.find('\n', start);
        if (end == std::string::npos) end = text.size();
        std::string_view line(text.data() + start, end - start);
        start = end + 1;
        const int64_t line_number = ++lexicon.lines;
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);  // CRLF endings

        split_fields(line, fields);
        if (fields.empty()) continue;  // a blank line is no entry, and no mistake
        const std::string_view headword = fields[0];
        const std::string_view word = strip_variant(headword);
        if (fields.size() == 1) {
            skip(line_number, "no phones for '" + printable(headword) + "'");
            continue;
        }
        if (!is_utf8(word)) {
            skip(line_number, "headword '" + printable(headword) + "' is not valid UTF-8");
            continue;
        }
        std::vector<std::string> pronunciation;
        pronunciation.reserve(fields.size() - 1);
        std::string bad_phones;
        for (size_t i = 1; i < fields.size(); ++i) {
            if (is_arpabet_phone(fields[i])) {
                pronunciation.emplace_back(fields[i]);
            } else {
                bad_phones += (bad_phones.empty() ? "" : "; ") + unknown_phone_message(fields[i]);
            }
        }
        if (!bad_phones.empty()) {
            skip(line_number, "in '" + printable(headword) + "': " + bad_phones);
            continue;
        }

        const auto [it, is_new] = word_index.try_emplace(std::string(word), lexicon.words.size());
        if (is_new) {
            lexicon.words.push_back(Example{std::string(word), utf8_characters(word), {}});
        }
        Example& entry = lexicon.words[it->second];
        if (std::find(entry.references.begin(), entry.references.end(), pronunciation) != entry.references.end()) {
            skip(line_number, "'" + printable(headword) + "' repeats a pronunciation of '" + printable(word) + "'");
            continue;
        }
        entry.references.push_back(std::move(pronunciation));
    }

    if (lexicon.words.empty()) {
        std::string first_problems;
        for (size_t i = 0; i < std::min<size_t>(3, lexicon.warnings.size()); ++i) first_problems += "\n  " + lexicon.warnings[i];
        throw Error(detail::concat(path, ": no valid entries (", lexicon.lines, " lines, ", lexicon.skipped_lines,
                                   " skipped)", first_problems.empty() ? "" : "; the first problems:", first_problems));
    }
    return lexicon;
}

Dataset g2p_dataset(Lexicon lexicon) {
    Dataset dataset;
    dataset.task = "g2p";
    for (Example& word : lexicon.words) {
        switch (g2p_split(word.name)) {
            case Split::train: dataset.train.push_back(std::move(word)); break;
            case Split::dev: dataset.dev.push_back(std::move(word)); break;
            case Split::test: dataset.test.push_back(std::move(word)); break;
        }
    }
    dataset.warnings = std::move(lexicon.warnings);
    dataset.skipped_lines = lexicon.skipped_lines;
    return dataset;
}

Dataset g2p_dataset(const std::string& path) { return g2p_dataset(read_dictionary(path)); }

// ---- Synthetic tasks --------------------------------------------------------------------------

bool is_synthetic_task(std::string_view task) { return task == "copy" || task == "reverse" || task == "sort"; }

Dataset synthetic_dataset(const SyntheticOptions& options, Generator& gen) {
    const char* op = "synthetic_dataset";
    check(is_synthetic_task(options.task), op, "unknown task \"", options.task, "\" (copy, reverse or sort)");
    check(options.vocab_size >= 1 && options.vocab_size <= 26, op, "vocab_size must be in 1..26, got ",
          options.vocab_size);
    check(options.min_length >= 1 && options.min_length <= options.max_length, op,
          "lengths must satisfy 1 <= min_length <= max_length, got ", options.min_length, "..", options.max_length);
    check(options.train_size >= 0 && options.dev_size >= 0 && options.test_size >= 0, op,
          "split sizes must not be negative");

    const auto make_split = [&](int64_t size) {
        std::vector<Example> examples;
        examples.reserve(static_cast<size_t>(size));
        const auto lengths = static_cast<uint64_t>(options.max_length - options.min_length + 1);
        for (int64_t n = 0; n < size; ++n) {
            const int64_t length = options.min_length + static_cast<int64_t>(gen.below(lengths));
            Example example;
            for (int64_t i = 0; i < length; ++i) {
                const char symbol = static_cast<char>('a' + gen.below(static_cast<uint64_t>(options.vocab_size)));
                example.name += symbol;
                example.source.emplace_back(1, symbol);
            }
            std::vector<std::string> answer = example.source;
            if (options.task == "reverse") std::reverse(answer.begin(), answer.end());
            if (options.task == "sort") std::sort(answer.begin(), answer.end());
            example.references.push_back(std::move(answer));
            examples.push_back(std::move(example));
        }
        return examples;
    };
    Dataset dataset;
    dataset.task = options.task;
    dataset.train = make_split(options.train_size);
    dataset.dev = make_split(options.dev_size);
    dataset.test = make_split(options.test_size);
    return dataset;
}

// ---- Batches ----------------------------------------------------------------------------------

std::vector<EncodedExample> encode_for_training(const std::vector<Example>& examples,
                                                const Vocabulary& source_vocab,
                                                const Vocabulary& target_vocab) {
    std::vector<EncodedExample> encoded;
    encoded.reserve(examples.size());
    for (size_t i = 0; i < examples.size(); ++i) {
        const std::vector<int64_t> source = source_vocab.encode(examples[i].source);
        for (const auto& reference : examples[i].references)
            encoded.push_back({source, target_vocab.encode(reference), static_cast<int64_t>(i)});
    }
    return encoded;
}

std::vector<EncodedExample> encode_for_evaluation(const std::vector<Example>& examples,
                                                  const Vocabulary& source_vocab,
                                                  const Vocabulary& target_vocab) {
    std::vector<EncodedExample> encoded;
    encoded.reserve(examples.size());
    for (size_t i = 0; i < examples.size(); ++i) {
        const Example& e = examples[i];
        encoded.push_back({source_vocab.encode(e.source),
                           e.references.empty() ? std::vector<int64_t>{} : target_vocab.encode(e.references[0]),
                           static_cast<int64_t>(i)});
    }
    return encoded;
}

Batch make_batch(const std::vector<EncodedExample>& examples, const std::vector<int64_t>& rows) {
    check(!rows.empty(), "make_batch", "a batch needs at least one example");
    size_t source_length = 0, target_length = 0;
    for (int64_t row : rows) {
        check(row >= 0 && row < static_cast<int64_t>(examples.size()), "make_batch", "row ", row,
              " is out of range for ", examples.size(), " examples");
        const EncodedExample& e = examples[static_cast<size_t>(row)];
        check(!e.source.empty(), "make_batch", "example ", e.index, " has an empty source");
        source_length = std::max(source_length, e.source.size());
        target_length = std::max(target_length, e.target.size());
    }
    const auto batch_size = static_cast<int64_t>(rows.size());
    const auto S = static_cast<int64_t>(source_length);
    const auto T1 = static_cast<int64_t>(target_length) + 2;  // <s> y </s>

    Batch batch;
    batch.src = IntTensor::full({batch_size, S}, kPad);
    batch.tgt = IntTensor::full({batch_size, T1}, kPad);
    for (int64_t b = 0; b < batch_size; ++b) {
        const EncodedExample& e = examples[static_cast<size_t>(rows[static_cast<size_t>(b)])];
        std::copy(e.source.begin(), e.source.end(), batch.src.data() + b * S);
        int64_t* tgt = batch.tgt.data() + b * T1;
        tgt[0] = kSos;
        std::copy(e.target.begin(), e.target.end(), tgt + 1);
        tgt[e.target.size() + 1] = kEos;
        batch.example_index.push_back(e.index);
        batch.source_tokens += static_cast<int64_t>(e.source.size());
        batch.target_tokens += static_cast<int64_t>(e.target.size()) + 1;
    }
    return batch;
}

namespace {

void check_options(const BatchOptions& options) {
    check(options.max_sentences >= 0 && options.max_tokens >= 0 && options.chunk_size >= 0, "BatchOptions",
          "limits must not be negative (0 means no limit)");
}

// Sorts `order` by source then target length (stable: equal lengths keep their order, which is
// random in training and the examples' order in evaluation).
void sort_by_length(const std::vector<EncodedExample>& examples, std::vector<int64_t>::iterator first,
                    std::vector<int64_t>::iterator last) {
    std::stable_sort(first, last, [&](int64_t a, int64_t b) {
        const EncodedExample& x = examples[static_cast<size_t>(a)];
        const EncodedExample& y = examples[static_cast<size_t>(b)];
        if (x.source.size() != y.source.size()) return x.source.size() < y.source.size();
        return x.target.size() < y.target.size();
    });
}

// Cuts `order` into consecutive batches, each as large as the limits allow.
void cut_batches(const std::vector<EncodedExample>& examples, std::vector<int64_t>::const_iterator first,
                 std::vector<int64_t>::const_iterator last, const BatchOptions& options,
                 std::vector<std::vector<int64_t>>& batches) {
    std::vector<int64_t> rows;
    size_t source_length = 0, target_cells = 0;  // of the batch being filled
    for (auto it = first; it != last; ++it) {
        const EncodedExample& e = examples[static_cast<size_t>(*it)];
        const size_t new_source = std::max(source_length, e.source.size());
        const size_t new_target = std::max(target_cells, e.target.size() + 2);
        const auto new_rows = static_cast<int64_t>(rows.size()) + 1;
        const bool too_many = options.max_sentences > 0 && new_rows > options.max_sentences;
        const bool too_large =
            options.max_tokens > 0 && new_rows * static_cast<int64_t>(new_source + new_target) > options.max_tokens;
        if (!rows.empty() && (too_many || too_large)) {
            batches.push_back(std::move(rows));
            rows.clear();
            source_length = e.source.size();
            target_cells = e.target.size() + 2;
        } else {
            source_length = new_source;
            target_cells = new_target;
        }
        rows.push_back(*it);
    }
    if (!rows.empty()) batches.push_back(std::move(rows));
}

template <typename T>
void shuffle(std::vector<T>& items, Generator& gen) {  // Fisher-Yates, with seqgrad's generator
    for (size_t i = items.size(); i > 1; --i) std::swap(items[i - 1], items[gen.below(i)]);
}

}  // namespace

std::vector<std::vector<int64_t>> plan_batches(const std::vector<EncodedExample>& examples,
                                               const BatchOptions& options, Generator& gen) {
    check_options(options);
    std::vector<int64_t> order(examples.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
    shuffle(order, gen);

    const size_t chunk = options.chunk_size > 0 ? static_cast<size_t>(options.chunk_size) : order.size();
    std::vector<std::vector<int64_t>> batches;
    for (size_t start = 0; start < order.size(); start += chunk) {
        const auto first = order.begin() + static_cast<std::ptrdiff_t>(start);
        const auto last = order.begin() + static_cast<std::ptrdiff_t>(std::min(start + chunk, order.size()));
        sort_by_length(examples, first, last);
        cut_batches(examples, first, last, options, batches);
    }
    shuffle(batches, gen);
    return batches;
}

std::vector<Batch> make_batches(const std::vector<EncodedExample>& examples, const BatchOptions& options,
                                Generator& gen) {
    std::vector<Batch> batches;
    for (const auto& rows : plan_batches(examples, options, gen)) batches.push_back(make_batch(examples, rows));
    return batches;
}

std::vector<Batch> make_eval_batches(const std::vector<EncodedExample>& examples, const BatchOptions& options) {
    check_options(options);
    std::vector<int64_t> order(examples.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
    sort_by_length(examples, order.begin(), order.end());
    std::vector<std::vector<int64_t>> plan;
    cut_batches(examples, order.begin(), order.end(), options, plan);
    std::vector<Batch> batches;
    for (const auto& rows : plan) batches.push_back(make_batch(examples, rows));
    return batches;
}

namespace {

// splitmix64's finaliser: a well-mixed 64-bit hash of a 64-bit value.
uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

// Epoch e's batches, from (seed, e) alone.
std::vector<std::vector<int64_t>> plan_epoch(const std::vector<EncodedExample>& examples,
                                             const BatchOptions& options, uint64_t seed, int64_t epoch) {
    Generator gen(mix64(seed ^ mix64(0x9E3779B97F4A7C15ULL + static_cast<uint64_t>(epoch))));
    return plan_batches(examples, options, gen);
}

}  // namespace

BatchStream::BatchStream(std::vector<EncodedExample> examples, BatchOptions options, uint64_t seed)
    : examples_(std::move(examples)), options_(options), seed_(seed) {
    check(!examples_.empty(), "BatchStream", "no examples to batch");
    plan_ = plan_epoch(examples_, options_, seed_, 0);
}

Batch BatchStream::next() {
    Batch batch = make_batch(examples_, plan_[static_cast<size_t>(state_.next_batch)]);
    // Moving on as soon as an epoch's last batch is out makes state().epoch the epochs finished.
    if (++state_.next_batch == batches_in_epoch()) {
        ++state_.epoch;
        state_.next_batch = 0;
        plan_ = plan_epoch(examples_, options_, seed_, state_.epoch);
    }
    return batch;
}

void BatchStream::restore(const BatchStreamState& state) {
    check(state.epoch >= 0 && state.next_batch >= 0, "BatchStream::restore", "a negative position");
    std::vector<std::vector<int64_t>> plan = plan_epoch(examples_, options_, seed_, state.epoch);
    check(state.next_batch < static_cast<int64_t>(plan.size()), "BatchStream::restore", "batch ", state.next_batch,
          " is past the end of epoch ", state.epoch, " (", plan.size(), " batches)");
    state_ = state;
    plan_ = std::move(plan);
}

}  // namespace seqgrad::models
