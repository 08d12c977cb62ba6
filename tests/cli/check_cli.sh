#!/usr/bin/env bash
# The `seqgrad check` program end to end: every committed fixture passes with exit status 0, and
# a missing file or a bad flag gives a clear message and a non-zero exit.
set -uo pipefail
seqgrad=$1
fixtures=$2
# shellcheck source=../lib.sh
source "$(dirname "$0")/../lib.sh"

out=$("$seqgrad" check "$fixtures"/*.safetensors); status=$?
echo "$out" | tail -n 3
[ $status -eq 0 ] || fail "check on the committed fixtures exited $status"
count=$(ls "$fixtures"/*.safetensors | wc -l)
[ "$(echo "$out" | tail -n 1)" = "$count passed, 0 failed" ] || fail "last line is not '$count passed, 0 failed'"
grep -q "expect.grad." <<< "$out" || fail "no per-tensor lines"

out=$("$seqgrad" check /nonexistent.safetensors "$fixtures/seq2seq_init_state_1layer.safetensors"); status=$?
[ $status -eq 1 ] || fail "a missing file should exit 1, got $status"
grep -q "FAIL /nonexistent.safetensors: .*nonexistent.safetensors" <<< "$out" \
  || fail "no message naming the missing file"
[ "$(echo "$out" | tail -n 1)" = "1 passed, 1 failed" ] || fail "wrong summary for a missing file"

# In bfloat16, judged by relative L2 error, where bfloat16 products run (bf16_expected, lib.sh);
# elsewhere refused in one sentence.
out=$("$seqgrad" check --bf16 "$fixtures"/gpt_learned.safetensors "$fixtures"/transformer_pre_gelu_ls.safetensors 2>&1)
status=$?
if ! bf16_expected; then
  refused "check --bf16 without bfloat16 instructions (or capped below them)" $status "$out" "bf16 needs"
  grep -q "primitive descriptor" <<< "$out" && fail "check --bf16 gave oneDNN's error, not a sentence: $out"
else
  [ $status -eq 0 ] || fail "check --bf16 exited $status on a CPU with AVX512_BF16: $out"
  grep -q "products in bf16" <<< "$out" || fail "check --bf16 does not say its products are bf16: $out"
  [ "$(echo "$out" | tail -n 1)" = "2 passed, 0 failed" ] || fail "check --bf16: wrong summary: $out"
  # The elementwise float32 bound would fail these products: they were rounded.
  out=$("$seqgrad" check --bf16 --rel-l2 1e-7 "$fixtures"/gpt_learned.safetensors 2>&1); status=$?
  [ $status -eq 1 ] || fail "check --bf16 --rel-l2 1e-7 should fail, got $status: $out"
fi

# The products of weights on either library pass the parity check (SEQGRAD_FLOAT32_PRODUCTS); an
# unknown library is refused, naming the choices.
for library in sgemm onednn; do
  out=$(SEQGRAD_FLOAT32_PRODUCTS=$library "$seqgrad" check "$fixtures"/transformer_pre_gelu_ls.safetensors \
        "$fixtures"/seq2seq_init_state_1layer.safetensors 2>&1); status=$?
  [ $status -eq 0 ] || fail "check with the products of weights on $library exited $status: $out"
done
out=$(SEQGRAD_FLOAT32_PRODUCTS=mkl "$seqgrad" check "$fixtures"/transformer_pre_gelu_ls.safetensors 2>&1); status=$?
refused "an unknown SEQGRAD_FLOAT32_PRODUCTS" $status "$out" "not one of sgemm, onednn, auto"

out=$("$seqgrad" check --atol 2>&1); status=$?
refused "a flag without its value" $status "$out" "--atol"
out=$("$seqgrad" check 2>&1); status=$?
refused "check without files" $status "$out" "fixtures is required"
# OpenBLAS held to its oldest x86-64 kernels on a CPU with AVX2 or AVX-512: the computing commands
# say so, and name the setting that fixes it.
if grep -qw avx2 /proc/cpuinfo 2>/dev/null; then
  out=$(OPENBLAS_CORETYPE=Prescott "$seqgrad" predict --checkpoint /nonexistent x 2>&1)
  grep -q "warning: OpenBLAS runs its Prescott kernels .*OPENBLAS_CORETYPE=\(SkylakeX\|Haswell\)" <<< "$out" \
    || fail "no warning about OpenBLAS's Prescott kernels: $out"
  out=$(OPENBLAS_CORETYPE=Prescott "$seqgrad" check "$fixtures/seq2seq_init_state_1layer.safetensors" 2>&1)
  grep -q "warning" <<< "$out" && fail "check (no heavy computing) warned about the kernels"
  # Started with no core named where OpenBLAS does not recognise the CPU (Debian's on an Intel Xeon
  # with AMX), the program starts itself again with the CPU's core: never the generic kernels.
  generic="Prescott|Core2|Penryn|Dunnington|Nehalem|Atom|Sandybridge|Bulldozer|Piledriver|Opteron|Barcelona"
  for unset in "env -u OPENBLAS_CORETYPE" "env OPENBLAS_CORETYPE="; do
    out=$($unset "$seqgrad" --version 2>&1)
    grep -qE "^OpenBLAS: .*\(($generic) kernels\)" <<< "$out" \
      && fail "OpenBLAS runs its generic kernels on a CPU with AVX2 ($unset): $out"
    out=$($unset "$seqgrad" predict --checkpoint /nonexistent x 2>&1)
    grep -q "warning: OpenBLAS" <<< "$out" && fail "a warning about OpenBLAS's kernels ($unset): $out"
  done
fi
echo "seqgrad check behaves"

# --version names seqgrad's version and kernel level, as SEQGRAD_MAX_CPU_ISA caps it, and the
# libraries found at run time; a name that is no level, or a level this CPU lacks, is refused in one
# sentence before anything runs.
out=$("$seqgrad" --version 2>&1); status=$?
[ $status -eq 0 ] || fail "--version exited $status: $out"
grep -qE "^seqgrad [0-9]+\.[0-9]+\.[0-9]+$" <<< "$out" || fail "--version does not name the version: $out"
grep -qE "^kernels: (portable|avx2|avx512) \(" <<< "$out" || fail "--version does not name the kernels' level: $out"
grep -q "^products of weights: " <<< "$out" || fail "--version does not name the products' library: $out"
grep -qE "^OpenBLAS: [0-9]+\.[0-9]+\.[0-9]+ \([A-Za-z0-9]+ kernels\)$" <<< "$out" \
  || fail "--version does not name OpenBLAS's version and kernels: $out"
grep -qE "^oneDNN: ([0-9]+\.[0-9]+\.[0-9]+|none \(built without it\))$" <<< "$out" \
  || fail "--version does not name oneDNN: $out"
grep -qE "^MPI: (Open MPI v[0-9.]+|MPICH.*|none \(built without MPI\))$" <<< "$out" \
  || fail "--version does not name MPI: $out"
out=$(SEQGRAD_MAX_CPU_ISA=portable "$seqgrad" --version 2>&1)
grep -q "^kernels: portable (SSE4.2" <<< "$out" || fail "SEQGRAD_MAX_CPU_ISA=portable is not the level run: $out"
out=$(SEQGRAD_MAX_CPU_ISA=avx3 "$seqgrad" check "$fixtures/seq2seq_init_state_1layer.safetensors" 2>&1); status=$?
refused "an unknown SEQGRAD_MAX_CPU_ISA" $status "$out" \
  "SEQGRAD_MAX_CPU_ISA='avx3' is not one of portable, avx2, avx512"
if ! grep -qw avx512bw /proc/cpuinfo; then
  out=$(SEQGRAD_MAX_CPU_ISA=avx512 "$seqgrad" --version 2>&1); status=$?
  refused "a level this CPU lacks" $status "$out" "asks for a level this CPU lacks"
fi
