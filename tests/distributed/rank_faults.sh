#!/usr/bin/env bash
# Faults of a data-parallel run (mpirun -np 2 seqgrad train, a small Transformer, a checkpoint
# every 3 steps):
#   - only rank 0 reports: one start line, one result;
#   - a rank killed with SIGKILL (rank 1, then rank 0 in a second run) ends the whole job, with
#     mpirun's message naming it and a non-zero status, within seconds, not a hang;
#   - the last checkpoint loads, and `mpirun ... train --resume` finishes the run with weights
#     bit-identical to those of an uninterrupted 2-rank run of the same steps;
#   - a loss that stops being finite stops every rank, and the last good checkpoint loads;
#   - SIGUSR1 to mpirun stops every rank after one step, with a checkpoint that resumes;
#   - Ctrl-C (SIGINT to mpirun) ends every rank.
#   rank_faults.sh MPIRUN SEQGRAD WORK_DIR
set -uo pipefail
mpirun=$1
seqgrad=$2
work=$3
# shellcheck source=../lib.sh
source "$(dirname "$0")/../lib.sh"

fresh_dir "$work"
cat > "$work/tiny.json" <<'JSON'
{"model": "transformer", "d_model": 32, "n_heads": 2, "n_layers": 1, "d_ff": 64, "dropout": 0,
 "training": {"synthetic": {"train_size": 2000, "dev_size": 20, "test_size": 20, "max_length": 6},
              "schedule": "constant", "lr": 0.003, "batch_sentences": 32, "eval_every_steps": 40,
              "save_every_steps": 3}}
JSON
launch=("$mpirun" --allow-run-as-root --oversubscribe --bind-to none -np 2)
train=("$seqgrad" train --task reverse --model transformer --config "$work/tiny.json" --threads 1 --show 0)
steps=300

limit=(timeout -k 10 600)  # for the jobs run in the foreground

"${limit[@]}" "${launch[@]}" "${train[@]}" --max-steps $steps --out "$work/reference" > "$work/reference.log" 2>&1 \
  || fail "the uninterrupted 2-rank run failed: $(cat "$work/reference.log")"
[ "$(grep -c '^Training transformer' "$work/reference.log")" -eq 1 ] \
  || fail "not one start line (rank 0 alone reports): $(cat "$work/reference.log")"
[ "$(grep -c '^Stopped (budget) after 300 steps' "$work/reference.log")" -eq 1 ] \
  || fail "not one result line: $(cat "$work/reference.log")"
grep -q "on each of 2 processes" "$work/reference.log" || fail "the start line does not say 2 processes"

# The pid of rank RANK among mpirun's children, from the rank Open MPI gives each one.
rank_pid() {
  local pid
  for pid in $(pgrep -P "$1"); do
    tr '\0' '\n' < "/proc/$pid/environ" 2> /dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" && { echo "$pid"; return; }
  done
}

# Starts a run (or resumes it) in the background, kills rank RANK once a checkpoint is on disk and
# a few more steps are done, and checks the job ends promptly with a clear message.
kill_rank() {
  local rank=$1 run=$2 log=$3
  if [ -f "$run/training.safetensors" ]; then
    "${launch[@]}" "$seqgrad" train --resume "$run" --max-steps $steps --threads 1 --show 0 > "$log" 2>&1 &
  else
    "${launch[@]}" "${train[@]}" --max-steps $steps --out "$run" > "$log" 2>&1 &
  fi
  local job=$! pid=""
  await_line $job "$log" "checkpoint saved at step"
  sleep 0.1
  pid=$(rank_pid $job "$rank")
  [ -n "$pid" ] || fail "cannot find rank $rank among mpirun's processes"
  kill -KILL "$pid"
  local start=$SECONDS
  end_job $job 30 "the job, after rank $rank died,"
  local status=$?
  echo "rank $rank killed: the job ended after $((SECONDS - start)) s with status $status"
  [ $status -ne 0 ] || fail "the job exited 0 after rank $rank was killed"
  grep -qiE "signal 9|killed" "$log" || fail "no message says a rank was killed: $(cat "$log")"
  "$seqgrad" predict --checkpoint "$run/model.safetensors" --threads 1 abc > /dev/null 2>&1 \
    || fail "after rank $rank was killed, model.safetensors does not load"
}

