// Tests of the classification metrics: accuracy, each class's precision, recall, F1 and count,
// macro-F1 and the confusion matrix, on small cases whose values scikit-learn 1.2.1 gives
// (accuracy_score, precision_recall_fscore_support, f1_score(average="macro"), confusion_matrix,
// all with zero_division=0); the table `eval` prints; and the inputs that are refused.
#include "helpers.h"

#include "seqgrad/training.h"

using namespace seqgrad::training;
using seqgrad::testing::error_of;
using Catch::Matchers::Contains;

namespace {

ClassificationScores scores_of(const std::vector<int32_t>& gold, const std::vector<int32_t>& predicted,
                               int32_t classes) {
    return classification_scores(gold, predicted, classes);
}

}  // namespace

TEST_CASE("classification metrics: accuracy, each class's precision, recall, F1 and count as scikit-learn's",
          "[classification]") {
    const ClassificationScores s = scores_of({0, 0, 0, 0, 1, 1, 2, 2, 2, 1}, {0, 0, 1, 2, 1, 1, 2, 0, 2, 1}, 3);
    CHECK(s.examples == 10);
    CHECK(s.correct == 7);
    CHECK(s.accuracy == Approx(0.7).margin(1e-12));
    REQUIRE(s.class_count() == 3);
    const double precision[] = {0.6666666666666666, 0.75, 0.6666666666666666};
    const double recall[] = {0.5, 1.0, 0.6666666666666666};
    const double f1[] = {0.5714285714285715, 0.8571428571428571, 0.6666666666666666};
    const int64_t support[] = {4, 3, 3}, predicted[] = {3, 4, 3};
    for (int c = 0; c < 3; ++c) {
        INFO("class " << c);
        CHECK(s.classes[c].precision == Approx(precision[c]).margin(1e-12));
        CHECK(s.classes[c].recall == Approx(recall[c]).margin(1e-12));
        CHECK(s.classes[c].f1 == Approx(f1[c]).margin(1e-12));
        CHECK(s.classes[c].support == support[c]);
        CHECK(s.classes[c].predicted == predicted[c]);
    }
    CHECK(s.macro_f1 == Approx(0.6984126984126985).margin(1e-12));
}

TEST_CASE("classification metrics: the confusion matrix has gold rows and predicted columns", "[classification]") {
    const ClassificationScores s = scores_of({0, 0, 0, 0, 1, 1, 2, 2, 2, 1}, {0, 0, 1, 2, 1, 1, 2, 0, 2, 1}, 3);
    const std::vector<int64_t> expected = {2, 1, 1,  //
                                           0, 3, 0,  //
                                           1, 0, 2};
    CHECK(s.confusion == expected);
    CHECK(s.confusion_at(0, 2) == 1);  // gold 0 predicted as 2
    CHECK(s.confusion_at(2, 0) == 1);
    CHECK(s.confusion_at(1, 0) == 0);
    CHECK_THAT(error_of([&] { (void)s.confusion_at(3, 0); }), Contains("no cell (3, 0) among 3 classes"));
}

TEST_CASE("classification metrics: zero_division=0, and macro-F1 leaves out a class that occurs nowhere",
          "[classification]") {
    // Class 1 has gold texts but no prediction, class 2 predictions but no gold text, class 3 neither.
    const ClassificationScores s = scores_of({0, 0, 1, 1, 0}, {0, 2, 0, 0, 0}, 4);
    CHECK(s.accuracy == Approx(0.4).margin(1e-12));
    CHECK(s.classes[0].precision == Approx(0.5).margin(1e-12));
    CHECK(s.classes[0].recall == Approx(0.6666666666666666).margin(1e-12));
    CHECK(s.classes[0].f1 == Approx(0.5714285714285715).margin(1e-12));
    for (int c = 1; c < 4; ++c) {
        INFO("class " << c);
        CHECK(s.classes[c].precision == 0);
        CHECK(s.classes[c].recall == 0);
        CHECK(s.classes[c].f1 == 0);
    }
    CHECK(s.classes[1].occurs());
    CHECK(s.classes[2].occurs());
    CHECK_FALSE(s.classes[3].occurs());
    // scikit-learn's f1_score(average="macro") over the labels that occur: (4/7 + 0 + 0) / 3. With
    // class 3 counted too (labels=range(4)) it would be 0.142857.
    CHECK(s.macro_f1 == Approx(0.1904761904761905).margin(1e-12));
}

TEST_CASE("classification metrics: every prediction right scores 1, every one wrong scores 0", "[classification]") {
    const ClassificationScores right = scores_of({1, 0, 1}, {1, 0, 1}, 2);
    CHECK(right.accuracy == 1);
    CHECK(right.macro_f1 == 1);
    const ClassificationScores wrong = scores_of({1, 0, 1}, {0, 1, 0}, 2);
    CHECK(wrong.accuracy == 0);
    CHECK(wrong.macro_f1 == 0);
    CHECK(wrong.confusion == std::vector<int64_t>{0, 1, 2, 0});
}

TEST_CASE("classification metrics: lists of different lengths, no examples and ids out of range are refused",
          "[classification]") {
    CHECK_THAT(error_of([] { scores_of({0, 1}, {0}, 2); }), Contains("2 gold labels but 1 predictions"));
    CHECK_THAT(error_of([] { scores_of({}, {}, 2); }), Contains("no examples to score"));
    CHECK_THAT(error_of([] {
                   scores_of({0, 2}, {0, 1}, 2);
               }),
               Contains("example 1 has gold 2 and prediction 1: label ids are in [0, 2)"));
    CHECK_THAT(error_of([] { scores_of({0, 1}, {-1, 1}, 2); }), Contains("example 0 has gold 0 and prediction -1"));
    CHECK_THAT(error_of([] { scores_of({0}, {0}, 0); }), Contains("at least one class, not 0"));
}

TEST_CASE("classification metrics: the table names the labels, rows gold and columns predicted", "[classification]") {
    const ClassificationScores s = scores_of({0, 0, 0, 0, 1, 1, 2, 2, 2, 1}, {0, 0, 1, 2, 1, 1, 2, 0, 2, 1}, 3);
    const std::string table = classification_table(s, {"de", "español", "fr"});
    const std::string expected = "accuracy 70.00% (7 of 10)  macro-F1 69.84%\n"
                                 "gold \\ predicted  de  español  fr  |  precision   recall       F1  count\n"
                                 "de                 2        1   1  |     66.67%   50.00%   57.14%      4\n"
                                 "español            0        3   0  |     75.00%  100.00%   85.71%      3\n"
                                 "fr                 1        0   2  |     66.67%   66.67%   66.67%      3\n";
    CHECK(table == expected);
    // A class that occurs nowhere shows "-" for its measures; a label's control bytes are escaped.
    const std::string unused = classification_table(scores_of({0, 1}, {0, 1}, 3), {"a", "b", "c\x01"});
    CHECK_THAT(unused, Contains("c\\x01") && Contains("-        -        -      0\n"));
    CHECK_THAT(error_of([&] { (void)classification_table(s, {"a", "b"}); }), Contains("2 labels for 3 classes"));
}
