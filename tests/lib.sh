# Shell helpers the program tests share (sourced, not run).

# fail MESSAGE: the test fails with MESSAGE.
fail() {
  echo "FAILED: $*"
  exit 1
}

# fresh_dir DIR: DIR exists and is empty (whatever an earlier run left there is gone).
fresh_dir() {
  rm -rf "$1" && mkdir -p "$1" || fail "cannot create $1"
}

# refused NAME STATUS OUTPUT PATTERN: a command that should fail did so with a status from 1 to
# 127 (an error it reported, not a crash, a sanitizer abort or a signal) and said PATTERN.
refused() {
  [ "$2" -ne 0 ] && [ "$2" -lt 128 ] || fail "$1 should fail with a clear error, got status $2: $3"
  grep -q -- "$4" <<< "$3" || fail "$1: no message saying '$4': $3"
}
