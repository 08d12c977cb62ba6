#!/usr/bin/env bash
# The train, eval, predict and summary programs end to end, on a tiny model and a synthetic task:
# a short run, Ctrl-C (it saves, says how to resume and exits 130), resuming it, evaluating and
# predicting from the checkpoint; every recipe in configs/ is accepted; and a missing checkpoint,
# a missing or bad config or dictionary, a bad flag, a negative number and a beam out of range
# give a clear message and a non-zero exit, and a refused run leaves no directory behind.
set -uo pipefail
seqgrad=$1
configs=$2
work=$3
fail() { echo "FAILED: $*"; exit 1; }

rm -rf "$work" && mkdir -p "$work" || fail "cannot create $work"
cat > "$work/tiny.json" <<'EOF'
{"model": "transformer", "d_model": 32, "n_heads": 2, "n_layers": 1, "d_ff": 64, "norm": "pre",
 "training": {"synthetic": {"train_size": 400, "dev_size": 40, "test_size": 40, "max_length": 6},
              "schedule": "constant", "lr": 0.003}}
EOF
train=("$seqgrad" train --task reverse --model transformer --config "$work/tiny.json" --threads 1)

# A short run: exit 0, a checkpoint, the best dev WER, some dev words.
out=$("${train[@]}" --max-steps 6 --out "$work/run" 2>&1); status=$?
[ $status -eq 0 ] || fail "a short run exited $status: $out"
[ -f "$work/run/model.safetensors" ] && [ -f "$work/run/best.safetensors" ] && [ -f "$work/run/training.safetensors" ] \
  || fail "the run left no complete checkpoint"
echo "$out" | grep -q "Best dev WER" || fail "the run did not report its best dev WER"

# Training into a directory that holds a checkpoint is refused.
out=$("${train[@]}" --max-steps 6 --out "$work/run" 2>&1); status=$?
[ $status -ne 0 ] || fail "training over an existing checkpoint should exit non-zero"
echo "$out" | grep -q "already holds a checkpoint" || fail "no message for an existing checkpoint: $out"

# Ctrl-C: the run saves, says how to resume, and exits 130; --resume continues it.
"${train[@]}" --minutes 5 --out "$work/interrupted" > "$work/interrupted.log" 2>&1 &
pid=$!
for _ in $(seq 100); do  # until its first checkpoint shows it is training (at most 10 s)
  [ -f "$work/interrupted/model.safetensors" ] && break
  sleep 0.1
done
sleep 0.5
kill -INT $pid
wait $pid; status=$?
[ $status -eq 130 ] || fail "Ctrl-C should exit 130, got $status: $(cat "$work/interrupted.log")"
grep -q "train --resume $work/interrupted" "$work/interrupted.log" || fail "Ctrl-C did not say how to resume"
steps=$(sed -n 's/^Stopped (interrupted) after \([0-9]*\) steps.*/\1/p' "$work/interrupted.log")
[ -n "$steps" ] || fail "Ctrl-C did not report where it stopped: $(cat "$work/interrupted.log")"
out=$("$seqgrad" train --resume "$work/interrupted" --max-steps $((steps + 3)) --threads 1 2>&1); status=$?
[ $status -eq 0 ] || fail "resuming exited $status: $out"
echo "$out" | grep -q "after $((steps + 3)) steps" || fail "the resumed run did not stop at step $((steps + 3)): $out"

# eval and predict read the checkpoint.
out=$("$seqgrad" eval --checkpoint "$work/run" --split test --threads 1 2>&1); status=$?
[ $status -eq 0 ] || fail "eval exited $status: $out"
echo "$out" | grep -q "WER .*PER .*(40 words)" || fail "eval printed no WER and PER over 40 words: $out"
out=$("$seqgrad" predict --checkpoint "$work/run" abc 2>&1); status=$?
[ $status -eq 0 ] || fail "predict exited $status: $out"
echo "$out" | grep -q "^abc" || fail "predict did not print the word: $out"

# Every recipe of the results is a valid config.
for config in "$configs"/*.json; do
  model=$(sed -n 's/.*"model": *"\([a-z_0-9]*\)".*/\1/p' "$config" | head -n 1)
  "$seqgrad" summary --model "$model" --config "$config" > /dev/null 2>&1 || fail "summary rejects $config"
done

# A missing checkpoint, a missing or bad config, a bad flag.
for cmd in eval predict; do
  extra=(); [ $cmd = predict ] && extra=(abc)
  out=$("$seqgrad" $cmd --checkpoint "$work/nothing_here" "${extra[@]}" 2>&1); status=$?
  [ $status -ne 0 ] || fail "$cmd on a missing checkpoint should exit non-zero"
  echo "$out" | grep -q "no checkpoint at $work/nothing_here" || fail "$cmd: no message naming the missing checkpoint: $out"
done
out=$("$seqgrad" train --task reverse --model transformer --config "$work/missing.json" --max-steps 1 --out "$work/x" 2>&1)
status=$?
[ $status -ne 0 ] || fail "a missing config should exit non-zero"
echo "$out" | grep -q "missing.json" || fail "no message naming the missing config: $out"
echo '{"model": "transformer", "training": {"epoch": 3}}' > "$work/typo.json"
out=$("$seqgrad" train --task reverse --model transformer --config "$work/typo.json" --max-steps 1 --out "$work/y" 2>&1)
status=$?
[ $status -ne 0 ] || fail "a config with an unknown key should exit non-zero"
echo "$out" | grep -q 'unknown key "epoch"' || fail "no message naming the unknown key: $out"
[ ! -e "$work/y" ] || fail "a rejected config still created the output directory"
out=$("$seqgrad" train --task g2p --model transformer --dictionary "$work/no_such.dict" --max-steps 1 --out "$work/d" 2>&1)
status=$?
[ $status -ne 0 ] || fail "a missing dictionary should exit non-zero"
echo "$out" | grep -q "no_such.dict: cannot open" || fail "no message naming the missing dictionary: $out"
[ ! -e "$work/d" ] || fail "a run refused for its data still created the output directory"
out=$("$seqgrad" train --bogus 2>&1); status=$?
[ $status -ne 0 ] || fail "a bad flag should exit non-zero"
echo "$out" | grep -q -- "--bogus" || fail "no message naming the bad flag: $out"
# A negative number is refused, not read as "not given".
out=$("$seqgrad" train --task reverse --model transformer --lr -0.5 --max-steps 1 --out "$work/z" 2>&1); status=$?
[ $status -ne 0 ] || fail "a negative --lr should exit non-zero"
echo "$out" | grep -q -- "--lr: must be positive, got -0.5" || fail "no message naming the bad --lr: $out"
[ ! -e "$work/z" ] || fail "a refused flag still created the output directory"
out=$("$seqgrad" predict --checkpoint "$work/run" --beam 100000 abc 2>&1); status=$?
[ $status -ne 0 ] || fail "a beam wider than the program allows should exit non-zero"
echo "$out" | grep -q -- "--beam: Value 100000 not in range 1 to 256" || fail "no message naming the beam's range: $out"
echo "the seqgrad programs behave"
