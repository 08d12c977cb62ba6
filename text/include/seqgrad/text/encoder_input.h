// How an encoder (models::EncoderModel) reads texts: each row is `<cls> a <sep>`, or `<cls> a <sep>
// b <sep>` for a pair of texts, in the ids of an encoder's vocabulary (Vocabulary::for_encoder). The
// classification task, the masked language model's windows, `seqgrad predict` and the
// TextClassifier all lay rows out here, so that a model is used as it was trained.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "seqgrad/core/tensor.h"
#include "seqgrad/text/tokenizer.h"
#include "seqgrad/text/vocabulary.h"

namespace seqgrad::text {

// The literal a fill-mask query writes where a token is to be predicted.
inline constexpr std::string_view kMaskText = "<mask>";

// A text's ids in `vocab` as `tokenizer` reads it (unknown symbols are <unk>).
std::vector<int64_t> encoder_ids(std::string_view text, const Tokenizer& tokenizer, const Vocabulary& vocab);

// A text's ids with <mask> (models::kMask) wherever the text writes kMaskText; the pieces between
// are read as encoder_ids reads a text. `masks` gets the number of masks.
std::vector<int64_t> encoder_ids_with_masks(std::string_view text, const Tokenizer& tokenizer, const Vocabulary& vocab,
                                            int64_t* masks = nullptr);

// The row of one text, or of a pair (`second` given), in at most `max_length` ids (0: no limit):
// the texts are cut at their ends, the longer one first (of two as long, the second), until the
// row fits, and `truncated` says whether any was. An Error if `max_length` leaves no room for one
// id of each text.
std::vector<int64_t> encoder_row(std::span<const int64_t> first, std::optional<std::span<const int64_t>> second,
                                 int64_t max_length, bool* truncated = nullptr);

// Rows of different lengths as one [rows, longest] batch, right-padded with <pad>.
IntTensor encoder_batch(const std::vector<std::vector<int64_t>>& rows);

}  // namespace seqgrad::text
