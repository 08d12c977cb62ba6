#!/usr/bin/env bash
# SIGKILL at any moment: trains a small Transformer or GPT (dropout on, a checkpoint every 3 steps), kills
# it with SIGKILL at 20 random moments, resuming after each, and checks that
#   - at least 8 of the kills ended a live process (status 137) once a checkpoint was on disk, so
#     that they tested resuming and not a run that had finished or never started (a series of 20
#     with fewer begins again, up to three times, its kill moments from a shorter or longer window);
#   - every killed or finished run's status is 137 or 0: a resume never fails;
#   - after every kill, every checkpoint file on disk loads (model, best, training state);
#   - the last run resumes, and its weights are byte-identical to those of an uninterrupted run of
#     the same steps;
#   - no temporary or uncommitted file is left behind.
#   kill_resume.sh SEQGRAD WORK_DIR [SEED [MODEL]]
# MODEL is transformer (the reverse task; the default) or gpt (a language model on a text); an
# empty SEED draws one.
set -uo pipefail
seqgrad=$1
work=$2
seed=${3:-$(date +%s)}
model=${4:-transformer}
# shellcheck source=../lib.sh
source "$(dirname "$0")/../lib.sh"
RANDOM=$seed
echo "kill moments drawn with seed $seed (run again with it to repeat them)"

fresh_dir "$work"
if [ "$model" = gpt ]; then
  for i in $(seq 1 600); do echo "the cat sat on the mat, and the dog ran after it; line $((i % 17))."; done \
    > "$work/text.txt"
  cat > "$work/tiny.json" <<'JSON'
{"model": "gpt", "d_model": 32, "n_heads": 2, "n_layers": 1, "d_ff": 64, "context": 32, "dropout": 0.1,
 "training": {"schedule": "constant", "lr": 0.003, "batch_sentences": 16, "eval_every_steps": 20,
              "save_every_steps": 3}}
JSON
  train=("$seqgrad" train --text "$work/text.txt" --config "$work/tiny.json" --threads 1 --show 0)
  loads=("$seqgrad" generate --prompt the --max-tokens 2 --threads 1 --checkpoint)
else
  cat > "$work/tiny.json" <<'JSON'
{"model": "transformer", "d_model": 32, "n_heads": 2, "n_layers": 1, "d_ff": 64, "norm": "pre", "dropout": 0.1,
 "training": {"synthetic": {"train_size": 2000, "dev_size": 30, "test_size": 30, "max_length": 6},
              "schedule": "constant", "lr": 0.003, "batch_sentences": 32, "eval_every_steps": 20,
              "save_every_steps": 3}}
JSON
  train=("$seqgrad" train --task reverse --model transformer --config "$work/tiny.json" --threads 1 --show 0)
  loads=("$seqgrad" predict --threads 1 abc --checkpoint)
fi
steps=300

# The uninterrupted run (a sanitizer build, or a machine busy with other tests, is slower).
started=$(date +%s%N)
"${train[@]}" --max-steps $steps --out "$work/reference" > "$work/reference.log" 2>&1 \
  || fail "the uninterrupted run failed: $(cat "$work/reference.log")"
span_ms=$(( ($(date +%s%N) - started) / 1000000 ))
# Each run is killed at a moment drawn over the length of a run of 4 steps, timed here: for a
# resumed run on a copy of the finished run, for a fresh run (which builds the data and the model
# first) from nothing; start-up, steps and checkpoint writes alike. A fresh run's range is twice its
# length, so that most kills of it come after its first checkpoint (step 3). The ranges follow the
# machine: on a fast one a resumed run of 4 steps takes 40-50 ms and 150 steps 350 ms, and a fixed
# range of 200 ms let each kill find the run up to 70 steps on, so that most runs had ended before
# their kill. A killed run keeps at most 3 of its steps since the last checkpoint, so 20
# kills take the run of 300 steps less than half way even when a busy machine wakes this script
# late, and the kills find it alive.
cp -r "$work/reference" "$work/calibration" || fail "cannot copy the uninterrupted run"
started=$(date +%s%N)
"$seqgrad" train --resume "$work/calibration" --max-steps $((steps + 4)) --threads 1 --show 0 \
  > "$work/calibration.log" 2>&1 || fail "resuming the finished run failed: $(cat "$work/calibration.log")"
window_ms=$(( ($(date +%s%N) - started) / 1000000 ))
started=$(date +%s%N)
"${train[@]}" --max-steps 4 --out "$work/fresh" > "$work/fresh.log" 2>&1 \
  || fail "a fresh run of 4 steps failed: $(cat "$work/fresh.log")"
