// Accuracy, precision, recall, F1 and the confusion matrix of a classifier (classification_metrics.h).
#include "seqgrad/training/classification_metrics.h"

#include <algorithm>
#include <cstdio>

#include "seqgrad/core/error.h"
#include "seqgrad/text/utf8.h"

namespace seqgrad::training {

int64_t ClassificationScores::confusion_at(int32_t gold, int32_t predicted) const {
    check(gold >= 0 && gold < class_count() && predicted >= 0 && predicted < class_count(), "confusion matrix",
          "no cell (", gold, ", ", predicted, ") among ", class_count(), " classes");
    return confusion[static_cast<size_t>(gold) * classes.size() + static_cast<size_t>(predicted)];
}

namespace {

double ratio(int64_t part, int64_t whole) {
    return whole > 0 ? static_cast<double>(part) / static_cast<double>(whole) : 0.0;  // zero_division=0
}

}  // namespace

ClassificationScores classification_scores(std::span<const int32_t> gold, std::span<const int32_t> predicted,
                                           int32_t classes) {
    check(classes >= 1, "classification scores", "there must be at least one class, not ", classes);
    check(gold.size() == predicted.size(), "classification scores", gold.size(), " gold labels but ", predicted.size(),
          " predictions");
    check(!gold.empty(), "classification scores", "no examples to score");
    ClassificationScores scores;
    const auto n = static_cast<size_t>(classes);
    scores.examples = static_cast<int64_t>(gold.size());
    scores.classes.resize(n);
    scores.confusion.assign(n * n, 0);
    for (size_t i = 0; i < gold.size(); ++i) {
        const int32_t g = gold[i], p = predicted[i];
        check(g >= 0 && g < classes && p >= 0 && p < classes, "classification scores", "example ", i, " has gold ", g,
              " and prediction ", p, ": label ids are in [0, ", classes, ")");
        ++scores.confusion[static_cast<size_t>(g) * n + static_cast<size_t>(p)];
        ++scores.classes[static_cast<size_t>(g)].support;
        ++scores.classes[static_cast<size_t>(p)].predicted;
        scores.correct += g == p;
    }
    scores.accuracy = ratio(scores.correct, scores.examples);
    double f1_sum = 0;
    int64_t occurring = 0;
    for (size_t c = 0; c < n; ++c) {
        ClassScores& s = scores.classes[c];
        const int64_t right = scores.confusion[c * n + c];
        s.precision = ratio(right, s.predicted);
        s.recall = ratio(right, s.support);
        // 2PR / (P + R) = 2 right / (support + predicted): exact, and 0 when neither occurs.
        s.f1 = ratio(2 * right, s.support + s.predicted);
        if (s.occurs()) {
            f1_sum += s.f1;
            ++occurring;
        }
    }
    scores.macro_f1 = f1_sum / static_cast<double>(occurring);  // some class occurs: there are examples
    return scores;
}

namespace {

// Columns are padded by code points: a label in any script lines up as well as a terminal allows.
size_t width(const std::string& text) {
    return static_cast<size_t>(std::count_if(text.begin(), text.end(),
                                             [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

std::string left(const std::string& text, size_t columns) {
    return text + std::string(columns - std::min(columns, width(text)), ' ');
}

std::string right(const std::string& text, size_t columns) {
    return std::string(columns - std::min(columns, width(text)), ' ') + text;
}

std::string percent(double fraction) {
    char text[32];
    std::snprintf(text, sizeof text, "%.2f%%", 100.0 * fraction);
    return text;
}

}  // namespace

std::string classification_table(const ClassificationScores& scores, const std::vector<std::string>& labels) {
    const size_t n = scores.classes.size();
    check(labels.size() == n, "classification table", labels.size(), " labels for ", n, " classes");
    std::vector<std::string> names;
    for (const std::string& label : labels) names.push_back(text::printable(label));

    const std::string corner = "gold \\ predicted";
    size_t first = width(corner);
    for (const std::string& name : names) first = std::max(first, width(name));
    std::vector<size_t> column(n);
    for (size_t c = 0; c < n; ++c) {
        column[c] = width(names[c]);
        for (size_t g = 0; g < n; ++g)
            column[c] = std::max(column[c], std::to_string(scores.confusion[g * n + c]).size());
    }
    size_t count = 5;  // "count"
    for (const ClassScores& s : scores.classes) count = std::max(count, std::to_string(s.support).size());
    const size_t measure = 7;  // "100.00%"

    std::string out = detail::concat("accuracy ", percent(scores.accuracy), " (", scores.correct, " of ",
                                     scores.examples, ")  macro-F1 ", percent(scores.macro_f1), "\n");
    out += left(corner, first);
    for (size_t c = 0; c < n; ++c) out += "  " + right(names[c], column[c]);
    out += "  |  " + right("precision", 9) + "  " + right("recall", measure) + "  " + right("F1", measure) + "  " +
           right("count", count) + "\n";
    for (size_t g = 0; g < n; ++g) {
        const ClassScores& s = scores.classes[g];
        out += left(names[g], first);
        for (size_t c = 0; c < n; ++c) out += "  " + right(std::to_string(scores.confusion[g * n + c]), column[c]);
        const auto shown = [&](double value) { return s.occurs() ? percent(value) : std::string("-"); };
        out += "  |  " + right(shown(s.precision), 9) + "  " + right(shown(s.recall), measure) + "  " +
               right(shown(s.f1), measure) + "  " + right(std::to_string(s.support), count) + "\n";
    }
    return out;
}

}  // namespace seqgrad::training
