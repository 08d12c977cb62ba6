// The data a sequence model trains on: vocabularies, the tasks (G2P on CMUdict, as the README's
// "Tasks and data" describes it, and the synthetic copy/reverse/sort tasks), and length-bucketed
// batches.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "seqgrad/core/random.h"
#include "seqgrad/core/tensor.h"

namespace seqgrad::models {

// ---- Vocabulary -------------------------------------------------------------------------------

// Symbols <-> ids. Ids 0..3 are the special tokens of docs/parity.md (<pad>, <s>, </s>, <unk>); the
// data's symbols follow, in byte order when built from data, so the same data gives the same ids.
class Vocabulary {
public:
    static constexpr const char* kSpecials[4] = {"<pad>", "<s>", "</s>", "<unk>"};

    Vocabulary();  // the four special tokens only
    // Sorts and de-duplicates `symbols`. A special token or an empty string among them is an Error.
    static Vocabulary from_symbols(std::vector<std::string> symbols);

    int64_t size() const { return static_cast<int64_t>(symbols_.size()); }
    int64_t id(std::string_view symbol) const;            // kUnk for a symbol not in the vocabulary
    bool contains(std::string_view symbol) const;
    const std::string& symbol(int64_t id) const;          // Error when out of range
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

// ---- Examples and datasets --------------------------------------------------------------------

// One input with every acceptable output: a word and its pronunciations, or a synthetic sequence
// and its one answer. Training reads each (source, reference) pair; evaluation scores a
// prediction against all the references (any-reference WER and PER, metrics.h).
struct Example {
    std::string name;                                  // the headword, or the source's symbols joined
    std::vector<std::string> source;                   // e.g. the word's characters
    std::vector<std::vector<std::string>> references;  // e.g. its pronunciations, in file order
};

struct Dataset {
    std::string task;  // "g2p", "copy", "reverse" or "sort"
    std::vector<Example> train, dev, test;
    // Problems met while reading the data ("path:line: message"), for the caller to show; the
    // lines they name were skipped.
    std::vector<std::string> warnings;
    int64_t skipped_lines = 0;