fresh_window_ms=$(( 2 * ($(date +%s%N) - started) / 1000000 ))
# scale_windows NUMERATOR DENOMINATOR: both windows times the fraction, at least 10 ms (a floor that
# only keeps the ranges from being empty).
scale_windows() {
  window_ms=$((window_ms * $1 / $2))
  fresh_window_ms=$((fresh_window_ms * $1 / $2))
  [ "$window_ms" -ge 10 ] || window_ms=10
  [ "$fresh_window_ms" -ge 10 ] || fresh_window_ms=10
}
scale_windows 1 1
# kills_tally: the windows of a series of kills and what its kills found.
kills_tally() {
  echo "over a ${window_ms} ms window (${fresh_window_ms} ms for a fresh run), $landed kills ended a run with" \
       "a checkpoint on disk, $early came before one, $finished runs had ended"
}

# Every checkpoint file present must load: the model files through predict (generate for a
# language model), the training state through curves (which reads its progress).
check_loads() {
  local dir=$1 f
  for f in model best; do
    [ -f "$dir/$f.safetensors" ] || continue
    "${loads[@]}" "$dir/$f.safetensors" > /dev/null 2>&1 || fail "after kill $2, $dir/$f.safetensors does not load"
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
next_run() {
  if [ -f "$run/training.safetensors" ]; then
    run_command=("$seqgrad" train --resume "$run" --max-steps $steps --threads 1 --show 0)
  else
    run_command=("${train[@]}" --max-steps $steps --out "$run")
  fi
}
# A series of 20 kills on a fresh run. The windows were timed once, on a machine that may have been
# busier then (other tests) than during the kills, or less busy: when the runs finished before 8
# kills landed, the series starts again with windows half as long, and when the kills came before
# the first checkpoint, twice as long; after three series, the test fails.
for series in 1 2 3; do
  rm -rf "$run"
  landed=0   # kills that ended a live run after a checkpoint was on disk
  early=0    # kills before the first checkpoint
  finished=0 # runs that ended before their kill
  for kill in $(seq 1 20); do
    next_run
    "${run_command[@]}" > "$work/kill$kill.log" 2>&1 &
    pid=$!
    range=$window_ms
    [ -f "$run/training.safetensors" ] || range=$fresh_window_ms
    ms=$(( (RANDOM * 32768 + RANDOM) % range ))
    sleep "$((ms / 1000)).$(printf '%03d' $((ms % 1000)))"
    checkpoint=no
    [ -f "$run/training.safetensors" ] && checkpoint=yes  # before the kill: a checkpoint can only appear after
    kill -KILL $pid 2> /dev/null
    wait $pid 2> /dev/null
    status=$?
    case "$status/$checkpoint" in
      137/yes) landed=$((landed + 1)) ;;
      137/no) early=$((early + 1)) ;;
      0/*) finished=$((finished + 1)) ;;
      *) fail "run $kill ended with status $status before its kill: $(cat "$work/kill$kill.log")" ;;
    esac
    check_loads "$run" $kill
  done
  [ $landed -ge 8 ] && break
  [ "$series" -lt 3 ] || fail "too few kills tested a resume in three series; the last, series 3: $(kills_tally)"
  if [ $finished -gt 0 ]; then
    echo "series $series: $(kills_tally); again with the windows halved"
    scale_windows 1 2
  else
    echo "series $series: $(kills_tally); again with the windows doubled"
    scale_windows 2 1
  fi
done
[ -f "$run/training.safetensors" ] || fail "20 kills and no checkpoint was ever committed"
next_run
out=$("${run_command[@]}" 2>&1) || fail "the last run failed: $out"
grep -q "^Resuming" <<< "$out" || fail "the last run did not resume: $out"
check_loads "$run" final
grep -q "after $steps steps" <<< "$out" || fail "the last run did not finish at step $steps: $out"
cmp -s "$work/reference/model.safetensors" "$run/model.safetensors" \
  || fail "the final weights differ from the uninterrupted run's"
cmp -s "$work/reference/best.safetensors" "$run/best.safetensors" \
  || fail "the best weights differ from the uninterrupted run's"
leftovers=$(ls -A "$run" | grep -v -x -e model.safetensors -e best.safetensors -e training.safetensors)
[ -z "$leftovers" ] || fail "files left behind: $leftovers"
reached=$(cat "$work"/kill*.log | sed -n 's/^checkpoint saved at step \([0-9]*\).*/\1/p' | sort -n | tail -1)
echo "20 kills $(kills_tally) (runs of ${span_ms} ms; the run at step ${reached:-0} of $steps after them);" \
     "every checkpoint loaded after each, the final weights equal the uninterrupted run's, nothing left over"