run=$work/interrupted
kill_rank 1 "$run" "$work/kill1.log"
kill_rank 0 "$run" "$work/kill0.log"
"${limit[@]}" "${launch[@]}" "$seqgrad" train --resume "$run" --max-steps $steps --threads 1 --show 0 \
  > "$work/resume.log" 2>&1 || fail "resuming under mpirun failed: $(cat "$work/resume.log")"
grep -q "^Resuming" "$work/resume.log" || fail "no resume line: $(cat "$work/resume.log")"
cmp -s "$work/reference/model.safetensors" "$run/model.safetensors" \
  || fail "the resumed run's weights differ from the uninterrupted run's"
echo "killed twice and resumed: the weights equal the uninterrupted run's, byte for byte"

# SIGUSR1 to mpirun, which passes it on: every rank stops after the same step, rank 0 writes the
# checkpoint and says how to continue.
"${launch[@]}" "${train[@]}" --max-steps 100000 --out "$work/usr1" > "$work/usr1.log" 2>&1 &
job=$!
# Once a checkpoint is saved, every rank has taken steps, so each has its signal handler.
await_line $job "$work/usr1.log" "checkpoint saved at step"
kill -USR1 $job
end_job $job 60 "the job, after SIGUSR1,"
status=$?
grep -q "^Interrupted: continue with" "$work/usr1.log" \
  || fail "SIGUSR1 did not stop the run cleanly (status $status): $(cat "$work/usr1.log")"
[ $status -eq 130 ] || fail "the job stopped by SIGUSR1 exited $status, not 130: $(cat "$work/usr1.log")"
stopped=$(sed -n 's/^Stopped (interrupted) after \([0-9]*\) steps.*/\1/p' "$work/usr1.log")
[ -n "$stopped" ] || fail "no line says after how many steps the run stopped: $(cat "$work/usr1.log")"
"${limit[@]}" "$seqgrad" train --resume "$work/usr1" --max-steps $((stopped + 3)) --threads 1 --show 0 \
  > "$work/usr1_resume.log" 2>&1 \
  || fail "the run stopped by SIGUSR1 does not resume: $(cat "$work/usr1_resume.log")"
grep -q "after $((stopped + 3)) steps" "$work/usr1_resume.log" \
  || fail "the resumed run did not go on to step $((stopped + 3)): $(cat "$work/usr1_resume.log")"
echo "SIGUSR1: every rank stopped after step $stopped, and the run resumes (here as one process)"

# A loss that stops being finite: every rank stops at the same step (none waits for the others),
# rank 0 says so once, and the last good checkpoint stays.
sed 's/"schedule": "constant", "lr": 0.003,/"schedule": "constant", "lr": 100000, "clip_norm": 0,/' "$work/tiny.json" \
  > "$work/diverge.json"
"${limit[@]}" "${launch[@]}" "$seqgrad" train --task reverse --model transformer --config "$work/diverge.json" \
  --threads 1 --show 0 --max-steps 100 --save-every 1 --out "$work/diverge" > "$work/diverge.log" 2>&1
status=$?
[ $status -ne 0 ] || fail "a diverging run exited 0: $(cat "$work/diverge.log")"
[ "$(grep -c "the loss is .* stopping" "$work/diverge.log")" -eq 1 ] \
  || fail "not one message about the loss: $(cat "$work/diverge.log")"
"$seqgrad" predict --checkpoint "$work/diverge/model.safetensors" --threads 1 abc > /dev/null 2>&1 \
  || fail "the diverged run's last good checkpoint does not load"
echo "a non-finite loss stopped both ranks together (status $status); the last good checkpoint loads"

# Ctrl-C: mpirun ends the ranks itself; the job must end, every rank with it.
"${launch[@]}" "${train[@]}" --max-steps 100000 --out "$work/ctrl_c" > "$work/ctrl_c.log" 2>&1 &
job=$!
await_line $job "$work/ctrl_c.log" "checkpoint saved at step"
kill -INT $job
start=$SECONDS
end_job $job 30 "the job, after Ctrl-C,"
echo "Ctrl-C: the job ended after $((SECONDS - start)) s with status $?"
pgrep -f "$work/ctrl_c" > /dev/null && fail "a rank outlived the job"
echo "rank faults: all checks passed"
