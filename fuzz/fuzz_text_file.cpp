// Whole text files (plain or gzip, UTF-8 required or not) and the two tokenizers that read any
// text without a model: what read_text_file gives must be the file's bytes (or their gzip
// stream's text), valid UTF-8 when asked, and both tokenizers must give it back exactly.
#include <cstdio>
#include <cstdlib>

#include "fuzz_common.h"
#include "seqgrad/text/tokenizer.h"
#include "seqgrad/text/utf8.h"
#include "seqgrad/training/text_file.h"

namespace {

// A property that must hold for every input; its failure is a finding.
void require(bool holds, const char* what) {
    if (holds) return;
    std::fprintf(stderr, "text_file: %s\n", what);
    std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace seqgrad::training;
    const std::string path = seqgrad_fuzz::as_file(data, size, ".txt");
    const std::string input(reinterpret_cast<const char*>(data), size);
    const bool gzip = size >= 2 && data[0] == 0x1f && data[1] == 0x8b;  // zlib reads anything else as it is

    std::string any_bytes;
    bool read = false;
    seqgrad_fuzz::refused_or_read([&] {
        any_bytes = read_text_file(path, false);
        read = true;
    });
    require(read || gzip, "a plain file was refused without require_utf8");
    require(!read || gzip || any_bytes == input, "a plain file's text is not its bytes");
    if (read) {
        const seqgrad::text::Tokenizer bytes = seqgrad::text::Tokenizer::bytes();
        const std::vector<std::string> symbols = bytes.tokenize(any_bytes);
        require(symbols.size() == any_bytes.size(), "the byte tokenizer gave other than one symbol a byte");
        require(bytes.detokenize(symbols) == any_bytes, "the byte tokenizer did not give back its text");
        // A limit of the text's size reads it; one byte less refuses it.
        require(read_text_file(path, false, any_bytes.size()) == any_bytes, "a limited read gave other text");
        if (!any_bytes.empty()) {
            bool read_limited = false;
            seqgrad_fuzz::refused_or_read([&] {
                (void)read_text_file(path, false, any_bytes.size() - 1);
                read_limited = true;
            });
            require(!read_limited, "a text longer than the limit was read");
        }
    }

    std::string utf8;
    bool read_utf8 = false;
    seqgrad_fuzz::refused_or_read([&] {
        utf8 = read_text_file(path, true);
        read_utf8 = true;
    });
    // The same file is refused with require_utf8 exactly when its text is not UTF-8.
    require(read_utf8 == (read && seqgrad::text::is_utf8(any_bytes)),
            "require_utf8 refused UTF-8 or accepted other text");
    if (read_utf8) {
        require(utf8 == any_bytes, "require_utf8 changed the text");
        const seqgrad::text::Tokenizer characters = seqgrad::text::Tokenizer::characters();
        require(characters.detokenize(characters.tokenize(utf8)) == utf8,
                "the char tokenizer did not give back its text");
    } else if (read) {
        bool tokenized = false;
        seqgrad_fuzz::refused_or_read([&] {
            (void)seqgrad::text::Tokenizer::characters().tokenize(any_bytes);
            tokenized = true;
        });
        require(!tokenized, "the char tokenizer read text that is not UTF-8");
    }
    return 0;
}
