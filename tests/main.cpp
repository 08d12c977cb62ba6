// The Catch2 entry point of seqgrad_tests, and the one way a case skips (skip_test, helpers.h).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <algorithm>
#include <iostream>
#include <string>

#include "helpers.h"

namespace {

// The first test of packed weights in a run (tagged [packed]) starts by printing the kernels this
// machine runs: oneDNN's for each precision, or sgemm where nothing is packed, so that a log says
// which path those tests took.
struct PackedKernelsLine : Catch::TestEventListenerBase {
    using TestEventListenerBase::TestEventListenerBase;
    void testCaseStarting(const Catch::TestCaseInfo& info) override {
        static bool printed = false;
        if (printed || std::find(info.tags.begin(), info.tags.end(), "packed") == info.tags.end()) return;
        printed = true;
        std::cout << seqgrad::testing::packed_kernels_line() << std::endl;
    }
};

// What the run's cases did: how many ran, how many skipped, and the checks of the running one.
struct Skips {
    int cases = 0, skipped = 0;
    int64_t checks = 0;  // assertions of the running case so far
    bool skipping = false;
};
Skips skips;

struct SkipCounter : Catch::TestEventListenerBase {
    using TestEventListenerBase::TestEventListenerBase;
    // A run (not a listing of the cases) starts by naming seqgrad's kernel level.
    void testRunStarting(const Catch::TestRunInfo&) override {
        std::cout << "seqgrad kernels: " << seqgrad::isa_description() << std::endl;
    }
    void testCaseStarting(const Catch::TestCaseInfo&) override {
        ++skips.cases;
        skips.checks = 0;
        skips.skipping = false;
    }
    bool assertionEnded(const Catch::AssertionStats&) override {
        ++skips.checks;
        return true;
    }
};

}  // namespace

CATCH_REGISTER_LISTENER(PackedKernelsLine)
CATCH_REGISTER_LISTENER(SkipCounter)

namespace seqgrad::testing {

void skip_test(const std::string& why) {
    if (skips.checks > 0)
        FAIL("the case checked " << skips.checks << " thing(s) before skipping (" << why
                                 << "): a case decides to skip before its first check");
    if (!skips.skipping) ++skips.skipped;
    skips.skipping = true;
    std::cout << "SKIPPED: " << why << std::endl;
}

}  // namespace seqgrad::testing

int main(int argc, char* argv[]) {
    const int failed = Catch::Session().run(argc, argv);
    if (failed != 0) return failed;
    // Skipped only when every case that ran skipped: one case per process under CTest.
    if (skips.cases > 0 && skips.skipped == skips.cases) return 77;
    return 0;
}
