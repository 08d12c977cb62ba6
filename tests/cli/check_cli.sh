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

out=$("$seqgrad" check --atol 2>&1); status=$?
refused "a flag without its value" $status "$out" "--atol"
out=$("$seqgrad" check 2>&1); status=$?
refused "check without files" $status "$out" "fixtures is required"
echo "seqgrad check behaves"
