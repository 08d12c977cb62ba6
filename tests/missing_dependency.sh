#!/usr/bin/env bash
# Stands in for tests that cannot run because something they need is missing: under CI
# (CI=true) that is a failure; elsewhere a skip that says so, with status 77, which CTest reports
# as skipped (SKIP_RETURN_CODE).
#   missing_dependency.sh WHAT_IS_MISSING WHAT_CANNOT_RUN
if [ "${CI:-}" = true ]; then
  echo "FAILED: $1 is missing, so $2 cannot run (under CI a missing dependency is a failure)"
  exit 1
fi
echo "SKIPPED: $1 is missing, so $2 do not run"
exit 77
