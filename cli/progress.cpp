// The progress bar and log lines of `seqgrad train`.
#include "progress.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>

namespace seqgrad::cli {

std::string format_duration(double seconds) {
    const int64_t s = static_cast<int64_t>(std::llround(std::max(0.0, seconds)));
    char buffer[32];
    if (s >= 3600)
        std::snprintf(buffer, sizeof buffer, "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                      static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
    else
        std::snprintf(buffer, sizeof buffer, "%lld:%02lld", static_cast<long long>(s / 60),
                      static_cast<long long>(s % 60));
    return buffer;
}

ProgressDisplay::ProgressDisplay(int64_t log_every) : terminal_(isatty(STDERR_FILENO) != 0), log_every_(log_every) {}

void ProgressDisplay::finish_line() {
    if (bar_drawn_) std::fputc('\n', stderr);
    bar_drawn_ = false;
}

void ProgressDisplay::operator()(const training::TrainingEvent& e) {
    using Kind = training::TrainingEvent::Kind;
    if (e.kind == Kind::step) {
        std::string left = "";
        if (e.budget_fraction > 0)
            left = " | left " + format_duration(e.elapsed_seconds * (1 - e.budget_fraction) / e.budget_fraction);
        if (terminal_) {
            const auto now = std::chrono::steady_clock::now();
            if (now - last_draw_ < std::chrono::milliseconds(100)) return;
            last_draw_ = now;
            constexpr int kWidth = 24;
            const double f = e.budget_fraction > 0 ? e.budget_fraction : 0;
            const int filled = static_cast<int>(f * kWidth);
            std::string bar(static_cast<size_t>(filled), '#');
            bar.resize(kWidth, '.');
            std::fprintf(stderr, "\r[%s] %3.0f%% step %lld epoch %lld (%lld/%lld) loss %.4f | %.0f tok/s | %s%s\033[K",
                         bar.c_str(), 100 * f, static_cast<long long>(e.step), static_cast<long long>(e.epoch + 1),
                         static_cast<long long>(e.batch_in_epoch), static_cast<long long>(e.batches_in_epoch), e.loss,
                         e.tokens_per_second, format_duration(e.elapsed_seconds).c_str(), left.c_str());
            bar_drawn_ = true;
        } else if (e.step % log_every_ == 0) {
            std::fprintf(stderr, "step %lld epoch %lld loss %.4f lr %.3g tok/s %.0f elapsed %s%s\n",
                         static_cast<long long>(e.step), static_cast<long long>(e.epoch + 1), e.loss, e.learning_rate,
                         e.tokens_per_second, format_duration(e.elapsed_seconds).c_str(), left.c_str());
        }
        return;
    }
    finish_line();
    if (e.kind == Kind::evaluation)
        std::fprintf(stderr, "dev after step %lld (%lld epochs): %s\n", static_cast<long long>(e.step),
                     static_cast<long long>(e.epoch), e.text.c_str());
    else if (e.kind == Kind::checkpoint)
        std::fprintf(stderr, "checkpoint saved at step %lld (%s)\n", static_cast<long long>(e.step), e.text.c_str());
    else std::fprintf(stderr, "%s\n", e.text.c_str());
    std::fflush(stderr);
}

}  // namespace seqgrad::cli
