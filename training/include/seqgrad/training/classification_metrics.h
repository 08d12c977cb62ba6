// How well a classifier's predictions match the gold labels: accuracy, each class's precision,
// recall, F1 and count, macro-F1, and the confusion matrix, as scikit-learn's accuracy_score,
// precision_recall_fscore_support, f1_score(average="macro") and confusion_matrix compute them
// with zero_division=0:
//
// - a class never predicted has precision 0, a class with no gold example recall 0, and a class
//   whose precision and recall are both 0 has F1 0;
// - macro-F1 is the mean F1 over the classes that occur, in the gold labels or the predictions
//   (scikit-learn's default label set); a class that occurs in neither is left out, so a dev set
//   without a rare class is not marked down for it.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace seqgrad::training {

// One class's measures, as fractions in [0, 1].
struct ClassScores {
    double precision = 0;   // of the texts predicted as this class, the share that are
    double recall = 0;      // of the texts of this class, the share predicted as it
    double f1 = 0;          // the harmonic mean of the two
    int64_t support = 0;    // gold texts of this class
    int64_t predicted = 0;  // texts predicted as this class

    bool occurs() const { return support > 0 || predicted > 0; }
};

struct ClassificationScores {
    int64_t examples = 0;
    int64_t correct = 0;
    double accuracy = 0;  // correct / examples
    double macro_f1 = 0;  // the mean F1 of the classes that occur
    std::vector<ClassScores> classes;
    std::vector<int64_t> confusion;  // [classes, classes]: row the gold label, column the predicted one

    int32_t class_count() const { return static_cast<int32_t>(classes.size()); }
    int64_t confusion_at(int32_t gold, int32_t predicted) const;
};

// The scores of `predicted` against `gold`, label ids in [0, classes). Lists of different lengths,
// no examples, or an id outside the range are an Error.
ClassificationScores classification_scores(std::span<const int32_t> gold, std::span<const int32_t> predicted,
                                           int32_t classes);

// The scores as text, each class named by `labels` (one per class): a line with accuracy and
// macro-F1, then one table whose rows are the gold labels, with the confusion matrix's counts under
// the predicted labels, then each class's precision, recall, F1 (in percent) and count. A class that
// occurs nowhere has "-" for its measures.
std::string classification_table(const ClassificationScores& scores, const std::vector<std::string>& labels);

}  // namespace seqgrad::training
