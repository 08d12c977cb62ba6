// skip_test (helpers.h, tests/main.cpp): a case may skip only before its first check, so that a
// skip never hides a check that ran. The case below checks, then skips: it must fail, which
// [!shouldfail] turns into a pass (and a skip that let it through into a failure).
#include "helpers.h"

TEST_CASE("a case that skips after its first check fails instead of skipping", "[skips][!shouldfail]") {
    CHECK(1 + 1 == 2);
    seqgrad::testing::skip_test("too late: something was checked");
}
