#!/usr/bin/env bash
# The README's second command: the whole test suite. Builds (if needed) and tests the Release tree
# in build/; then a second tree, build-sanitize/, built by clang with AddressSanitizer,
# UndefinedBehaviorSanitizer and libFuzzer's coverage: the suite again, and each fuzz harness for
# FUZZ_SECONDS (30 unless set; 0 skips them).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$jobs"
ctest --test-dir build --output-on-failure -j"$jobs"

# A tree another compiler configured cannot switch to clang: start it afresh.
if [ -f build-sanitize/CMakeCache.txt ] && ! grep -q '^CMAKE_CXX_COMPILER:.*clang' build-sanitize/CMakeCache.txt; then
  rm -rf build-sanitize
fi
# With MPI, as the Release tree, so that data-parallel training runs under the sanitizers too (Open
# MPI's own leaks are suppressed: tests/sanitizers/lsan.supp). Each tree also links the program as
# it is built without MPI, to test that it refuses a launch of several processes.
CC=clang CXX=clang++ cmake -S . -B build-sanitize -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSEQGRAD_SANITIZE=ON \
  -DSEQGRAD_FUZZ=ON -DSEQGRAD_BUILD_BENCH=OFF -DSEQGRAD_MPI=ON
cmake --build build-sanitize -j"$jobs"
# All but the four tests that train a model to 99% on a task ("learns to"): under the sanitizers and
# libFuzzer's coverage they take minutes each, running the same code as the short tests thousands of
# times over; the Release run above has them. Of the tests under mpirun, the Transformer's 2 ranks
# against one process (every collective, the overlapped and the blocking sums) and the ranks'
# errors (MPI_Abort) run here; the two other models' and the 300-step kills and resumes, minutes
# more under the sanitizers for the same MPI code, only in Release.
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-sanitize --output-on-failure -j"$jobs" \
  -E "learns to|^distributed\.(two_ranks_equal_one_process\.(attn_seq2seq|seq2seq)|rank_faults)$"

fuzz_seconds=${FUZZ_SECONDS:-30}
if [ "$fuzz_seconds" -gt 0 ]; then
  bash scripts/fuzz.sh "$fuzz_seconds" --build build-sanitize
fi
