#!/usr/bin/env bash
# SIGKILL at any moment: trains a small Transformer (dropout on, a checkpoint every 3 steps), kills
# it with SIGKILL at 20 random moments, resuming after each, and checks that
#   - after every kill, every checkpoint file on disk loads (model, best, training state);
#   - the finished run's weights are byte-identical to those of an uninterrupted run of the same
#     steps;
#   - no temporary or uncommitted file is left behind.
#   kill_resume.sh SEQGRAD WORK_DIR [SEED]
set -uo pipefail
seqgrad=$1
work=$2
seed=${3:-$(date +%s)}
# shellcheck source=../lib.sh
source "$(dirname "$0")/../lib.sh"
RANDOM=$seed
echo "kill moments drawn with seed $seed (run again with it to repeat them)"

rm -rf "$work" && mkdir -p "$work" || fail "cannot create $work"
cat > "$work/tiny.json" <<'JSON'
{"model": "transformer", "d_model": 32, "n_heads": 2, "n_layers": 1, "d_ff": 64, "norm": "pre", "dropout": 0.1,
 "training": {"synthetic": {"train_size": 2000, "dev_size": 30, "test_size": 30, "max_length": 6},
              "schedule": "constant", "lr": 0.003, "batch_sentences": 32, "eval_every_steps": 20,
              "save_every_steps": 3}}
JSON
steps=60
train=("$seqgrad" train --task reverse --model transformer --config "$work/tiny.json" --threads 1 --show 0)

started=$(date +%s%N)
"${train[@]}" --max-steps $steps --out "$work/reference" > "$work/reference.log" 2>&1 \
  || fail "the uninterrupted run failed: $(cat "$work/reference.log")"
# Kill moments are drawn over the length of an uninterrupted run, as long here as it was just now
# (a sanitizer build, or a machine busy with other tests, is slower): start-up, steps and
# checkpoint writes alike. A fixed range would leave a slow build killed before its first
# checkpoint every time, with nothing ever resumed.
span_ms=$(( ($(date +%s%N) - started) / 1000000 ))
[ "$span_ms" -ge 1000 ] || span_ms=1000

# Every checkpoint file present must load: the model files through predict, the training state
# through curves (which reads its progress).
check_loads() {
  local dir=$1 f
  for f in model best; do
    [ -f "$dir/$f.safetensors" ] || continue
    "$seqgrad" predict --checkpoint "$dir/$f.safetensors" --threads 1 abc > /dev/null 2>&1 \
      || fail "after kill $2, $dir/$f.safetensors does not load"
  done
  if [ -f "$dir/training.safetensors" ]; then
    local out status
    out=$("$seqgrad" curves "$dir" --out "$work/curves.svg" 2>&1); status=$?
    # curves refuses a run with no evaluation yet, but only after reading the state.
    [ $status -eq 0 ] || grep -q "has no dev evaluation yet" <<< "$out" \
      || fail "after kill $2, $dir/training.safetensors does not load: $out"
  fi
}

# Each run resumes from the training state when a killed run left one, else starts afresh (a kill
# before the first checkpoint leaves nothing to resume). The command is chosen here, so that $! is
# seqgrad itself and the kill reaches it.
run=$work/interrupted
resumes=0
next_run() {
  if [ -f "$run/training.safetensors" ]; then
    resumes=$((resumes + 1))
    run_command=("$seqgrad" train --resume "$run" --max-steps $steps --threads 1 --show 0)
  else
    run_command=("${train[@]}" --max-steps $steps --out "$run")
  fi
}
for kill in $(seq 1 20); do
  next_run
  "${run_command[@]}" > "$work/kill$kill.log" 2>&1 &
  pid=$!
  ms=$(( (RANDOM * 32768 + RANDOM) % span_ms ))
  sleep "$((ms / 1000)).$(printf '%03d' $((ms % 1000)))"
  kill -KILL $pid 2> /dev/null
  wait $pid 2> /dev/null
  check_loads "$run" $kill
done
next_run
out=$("${run_command[@]}" 2>&1) || fail "the last run (resumed or started afresh) failed: $out"
check_loads "$run" final
grep -q "after $steps steps" <<< "$out" || fail "the last run did not finish at step $steps: $out"
cmp -s "$work/reference/model.safetensors" "$run/model.safetensors" \
  || fail "the final weights differ from the uninterrupted run's"
cmp -s "$work/reference/best.safetensors" "$run/best.safetensors" \
  || fail "the best weights differ from the uninterrupted run's"
leftovers=$(ls -A "$run" | grep -v -x -e model.safetensors -e best.safetensors -e training.safetensors)
[ -z "$leftovers" ] || fail "files left behind: $leftovers"
echo "20 kills over ${span_ms} ms runs, $resumes resumes: every checkpoint loaded after each, the final weights" \
     "equal the uninterrupted run's, nothing left over"