    const std::vector<Example>& split(std::string_view name) const;  // "train", "dev" or "test"
};

// Vocabularies from the examples' source or target symbols. Build them from the training split:
// a symbol seen only in dev or test then reads as <unk>, as it would for a real new word.
Vocabulary source_vocabulary(const std::vector<Example>& examples);
Vocabulary target_vocabulary(const std::vector<Example>& examples);

// The characters of a UTF-8 string, one string per code point. Invalid UTF-8 is an Error.
std::vector<std::string> utf8_characters(std::string_view text);

// ---- G2P on CMUdict ---------------------------------------------------------------------------

inline constexpr const char* kCmudictPath = "/usr/share/pocketsphinx/model/en-us/cmudict-en-us.dict";

// The 39 ARPAbet phones of CMUdict, without stress, sorted.
const std::vector<std::string>& arpabet_phones();

// Every pronunciation of every headword, grouped by word in order of first appearance.
struct Lexicon {
    std::vector<Example> words;
    std::vector<std::string> warnings;  // "path:line: message", one per skipped line
    int64_t lines = 0;                  // lines in the file
    int64_t skipped_lines = 0;          // lines reported and skipped (blank lines are not counted)
};

// Reads a dictionary strictly: `word PH1 PH2 ...`, one entry a line; `word(2)` is another
// pronunciation of `word`. A line with no phones, a phone outside the 39, a headword that is not
// UTF-8 or a repeated pronunciation is reported with its line number and skipped; blank lines and
// CRLF endings are accepted. An unreadable file, or one with no valid entry, is an Error naming
// the path.
Lexicon read_dictionary(const std::string& path = kCmudictPath);

// "word(2)" -> "word": the headword that all pronunciations of a word share.
std::string_view strip_variant(std::string_view headword);

// FNV-1a, 32 bits (offset basis 0x811C9DC5, prime 0x01000193), over the bytes.
uint32_t fnv1a_32(std::string_view bytes);

enum class Split { train, dev, test };
const char* split_name(Split split);
// The split of a headword: h = fnv1a_32 of the headword with its "(N)" suffix removed;
// h % 100 < 90 train, < 95 dev, else test.
Split g2p_split(std::string_view headword);

// The G2P task: the dictionary read and split by headword.
Dataset g2p_dataset(const std::string& path = kCmudictPath);
Dataset g2p_dataset(Lexicon lexicon);

// ---- Synthetic tasks --------------------------------------------------------------------------

struct SyntheticOptions {
    std::string task = "copy";  // "copy", "reverse" or "sort"
    int64_t vocab_size = 10;    // symbols 'a', 'b', ... (at most 26)
    int64_t min_length = 3;
    int64_t max_length = 10;
    int64_t train_size = 10000;
    int64_t dev_size = 500;
    int64_t test_size = 500;
};

bool is_synthetic_task(std::string_view task);
// Random sources of uniform length and symbols, each with its one answer: the source itself, its
// reverse, or its symbols sorted. The splits are independent draws (short sequences can repeat).
Dataset synthetic_dataset(const SyntheticOptions& options, Generator& gen);

// ---- Batches ----------------------------------------------------------------------------------

// An example as ids: the source, one reference, and which Example it came from.
struct EncodedExample {
    std::vector<int64_t> source;
    std::vector<int64_t> target;  // without <s> and </s>
    int64_t index = 0;            // position of its Example in the split
};

// For training: one per (example, reference) pair, so every pronunciation is learned.
std::vector<EncodedExample> encode_for_training(const std::vector<Example>& examples,
                                                const Vocabulary& source_vocab,
                                                const Vocabulary& target_vocab);
// For evaluation: one per example (target = its first reference, or empty if it has none),
// so each word is decoded once and scored against all its references.
std::vector<EncodedExample> encode_for_evaluation(const std::vector<Example>& examples,
                                                  const Vocabulary& source_vocab,
                                                  const Vocabulary& target_vocab);

struct Batch {
    IntTensor src;                       // [B, S], right-padded with kPad
    IntTensor tgt;                       // [B, T+1]: <s> y1 .. yn </s> then kPad
    std::vector<int64_t> example_index;  // [B]: EncodedExample::index of each row
    int64_t source_tokens = 0;           // real (non-pad) source tokens
    int64_t target_tokens = 0;           // predicted positions: the y's and each </s>
};

struct BatchOptions {
    int64_t max_sentences = 256;  // rows per batch; 0 for no limit
    // Cells in src plus tgt, padding included (B * (S + T + 1)); 0 for no limit. An example
    // larger than this on its own still gets a batch.
    int64_t max_tokens = 0;
    // Examples shuffled together, then sorted by length and cut into batches: large enough that
    // batches hold similar lengths (little padding), small enough that their mix stays random.
    int64_t chunk_size = 16384;  // 0: all examples in one chunk
};

// Builds the batch of the given rows of `examples`. An empty source is an Error.
Batch make_batch(const std::vector<EncodedExample>& examples, const std::vector<int64_t>& rows);

// One training epoch's batches: shuffled, sorted by length within chunks, cut by the limits, then
// the batch order shuffled. Every example is in exactly one batch; the same generator state gives
// the same batches.
std::vector<std::vector<int64_t>> plan_batches(const std::vector<EncodedExample>& examples,
                                               const BatchOptions& options, Generator& gen);
std::vector<Batch> make_batches(const std::vector<EncodedExample>& examples,
                                const BatchOptions& options, Generator& gen);
// Evaluation batches: sorted by length (least padding), no randomness.
std::vector<Batch> make_eval_batches(const std::vector<EncodedExample>& examples,
                                     const BatchOptions& options);

// Where a BatchStream is, for a checkpoint: resuming from it replays the same batches.
struct BatchStreamState {
    int64_t epoch = 0;       // epochs finished
    int64_t next_batch = 0;  // batches of the current epoch already handed out
};

// Training batches, epoch after epoch. Epoch e is planned with a generator seeded from
// (seed, e) alone, so the stream can be restored at any batch without replaying earlier ones.
class BatchStream {
public:
    BatchStream(std::vector<EncodedExample> examples, BatchOptions options, uint64_t seed);

    Batch next();  // moves on to the next epoch after the last batch of this one
    BatchStreamState state() const { return state_; }
    void restore(const BatchStreamState& state);  // Error if next_batch is past the epoch's end
    int64_t batches_in_epoch() const { return static_cast<int64_t>(plan_.size()); }
    int64_t examples() const { return static_cast<int64_t>(examples_.size()); }

private:
    std::vector<EncodedExample> examples_;
    BatchOptions options_;
    uint64_t seed_;
    BatchStreamState state_;
    std::vector<std::vector<int64_t>> plan_;  // the current epoch's batches, as rows
};

}  // namespace seqgrad::models
