// The corpus readers and the data pipeline: lines (plain or gzip), pairs, both tokenizers that need
// no model, vocabularies from counts, encoding; and the vocabulary and tokenizer JSON that
// checkpoints carry.
#include "fuzz_common.h"
#include "seqgrad/text/tokenizer.h"
#include "seqgrad/text/vocabulary.h"
#include "seqgrad/training/data.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace seqgrad::training;
    const std::string path = seqgrad_fuzz::as_file(data, size, ".tsv");
    for (const bool skip_invalid : {false, true}) {
        TrainingOptions options;
        options.task = "corpus";
        options.train_files = {path};
        options.tgt_tokens = skip_invalid ? "space" : "char";
        options.skip_invalid = skip_invalid;
        options.max_steps = 1;
        DataRequest request;
        request.test = true;
        request.max_source_length = 64;
        seqgrad_fuzz::refused_or_read([&] {
            PairData d = prepare_pairs(options, request);
            BatchStream stream(std::move(d.train), options.batches, 1);
            (void)stream.next();
        });
    }
    seqgrad_fuzz::refused_or_read([&] {
        (void)read_examples({path, path}, seqgrad::text::Tokenizer::characters(), seqgrad::text::Tokenizer::spaces());
    });
    const std::string text(reinterpret_cast<const char*>(data), size);
    seqgrad_fuzz::refused_or_read([&] { (void)seqgrad::text::Vocabulary::from_json(text); });
    seqgrad_fuzz::refused_or_read([&] {
        const seqgrad::text::Tokenizer t = seqgrad::text::Tokenizer::from_json(text);
        (void)t.detokenize(t.tokenize("some text, 42"));
    });
    return 0;
}
