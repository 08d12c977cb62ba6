#!/usr/bin/env bash
# The README's second command: the whole test suite. Builds (if needed) and tests the Release tree
# in build/, at the CPU's own level; then, on a CPU above AVX2, the unit tests again with every
# kernel held to AVX2 (seqgrad's, oneDNN's and OpenBLAS's), as a CPU without AVX-512 runs them;
# then the program's tests with seqgrad's kernels at the portable level. Then a second tree,
# build-sanitize/, built by clang with AddressSanitizer, UndefinedBehaviorSanitizer and, in the code
# that reads files, libFuzzer's coverage: the suite again, and each fuzz harness for FUZZ_SECONDS
# (15 unless set; 0 skips them).
# Under CI (CI=true) a test CTest skips fails the run unless tests/expected_skips/ lists it for this
# kind of machine; every run's skips are printed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

# The kind of machine, for its expected skips: bf16 where the CPU has bfloat16 instructions.
kind_of_cpu() {
  if grep -qw avx512_bf16 /proc/cpuinfo 2>/dev/null; then echo bf16; else echo no-bf16; fi
}

# run_ctest NAME KIND [ctest arguments...]: runs CTest, keeping its output to check its skips.
runs=()
run_ctest() {
  local name=$1 kind=$2
  shift 2
  echo "== $name (expected skips: $kind)"
  set +e
  ctest "$@" 2>&1 | tee "$logs/$name.log"
  local status=${PIPESTATUS[0]}
  set -e
  runs+=("$name:$kind")
  [ "$status" -eq 0 ] || { echo "test.sh: $name failed"; exit "$status"; }
}

# Prints each run's skipped tests; under CI, fails on any its kind does not expect.
check_skips() {
  local unexpected=0 entry name kind skipped test
  echo "== skipped tests"
  for entry in "${runs[@]}"; do
    name=${entry%%:*}
    kind=${entry#*:}
    # CTest's summary: "\t 12 - name (Skipped)".
    skipped=$(sed -n 's/^[[:space:]]*[0-9]* - \(.*\) (Skipped)$/\1/p' "$logs/$name.log")
    if [ -z "$skipped" ]; then
      echo "$name: none"
      continue
    fi
    grep -v -e '^#' -e '^$' "tests/expected_skips/$kind.txt" > "$logs/$kind.patterns" || true
    while IFS= read -r test; do
      if grep -qxEf "$logs/$kind.patterns" <<< "$test"; then
        echo "$name: skipped, as expected on a $kind machine: $test"
      else
        echo "$name: skipped, NOT expected on a $kind machine: $test"
        unexpected=1
      fi
    done <<< "$skipped"
  done
  if [ "$unexpected" -ne 0 ] && [ "${CI:-}" = "true" ]; then
    echo "test.sh: a test skipped that this machine should run (tests/expected_skips/)"
    exit 1
  fi
}

# The int8 cases held to oneDNN's AVX2 or its AVX-512 without VNNI (int8.without_vnni.*) repeat the
# [int8] cases exactly on a CPU with neither AVX-512 nor AVX-VNNI, where oneDNN's own level is
# already AVX2 without VNNI: they run only where they run other code.
same_as_default=""
if ! grep -qwE 'avx512bw|avx_vnni' /proc/cpuinfo 2>/dev/null; then
  same_as_default="^int8\.without_vnni\."
fi

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$jobs"
build/cli/seqgrad --version
run_ctest release "$(kind_of_cpu)" --test-dir build --output-on-failure -j"$jobs" \
  ${same_as_default:+-E "$same_as_default"}

# What a CPU with AVX2 and no AVX-512 runs: seqgrad's kernels, oneDNN's and OpenBLAS's at AVX2.
# (bf16 is then refused, as on such a CPU.)
if grep -qw avx512bw /proc/cpuinfo 2>/dev/null; then
  SEQGRAD_MAX_CPU_ISA=avx2 ONEDNN_MAX_CPU_ISA=AVX2 OPENBLAS_CORETYPE=Haswell \
    run_ctest release-avx2 no-bf16 --test-dir build --output-on-failure -j"$jobs" -L '^unit$'
fi
# The program end to end with seqgrad's portable kernels (SSE4.2), oneDNN's held to SSE4.1.
SEQGRAD_MAX_CPU_ISA=portable ONEDNN_MAX_CPU_ISA=SSE41 \
  run_ctest release-portable no-bf16 --test-dir build --output-on-failure -j"$jobs" -R '^cli\.'

# A tree another compiler configured cannot switch to clang: start it afresh.
if [ -f build-sanitize/CMakeCache.txt ] && ! grep -q '^CMAKE_CXX_COMPILER:.*clang' build-sanitize/CMakeCache.txt; then
  rm -rf build-sanitize
fi
# With MPI, as the Release tree, so that data-parallel training runs under the sanitizers too (Open
# MPI's own leaks are suppressed: tests/sanitizers/lsan.supp). Each tree also links the program as
# it is built without MPI, to test that it refuses a launch of several processes. Debug information
# is line tables only: the sanitizers' reports name every frame's file and line, and the tree
# builds a fifth faster than with full -g.
CC=clang CXX=clang++ cmake -S . -B build-sanitize -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSEQGRAD_SANITIZE=ON \
  -DSEQGRAD_FUZZ=ON -DSEQGRAD_BUILD_BENCH=OFF -DSEQGRAD_MPI=ON \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -gline-tables-only -DNDEBUG" \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -gline-tables-only -DNDEBUG"
cmake --build build-sanitize -j"$jobs"
# All but the four tests that train a model to 99% on a task ("learns to"): under the sanitizers
# they take minutes each, running the same code as the short tests thousands of times over; the
# Release run above has them. Of the tests under mpirun, the Transformer's 2 ranks
# against one process (every collective, the overlapped and the blocking sums) and the ranks'
# errors (MPI_Abort) run here; the other models' and the 300-step kills and resumes, minutes more
# under the sanitizers for the same MPI code, only in Release. So do the GPT's kills and resumes
# without MPI (the Transformer's run the same checkpoint code here) and the int8 cases at oneDNN's
# AVX-512 without VNNI (seqgrad's side is the AVX2 run's, which runs here where it runs other code
# than the plain int8 cases: same_as_default above).
release_only="learns to|^distributed\.(two_ranks_equal_one_process\.(attn_seq2seq|seq2seq|gpt)|rank_faults)$"
release_only+="|^faults\.sigkill_and_resume\.gpt$|^int8\.without_vnni\.AVX512_CORE$"
[ -z "$same_as_default" ] || release_only+="|$same_as_default"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  run_ctest sanitize "$(kind_of_cpu)" --test-dir build-sanitize --output-on-failure -j"$jobs" -E "$release_only"

fuzz_seconds=${FUZZ_SECONDS:-15}
if [ "$fuzz_seconds" -gt 0 ]; then
  bash scripts/fuzz.sh "$fuzz_seconds" --build build-sanitize
fi
check_skips
