// Labelled texts read strictly from files, for classifying a text or a pair of texts: each line is
// `text TAB label` or `text_a TAB text_b TAB label`, in a plain or gzip-compressed file
// (line_reader.h).
//
// Every line of a file has the number of fields (two or three) of its first line that has two or
// three. A line with another number, an empty text or label, or invalid UTF-8 is a bad line named
// by its file and line, as the pairs pipeline reports them (Problems, data.h): the data is refused
// with the first few, or, with skip_invalid, they are skipped and counted. The labels are those of
// the training file, sorted by their bytes; a label of dev or test that the training file lacks
// is an Error naming the file, the line and the label. Dev and test are given files, or carved
// from the training file by a hash of the (first) text, as the corpus task carves its pairs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "seqgrad/training/line_reader.h"

namespace seqgrad::training {

// The classes of a classifier: their labels sorted by their bytes, each label's id its place.
class LabelSet {
public:
    LabelSet() = default;
    // Labels in any order, repeats allowed. An empty label is an Error.
    explicit LabelSet(std::vector<std::string> labels);
    int32_t size() const { return static_cast<int32_t>(names_.size()); }
    const std::string& name(int32_t id) const;                // an Error outside [0, size)
    std::optional<int32_t> id(std::string_view label) const;  // none for a label not in the set
    const std::vector<std::string>& names() const { return names_; }
    bool operator==(const LabelSet&) const = default;

private:
    std::vector<std::string> names_;
};

// Texts and their labels' ids, in file order. A pair of texts has its second text in
// `second_texts`, which is empty for single texts.
struct LabelledTexts {
    std::vector<std::string> texts;
    std::vector<std::string> second_texts;
    std::vector<int32_t> labels;

    int64_t size() const { return static_cast<int64_t>(texts.size()); }
    bool empty() const { return texts.empty(); }
};

// The lines of one file of labelled texts, in order.
class LabelledReader {
public:
    // `fields`: 2 or 3 to require that many on every line (a file whose first line of two or
    // three fields has the other number is an Error), 0 to let that line decide.
    explicit LabelledReader(const std::string& path, int fields = 0);

    // The next line: true with its fields (`second` empty for single texts), or true with
    // `problem` set for a bad line; false after the last line.
    bool next(std::string& text, std::string& second, std::string& label, std::string& problem);
    int fields() const { return fields_; }  // 2 or 3; 0 while no line has decided (none required)
    std::string where() const;              // of the last line: "file:line"
    const std::string& path() const { return lines_.path(); }

private:
    LineReader lines_;
    int fields_ = 0;  // required, or decided by a line
    bool required_ = false;
    bool decided_ = false;
    std::string line_;
};

// Which files make the data.
struct LabelledFiles {
    std::string train;
    std::string dev;   // none: dev and test are carved from train by split_by_hash of the first text
    std::string test;  // given, it replaces the carved test split (whose lines are then unused)
    bool skip_invalid = false;
};

struct LabelledData {
    LabelSet labels;     // every label of the training file (whichever split a line is carved into)
    bool pairs = false;  // pairs of texts (three fields a line)
    LabelledTexts train, dev, test;
    std::vector<std::string> report;  // where the data came from, its sizes, each label's training count
};

// Reads the training file, then dev and test (which must have its number of fields). The training
// file must give at least one text and two labels.
LabelledData read_labelled(const LabelledFiles& files);

// One file read against the labels of a trained classifier (`seqgrad eval --test F`): `fields` as
// LabelledReader's; a label not in `labels` is an Error. Bad lines are refused unless skip_invalid
// (then a line about them is added to `report`).
LabelledTexts read_labelled_file(const std::string& path, const LabelSet& labels, int fields, bool skip_invalid,
                                 std::vector<std::string>* report = nullptr);

}  // namespace seqgrad::training
