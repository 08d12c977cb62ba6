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

# No wait is without a limit: a job that hangs fails the test instead of the suite's time-out.
# stop_job JOB: ends the background job JOB and its children (mpirun's ranks, say).
stop_job() {
  pkill -KILL -P "$1"
  kill -KILL "$1"
  wait "$1"
}
# end_job JOB SECONDS WHAT: waits for the background job JOB; after SECONDS, stops it and fails.
# Its status is the job's.
end_job() {
  local job=$1 limit=$2 what=$3 start=$SECONDS
  while kill -0 "$job" 2> /dev/null; do
    [ $((SECONDS - start)) -lt "$limit" ] || { stop_job "$job"; fail "$what still runs after $limit s"; }
    sleep 0.2
  done
  wait "$job"
}
# await_line JOB LOG PATTERN: waits until the background job JOB's LOG has a line matching PATTERN
# (at most 120 s; the job must not end first).
await_line() {
  local job=$1 log=$2 pattern=$3 start=$SECONDS
  until grep -q "$pattern" "$log"; do
    kill -0 "$job" 2> /dev/null || fail "the run ended before printing '$pattern': $(cat "$log")"
    [ $((SECONDS - start)) -lt 120 ] || { stop_job "$job"; fail "no '$pattern' after 120 s: $(cat "$log")"; }
    sleep 0.2
  done
}

# bf16_expected: whether bfloat16 products run here: the CPU has bfloat16 instructions (AVX512_BF16;
# every CPU with AMX has it) and neither seqgrad's level nor oneDNN's is capped below them. Decided
# from the CPU's flags and the caps, not from what the program says.
bf16_expected() {
  grep -qw avx512_bf16 /proc/cpuinfo 2> /dev/null || return 1
  case "${SEQGRAD_MAX_CPU_ISA:-avx512}" in avx512 | AVX512) ;; *) return 1 ;; esac
  case "${ONEDNN_MAX_CPU_ISA:-ALL}" in
    ALL | all | AVX512_CORE_BF16 | avx512_core_bf16 | AVX512_CORE_AMX | avx512_core_amx) return 0 ;;
    *) return 1 ;;
  esac
}
