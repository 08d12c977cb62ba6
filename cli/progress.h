// How the program shows a long run: a progress bar redrawn in place on a terminal, plain log
// lines otherwise (a file, a CI log).
#pragma once

#include <chrono>
#include <string>

#include "seqgrad/training/trainer.h"

namespace seqgrad::cli {

class ProgressDisplay {
public:
    explicit ProgressDisplay(int64_t log_every);
    void set_log_every(int64_t steps) { log_every_ = steps; }
    void operator()(const training::TrainingEvent& event);
    void finish_line();  // ends a bar in progress, before other output

private:
    bool terminal_;
    int64_t log_every_;
    bool bar_drawn_ = false;
    std::chrono::steady_clock::time_point last_draw_{};
};

std::string format_duration(double seconds);  // "1:02:03" or "2:03"

}  // namespace seqgrad::cli
