// Labelled texts from files (labelled.h).
#include "seqgrad/training/labelled.h"

#include <algorithm>
#include <map>

#include "seqgrad/core/error.h"
#include "seqgrad/text/utf8.h"
#include "seqgrad/training/data.h"
#include "seqgrad/training/dataset.h"

namespace seqgrad::training {

LabelSet::LabelSet(std::vector<std::string> labels) : names_(std::move(labels)) {
    for (const std::string& label : names_) check(!label.empty(), "labels", "an empty label");
    std::sort(names_.begin(), names_.end());
    names_.erase(std::unique(names_.begin(), names_.end()), names_.end());
    check(names_.size() < static_cast<size_t>(INT32_MAX), "labels", "more than 2^31 labels");
}

const std::string& LabelSet::name(int32_t id) const {
    check(id >= 0 && id < size(), "labels", "no label has id ", id, " (there are ", size(), ")");
    return names_[static_cast<size_t>(id)];
}

std::optional<int32_t> LabelSet::id(std::string_view label) const {
    const auto found = std::lower_bound(names_.begin(), names_.end(), label);
    if (found == names_.end() || *found != label) return std::nullopt;
    return static_cast<int32_t>(found - names_.begin());
}

namespace {

const char* layout(int fields) { return fields == 3 ? "text_a TAB text_b TAB label" : "text TAB label"; }

// Why a field cannot be used, or "" if it can.
std::string field_problem(std::string_view value, const char* field) {
    if (value.find_first_not_of(' ') == std::string_view::npos) return std::string("the ") + field + " is empty";
    if (!text::is_utf8(value))
        return std::string("the ") + field + " \"" + text::printable(value) + "\" is not valid UTF-8";
    return "";
}

}  // namespace

LabelledReader::LabelledReader(const std::string& path, int fields) : lines_(path), required_(fields != 0) {
    check(fields == 0 || fields == 2 || fields == 3, "labelled texts", "a line has 2 or 3 fields, not ", fields);
    if (required_) fields_ = fields;
}

bool LabelledReader::next(std::string& text, std::string& second, std::string& label, std::string& problem) {
    problem.clear();
    text.clear();
    second.clear();
    label.clear();
    if (!lines_.next(line_)) return false;
    if (line_.empty()) {
        problem = "an empty line";
        return true;
    }
    const auto count = static_cast<int64_t>(std::count(line_.begin(), line_.end(), '\t')) + 1;
    if ((count == 2 || count == 3) && !decided_) {
        // The first line of two or three fields decides the file's number; a required one must match.
        decided_ = true;
        check(!required_ || count == fields_, where().c_str(), count, " fields (", layout(static_cast<int>(count)),
              ") where the training data has ", fields_, " (", layout(fields_), ")");
        fields_ = static_cast<int>(count);
    }
    if (count != fields_) {
        problem = fields_ == 0 ? detail::concat(count, count == 1 ? " field" : " fields", "; a line is ", layout(2),
                                                ", or ", layout(3))
                               : detail::concat(count, count == 1 ? " field" : " fields",
                                                " where the file's lines have ", fields_, " (", layout(fields_), ")");
        return true;
    }
    const size_t first_tab = line_.find('\t');
    const size_t last_tab = line_.rfind('\t');
    text.assign(line_, 0, first_tab);
    if (fields_ == 3) second.assign(line_, first_tab + 1, last_tab - first_tab - 1);
    label.assign(line_, last_tab + 1, std::string::npos);
    problem = field_problem(text, fields_ == 3 ? "first text" : "text");
    if (problem.empty() && fields_ == 3) problem = field_problem(second, "second text");
    if (problem.empty()) problem = field_problem(label, "label");
    return true;
}

std::string LabelledReader::where() const { return detail::concat(lines_.path(), ":", lines_.line_number()); }

namespace {

void add(LabelledTexts& into, std::string& text, std::string& second, bool pairs, int32_t label) {
    into.texts.push_back(std::move(text));
    if (pairs) into.second_texts.push_back(std::move(second));
    into.labels.push_back(label);
}

// "a, b, c", the first `shown` of them (printable), then "..." for the rest.
template <typename Name>
std::string listed(int64_t count, int64_t shown, const Name& name) {
    std::string list;
    for (int64_t i = 0; i < std::min(count, shown); ++i) list += (i ? ", " : "") + name(i);
    if (count > shown) list += ", ...";
    return list;
}

// The lines of `path` with labels among `labels` (those of `labels_of`), added to `into`; a label
// not among them is an Error.
void read_against(const std::string& path, const LabelSet& labels, const std::string& labels_of, int fields,
                  Problems& problems, LabelledTexts& into) {
    LabelledReader reader(path, fields);
    std::string text, second, label, problem;
    while (reader.next(text, second, label, problem)) {
        if (!problem.empty()) {
            problems.add(reader.where(), problem);
            continue;
        }
        const std::optional<int32_t> id = labels.id(label);
        if (!id)
            throw Error(
                detail::concat(reader.where(), ": the label \"", text::printable(label), "\" is not one of the ",
                               labels.size(), " labels of ", labels_of, " (",
                               listed(labels.size(), 10,
                                      [&](int64_t i) { return text::printable(labels.name(static_cast<int32_t>(i))); }),
                               ")"));
        add(into, text, second, reader.fields() == 3, *id);
    }
}

}  // namespace

LabelledData read_labelled(const LabelledFiles& files) {
    LabelledData data;
    Problems problems("labelled text");
    const bool carve = files.dev.empty();
    // The training file's lines, with the labels' ids in order of first appearance until all are known.
    std::map<std::string, int32_t, std::less<>> first_seen;
    LabelledReader reader(files.train);
    std::string text, second, label, problem;
    while (reader.next(text, second, label, problem)) {
        if (!problem.empty()) {
            problems.add(reader.where(), problem);
            continue;
        }
        const auto [it, is_new] = first_seen.try_emplace(label, static_cast<int32_t>(first_seen.size()));
        const Split split = carve ? split_by_hash(text) : Split::train;
        if (split == Split::test && !files.test.empty()) continue;  // the test file replaces it
        add(split == Split::train ? data.train
            : split == Split::dev ? data.dev
                                  : data.test,
            text, second, reader.fields() == 3, it->second);
    }
    std::vector<std::string> report;
    const std::string what =
        files.train + (carve ? "" : ", " + files.dev) + (files.test.empty() ? "" : ", " + files.test);
    if (first_seen.size() < 2) {
        problems.settle(files.skip_invalid, what, report);  // the bad lines first: they may be why
        check(!first_seen.empty(), files.train.c_str(),
              "no labelled texts (a line is text TAB label, or text_a TAB text_b TAB label)");
        throw Error(detail::concat(files.train, ": one label only (\"", text::printable(first_seen.begin()->first),
                                   "\"): a classifier needs two or more"));
    }
    data.pairs = reader.fields() == 3;

    std::vector<std::string> names;
    for (const auto& [name, id] : first_seen) names.push_back(name);
    data.labels = LabelSet(std::move(names));
    std::vector<int32_t> sorted_id(first_seen.size());
    for (const auto& [name, id] : first_seen) sorted_id[static_cast<size_t>(id)] = *data.labels.id(name);
    for (LabelledTexts* split : {&data.train, &data.dev, &data.test})
        for (int32_t& id : split->labels) id = sorted_id[static_cast<size_t>(id)];

    if (!carve) read_against(files.dev, data.labels, files.train, reader.fields(), problems, data.dev);
    if (!files.test.empty()) read_against(files.test, data.labels, files.train, reader.fields(), problems, data.test);
    problems.settle(files.skip_invalid, what, report);

    std::vector<int64_t> counts(static_cast<size_t>(data.labels.size()), 0);
    for (const int32_t id : data.train.labels) ++counts[static_cast<size_t>(id)];
    report.insert(report.begin(),
                  {detail::concat(files.train, ": ", data.train.size(),
                                  data.pairs ? " training pairs of texts, " : " training texts, ", data.dev.size(),
                                  " dev, ", data.test.size(), " test"),
                   carve ? detail::concat(files.test.empty() ? "dev and test" : "dev", " carved from ", files.train,
                                          " by a hash of the ", data.pairs ? "first text" : "text",
                                          files.test.empty() ? "" : ", test " + files.test)
                         : detail::concat("train ", files.train, ", dev ", files.dev,
                                          files.test.empty() ? "" : ", test " + files.test),
                   detail::concat(data.labels.size(), " labels, with their training counts: ",
                                  listed(data.labels.size(), 20, [&](int64_t i) {
                                      return detail::concat(text::printable(data.labels.name(static_cast<int32_t>(i))),
                                                            " ", counts[static_cast<size_t>(i)]);
                                  }))});
    data.report = std::move(report);
    return data;
}

LabelledTexts read_labelled_file(const std::string& path, const LabelSet& labels, int fields, bool skip_invalid,
                                 std::vector<std::string>* report) {
    LabelledTexts texts;
    Problems problems("labelled text");
    read_against(path, labels, "the model", fields, problems, texts);
    std::vector<std::string> skipped;
    problems.settle(skip_invalid, path, skipped);
    if (report) report->insert(report->end(), skipped.begin(), skipped.end());
    return texts;
}

}  // namespace seqgrad::training
