// The Catch2 entry point of seqgrad_tests.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

#include <algorithm>
#include <iostream>

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

}  // namespace

CATCH_REGISTER_LISTENER(PackedKernelsLine)
