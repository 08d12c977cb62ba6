// An encoder's checkpoint used from a program: a classifier's labels for texts, and a masked
// language model's guesses for the masks of a text.
//
//   seqgrad::inference::TextClassifier classifier("runs/bert-langid");   // a checkpoint directory or file
//   for (const auto& labels : classifier.classify({"Guten Morgen", "Buenos días"}, 2))
//       std::cout << labels[0].label << " " << labels[0].probability << "\n";   // de 0.98 ...
//
//   seqgrad::inference::MaskFiller filler("runs/shakespeare-mlm");
//   for (const auto& guesses : filler.fill("The <mask>ing of Denmark", 5))   // one list per <mask>
//       std::cout << guesses[0].token << " " << guesses[0].probability << "\n";
//
// Texts are read as the model was trained on them (text/encoder_input.h): `<cls> text <sep>`, and
// a pair of texts (a tab between the two) as `<cls> a <sep> b <sep>`, cut to the model's longest
// row. Texts are classified in batches of similar lengths; each call is independent of the others.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "seqgrad/core/precision.h"
#include "seqgrad/text/model_file.h"

namespace seqgrad::inference {

struct LabelScore {
    std::string label;
    float probability = 0;
};

// An encoder's weights made ready for products in `precision`: float32 leaves them as trained (on
// sgemm: an encoder's products have a row per position of every text, where packed float32 gains
// nothing); int8 and bf16 pack them as the Translator does (Module::pack_weights: int8 needs a
// build with oneDNN, bf16 a CPU with bfloat16 instructions; refused otherwise). TextClassifier and
// MaskFiller below take a precision (float32 by default) and do this; so does `seqgrad eval`.
void prepare_encoder_weights(text::LoadedModel& loaded, Precision precision);

class TextClassifier {
public:
    // Error if the checkpoint is not a classifier's (an encoder trained with labels).
    explicit TextClassifier(const std::string& checkpoint, Precision precision = Precision::float32);
    // A checkpoint already read.
    explicit TextClassifier(text::LoadedModel loaded, Precision precision = Precision::float32);

    // For each text, its `top_k` most likely labels (1 to the number of classes), most likely first.
    // A text with a tab is a pair: the text before it and the text after it. Errors: an empty text,
    // invalid UTF-8, top_k out of range.
    std::vector<std::vector<LabelScore>> classify(const std::vector<std::string>& texts, int64_t top_k = 1) const;

    const std::vector<std::string>& labels() const { return loaded_.labels; }
    const text::LoadedModel& checkpoint() const { return loaded_; }
    int64_t batch_size = 64;  // texts a forward pass reads at most

private:
    text::LoadedModel loaded_;
    mutable std::mutex mutex_;  // calls from several threads take turns
};

struct TokenScore {
    std::string token;
    float probability = 0;
};

class MaskFiller {
public:
    // Error if the checkpoint is not an encoder's.
    explicit MaskFiller(const std::string& checkpoint, Precision precision = Precision::float32);
    explicit MaskFiller(text::LoadedModel loaded, Precision precision = Precision::float32);

    // For each "<mask>" the text writes, in order, its `top_k` most likely tokens (never a special
    // token), most likely first. Errors: no <mask>, a text longer than the model's rows, top_k out of
    // range.
    std::vector<std::vector<TokenScore>> fill(const std::string& text, int64_t top_k = 5) const;

    const text::LoadedModel& checkpoint() const { return loaded_; }

private:
    text::LoadedModel loaded_;
    mutable std::mutex mutex_;
};

}  // namespace seqgrad::inference
