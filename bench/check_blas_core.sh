#!/usr/bin/env bash
# seqgrad_bench and OpenBLAS's kernels: --print-blas-core names the OPENBLAS_CORETYPE the program
# runs with (a core the environment names is kept; with none named it is empty, or where OpenBLAS
# would fall back to its generic kernels the CPU's own core, never a generic one), and the warning
# that a forced core overrides OpenBLAS's choice is given for a core the user set, not for one that
# the program's start-again named (SEQGRAD_BLAS_CORE_RESTART the same).
set -uo pipefail
bench=$1
# shellcheck source=../tests/lib.sh
source "$(dirname "$0")/../tests/lib.sh"

out=$(OPENBLAS_CORETYPE=Haswell "$bench" --print-blas-core 2>&1); status=$?
[ $status -eq 0 ] && [ "$out" = "Haswell" ] || fail "a core the environment names: status $status, '$out'"
generic="Prescott|Core2|Penryn|Dunnington|Nehalem|Atom|Sandybridge|Bulldozer|Piledriver|Opteron|Barcelona"
for unset in "env -u OPENBLAS_CORETYPE" "env OPENBLAS_CORETYPE="; do
  out=$($unset "$bench" --print-blas-core 2>&1); status=$?
  [ $status -eq 0 ] || fail "--print-blas-core exited $status ($unset): $out"
  grep -qxE "$generic" <<< "$out" && fail "a generic core chosen ($unset): $out"
  if grep -qw avx2 /proc/cpuinfo 2>/dev/null; then
    # What OpenBLAS runs then, as the program reports it: never its generic kernels on such a CPU.
    out=$($unset "$bench" --benchmark_list_tests 2>&1 | head -3)
    grep -qE "OpenBLAS: .*\(($generic) kernels\)" <<< "$out" && fail "generic kernels on a CPU with AVX2: $out"
  fi
done

out=$(OPENBLAS_CORETYPE=Haswell "$bench" --benchmark_list_tests 2>&1 | head -5)
grep -q "warning: OPENBLAS_CORETYPE=Haswell overrides" <<< "$out" || fail "no warning for a core the user set: $out"
out=$(OPENBLAS_CORETYPE=Haswell SEQGRAD_BLAS_CORE_RESTART=Haswell "$bench" --benchmark_list_tests 2>&1 | head -5)
grep -q "overrides" <<< "$out" && fail "a warning for the core a start-again named: $out"
out=$(OPENBLAS_CORETYPE=Haswell SEQGRAD_BLAS_CORE_RESTART=SkylakeX "$bench" --benchmark_list_tests 2>&1 | head -5)
grep -q "warning: OPENBLAS_CORETYPE=Haswell overrides" <<< "$out" \
  || fail "no warning for a core other than the start-again's: $out"
echo "seqgrad_bench's OpenBLAS core behaves"
