#!/usr/bin/env bash
# SIGTERM (as a job scheduler sends before it kills) and SIGUSR1 (which mpirun passes on to its
# ranks) stop `seqgrad train` as Ctrl-C does (tests/cli/check_programs.sh): after the step under
# way, with a checkpoint of that step committed, a line saying how to resume, and status 130;
# then --resume continues the run.
#   stop_signals.sh SEQGRAD WORK_DIR
set -uo pipefail
seqgrad=$1
work=$2
# shellcheck source=../lib.sh
source "$(dirname "$0")/../lib.sh"

fresh_dir "$work"
cat > "$work/tiny.json" <<'JSON'
{"model": "transformer", "d_model": 32, "n_heads": 2, "n_layers": 1, "d_ff": 64, "norm": "pre",
 "training": {"synthetic": {"train_size": 400, "dev_size": 20, "test_size": 20, "max_length": 6},
              "schedule": "constant", "lr": 0.003, "save_every_steps": 2}}
JSON
for signal in TERM USR1; do
  run=$work/$signal
  "$seqgrad" train --task reverse --model transformer --config "$work/tiny.json" --threads 1 --show 0 \
    --max-steps 1000000 --out "$run" > "$run.log" 2>&1 &
  pid=$!
  # A checkpoint committed shows that training runs, so the signal handlers are in place.
  start=$SECONDS
  until grep -q "checkpoint saved at step" "$run.log"; do
    kill -0 $pid 2> /dev/null || fail "the run ended before its first checkpoint: $(cat "$run.log")"
    [ $((SECONDS - start)) -lt 120 ] || { kill -KILL $pid; fail "no checkpoint after 120 s: $(cat "$run.log")"; }
    sleep 0.1
  done
  kill -$signal $pid
  start=$SECONDS
  while kill -0 $pid 2> /dev/null; do
    [ $((SECONDS - start)) -lt 60 ] || { kill -KILL $pid; fail "SIG$signal: the run still goes on after 60 s"; }
    sleep 0.1
  done
  wait $pid
  status=$?
  [ $status -eq 130 ] || fail "SIG$signal should exit 130, got $status: $(cat "$run.log")"
  steps=$(sed -n 's/^Stopped (interrupted) after \([0-9]*\) steps.*/\1/p' "$run.log")
  [ -n "$steps" ] || fail "SIG$signal: no line says where the run stopped: $(cat "$run.log")"
  grep -q "^checkpoint saved at step $steps (" "$run.log" \
    || fail "SIG$signal: no checkpoint of step $steps was committed: $(cat "$run.log")"
  grep -q "train --resume $run" "$run.log" || fail "SIG$signal: no line says how to resume: $(cat "$run.log")"
  out=$(timeout 300 "$seqgrad" train --resume "$run" --max-steps $((steps + 3)) --threads 1 --show 0 2>&1) \
    || fail "SIG$signal: the run does not resume: $out"
  grep -q "after $((steps + 3)) steps" <<< "$out" || fail "SIG$signal: the resumed run did not go on: $out"
  echo "SIG$signal: stopped after step $steps with its checkpoint and status 130; resumed to step $((steps + 3))"
done
