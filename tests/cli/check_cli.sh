#!/usr/bin/env bash
# The `seqgrad check` program end to end: every committed fixture passes with exit status 0, and
# a missing file or a bad flag gives a clear message and a non-zero exit.
set -uo pipefail
seqgrad=$1
fixtures=$2
fail() { echo "FAILED: $*"; exit 1; }

out=$("$seqgrad" check "$fixtures"/*.safetensors); status=$?
echo "$out" | tail -n 3
[ $status -eq 0 ] || fail "check on the committed fixtures exited $status"
count=$(ls "$fixtures"/*.safetensors | wc -l)
[ "$(echo "$out" | tail -n 1)" = "$count passed, 0 failed" ] || fail "last line is not '$count passed, 0 failed'"
echo "$out" | grep -q "expect.grad." || fail "no per-tensor lines"

out=$("$seqgrad" check /nonexistent.safetensors "$fixtures/seq2seq_init_state_1layer.safetensors"); status=$?
[ $status -eq 1 ] || fail "a missing file should exit 1, got $status"
echo "$out" | grep -q "FAIL /nonexistent.safetensors: .*nonexistent.safetensors" \
  || fail "no message naming the missing file"
[ "$(echo "$out" | tail -n 1)" = "1 passed, 1 failed" ] || fail "wrong summary for a missing file"

"$seqgrad" check --atol 2>/dev/null; status=$?
[ $status -ne 0 ] || fail "a bad flag should exit non-zero"
"$seqgrad" check > /dev/null 2>&1; status=$?
[ $status -ne 0 ] || fail "no files should exit non-zero"
echo "seqgrad check behaves"
