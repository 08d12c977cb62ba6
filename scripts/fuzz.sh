#!/usr/bin/env bash
# Coverage-guided fuzzing of every reader of outside data (fuzz/): builds the libFuzzer harnesses
# with clang, AddressSanitizer and UndefinedBehaviorSanitizer, and runs each for SECONDS with its
# committed seeds (fuzz/corpus/<name>/) and dictionary (fuzz/dict/<name>.dict). Exits non-zero on
# a finding (a crash, a sanitizer report, an uncaught exception other than seqgrad::Error, a
# timeout or an out-of-memory), whose input is kept in BUILD/fuzz-findings/ (add it to
# fuzz/regressions/<name>/ once fixed: the test suite replays that folder).
#   bash scripts/fuzz.sh SECONDS [--build DIR] [HARNESS...]
set -uo pipefail
cd "$(dirname "$0")/.."
seconds=${1:?usage: fuzz.sh SECONDS [--build DIR] [HARNESS...]}
shift
build=build-fuzz
if [ "${1:-}" = "--build" ]; then
  build=$2
  shift 2
fi
harnesses=("$@")
[ ${#harnesses[@]} -gt 0 ] || harnesses=(safetensors checkpoint config cmudict corpus fixture text_file labelled)

if [ ! -f "$build/CMakeCache.txt" ]; then
  CC=clang CXX=clang++ cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSEQGRAD_SANITIZE=ON \
    -DSEQGRAD_FUZZ=ON -DSEQGRAD_BUILD_BENCH=OFF -DSEQGRAD_BUILD_TESTS=OFF -DSEQGRAD_MPI=OFF > /dev/null || exit 1
fi
targets=()
for h in "${harnesses[@]}"; do targets+=(--target "fuzz_$h"); done
cmake --build "$build" -j"$(nproc)" "${targets[@]}" > "$build/fuzz-build.log" 2>&1 \
  || { tail -n 30 "$build/fuzz-build.log"; exit 1; }

mkdir -p "$build/fuzz-findings"
# One harness: its summary line goes to BUILD/fuzz-NAME.result, its status is the function's.
run_one() {
  local h=$1 work="$build/fuzz-corpus/$1" log="$build/fuzz-$1.log"  # work: what this machine found
  mkdir -p "$work"
  ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$build/fuzz/fuzz_$h" -max_total_time="$seconds" -dict="fuzz/dict/$h.dict" -timeout=25 -rss_limit_mb=4096 \
    -max_len=65536 -print_final_stats=1 -artifact_prefix="$build/fuzz-findings/$h-" "$work" "fuzz/corpus/$h" \
    > "$log" 2>&1
  local result=$?
  local runs edges
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  edges=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 | cut -d' ' -f2)
  if [ $result -eq 0 ]; then
    echo "fuzz_$h: ${seconds}s, ${runs:-?} inputs, ${edges:-?} edges covered, no finding" > "$build/fuzz-$h.result"
  else
    { echo "fuzz_$h: FINDING after ${runs:-?} inputs (status $result); the input is in $build/fuzz-findings/:"
      grep -E "ERROR|SUMMARY|terminate|what\(\)|runtime error|Test unit written" "$log" | head -n 8; } \
      > "$build/fuzz-$h.result"
  fi
  return $result
}

# As many harnesses at once as there are cores (each is one process).
for h in "${harnesses[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$(nproc)" ]; do wait -n; done
  rm -f "$build/fuzz-$h.result"
  run_one "$h" &
done
wait
status=0
for h in "${harnesses[@]}"; do
  if [ -f "$build/fuzz-$h.result" ]; then cat "$build/fuzz-$h.result"; else echo "fuzz_$h: no result"; fi
  grep -q "no finding" "$build/fuzz-$h.result" 2> /dev/null || status=1
done
exit $status
