// Pairs of texts from files (pairs.h).
#include "seqgrad/training/pairs.h"

#include "seqgrad/core/error.h"
#include "seqgrad/text/utf8.h"

namespace seqgrad::training {

std::string corpus_name(const std::vector<std::string>& paths) {
    std::string name;
    for (size_t i = 0; i < paths.size(); ++i) name += (i ? " + " : "") + paths[i];
    return name;
}

PairReader::PairReader(const std::vector<std::string>& paths) {
    check(paths.size() == 1 || paths.size() == 2, "corpus", "expected one TSV file or a source and a target file, got ",
          paths.size(), " files");
    first_ = std::make_unique<LineReader>(paths[0]);
    if (paths.size() == 2) second_ = std::make_unique<LineReader>(paths[1]);
}

namespace {

// Why a side of a pair cannot be used, or "" if it can.
std::string side_problem(std::string_view text, const char* side) {
    if (text.find_first_not_of(" \t") == std::string_view::npos) return std::string("the ") + side + " is empty";
    if (!text::is_utf8(text))
        return std::string("the ") + side + " \"" + text::printable(text) + "\" is not valid UTF-8";
    return "";
}

}  // namespace

bool PairReader::next(std::string& source, std::string& target, std::string& problem) {
    problem.clear();
    const bool got_first = first_->next(line_);
    if (second_) {
        const bool got_second = second_->next(other_);
        if (got_first != got_second) {
            // Count the rest of the longer file, so that the message names both lengths.
            LineReader& longer = got_first ? *first_ : *second_;
            std::string rest;
            while (longer.next(rest)) {}
            throw Error(detail::concat("corpus: the aligned files have different numbers of lines: ", first_->path(),
                                       " has ", first_->line_number(), ", ", second_->path(), " has ",
                                       second_->line_number()));
        }
        if (!got_first) return false;
        source.swap(line_);
        target.swap(other_);
    } else {
        if (!got_first) return false;
        const size_t tab = line_.find('\t');
        if (tab == std::string::npos) {
            problem = line_.empty() ? "an empty line" : "no tab between the source and the target";
            return true;
        }
        if (line_.find('\t', tab + 1) != std::string::npos) {
            problem = "more than one tab (expected: source, a tab, target)";
            return true;
        }
        source.assign(line_, 0, tab);
        target.assign(line_, tab + 1, std::string::npos);
    }
    problem = side_problem(source, "source");
    if (problem.empty()) problem = side_problem(target, "target");
    return true;
}

std::string PairReader::where() const {
    if (!second_) return detail::concat(first_->path(), ":", first_->line_number());
    return detail::concat(first_->path(), ", ", second_->path(), ": line ", first_->line_number());
}

int64_t PairReader::line() const { return first_->line_number(); }

}  // namespace seqgrad::training
