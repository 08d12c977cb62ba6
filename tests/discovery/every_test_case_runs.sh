#!/usr/bin/env bash
# Every Catch2 test case of seqgrad_tests is one CTest test that runs it: as many CTest tests
# (those labelled "unit") as test cases listed, each named as one of them. catch_discover_tests
# splits the list of names at ';', so a name holding one became two tests, each a filter that
# matched no test case (and, without --warn NoTests, passed having run nothing).
#   every_test_case_runs.sh SEQGRAD_TESTS BUILD_DIR
set -uo pipefail
tests=$1
build=$2
# shellcheck source=../lib.sh
source "$(dirname "$0")/../lib.sh"

listed=$("$tests" --list-test-names-only | sort)
[ -n "$listed" ] || fail "$tests lists no test cases"
registered=$(ctest --test-dir "$build" -N -L '^unit$' | sed -n 's/^ *Test *#[0-9]*: //p' | sort)
[ -n "$registered" ] || fail "ctest in $build has no tests labelled unit"
n_listed=$(wc -l <<< "$listed")
n_registered=$(wc -l <<< "$registered")
unknown=$(comm -13 <(echo "$listed") <(echo "$registered"))
missing=$(comm -23 <(echo "$listed") <(echo "$registered"))
[ -z "$unknown" ] || fail "CTest tests that name no test case (a name split at ';'?):"$'\n'"$unknown"
[ -z "$missing" ] || fail "test cases with no CTest test:"$'\n'"$missing"
[ "$n_listed" -eq "$n_registered" ] || fail "$n_listed test cases but $n_registered CTest tests"
echo "$n_listed test cases, each one CTest test"
