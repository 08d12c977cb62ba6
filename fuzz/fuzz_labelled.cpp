// The reader of labelled texts (plain or gzip lines of `text TAB label` or `text_a TAB text_b TAB
// label`): read as a training file with carved splits, as training and dev at once, with and
// without skip_invalid, and against a fixed label set. What it reads must hold together: sorted
// labels, every id among them, UTF-8 texts that are not empty, a second text for each pair.
#include <cstdio>
#include <cstdlib>

#include "fuzz_common.h"
#include "seqgrad/text/utf8.h"
#include "seqgrad/training/labelled.h"

namespace {

void require(bool holds, const char* what) {
    if (holds) return;
    std::fprintf(stderr, "labelled: %s\n", what);
    std::abort();
}

void require_whole(const seqgrad::training::LabelledTexts& texts, int32_t labels, bool pairs) {
    require(texts.labels.size() == texts.texts.size(), "a text without a label");
    require(texts.second_texts.size() == (pairs ? texts.texts.size() : 0), "second texts do not match the layout");
    for (size_t i = 0; i < texts.texts.size(); ++i) {
        require(texts.labels[i] >= 0 && texts.labels[i] < labels, "a label id outside the label set");
        require(!texts.texts[i].empty() && seqgrad::text::is_utf8(texts.texts[i]), "an empty or invalid text");
        require(!pairs || !texts.second_texts[i].empty(), "an empty second text");
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace seqgrad::training;
    const std::string path = seqgrad_fuzz::as_file(data, size, ".tsv");
    for (const bool skip_invalid : {false, true})
        for (const bool dev : {false, true})
            seqgrad_fuzz::refused_or_read([&] {
                const LabelledData d = read_labelled({path, dev ? path : "", "", skip_invalid});
                const std::vector<std::string>& names = d.labels.names();
                require(names.size() >= 2, "fewer than two labels were accepted");
                for (size_t i = 1; i < names.size(); ++i) require(names[i - 1] < names[i], "labels out of order");
                for (const LabelledTexts* split : {&d.train, &d.dev, &d.test})
                    require_whole(*split, d.labels.size(), d.pairs);
                require(!dev || d.dev.size() == d.train.size(), "dev read from the same file differs");
            });
    const LabelSet labels({"neg", "pos"});
    for (const int fields : {0, 2, 3})
        seqgrad_fuzz::refused_or_read([&] {
            const LabelledTexts texts = read_labelled_file(path, labels, fields, true);
            require_whole(texts, labels.size(), !texts.second_texts.empty() || fields == 3);
        });
    return 0;
}
