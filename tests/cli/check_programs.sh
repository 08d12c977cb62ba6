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
with_dnnl=${4:-0}  # 1: the build has oneDNN, so --int8 works
# shellcheck source=../lib.sh
source "$(dirname "$0")/../lib.sh"

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
grep -q "Best dev WER" <<< "$out" || fail "the run did not report its best dev WER"

# Training into a directory that holds a checkpoint is refused.
out=$("${train[@]}" --max-steps 6 --out "$work/run" 2>&1); status=$?
refused "training over an existing checkpoint" $status "$out" "already holds a checkpoint"

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
grep -q "after $((steps + 3)) steps" <<< "$out" || fail "the resumed run did not stop at step $((steps + 3)): $out"

# eval and predict read the checkpoint.
out=$("$seqgrad" eval --checkpoint "$work/run" --split test --threads 1 2>&1); status=$?
[ $status -eq 0 ] || fail "eval exited $status: $out"
grep -q "WER .*PER .*(40 words)" <<< "$out" || fail "eval printed no WER and PER over 40 words: $out"
out=$("$seqgrad" predict --checkpoint "$work/run" abc 2>&1); status=$?
[ $status -eq 0 ] || fail "predict exited $status: $out"
grep -q "^abc" <<< "$out" || fail "predict did not print the word: $out"

# --int8: int8 weights with oneDNN; without it, a clear refusal.
out=$("$seqgrad" predict --checkpoint "$work/run" --int8 abc cab 2>&1); status=$?
if [ "$with_dnnl" = 1 ]; then
  [ $status -eq 0 ] || fail "predict --int8 exited $status: $out"
  [ "$(grep -c '^abc\|^cab' <<< "$out")" -eq 2 ] || fail "predict --int8 did not print both words: $out"
  out=$("$seqgrad" eval --checkpoint "$work/run" --split test --threads 1 --int8 2>&1); status=$?
  [ $status -eq 0 ] || fail "eval --int8 exited $status: $out"
  grep -q "WER .*PER .*(40 words)" <<< "$out" || fail "eval --int8 printed no WER and PER: $out"
else
  [ $status -ne 0 ] && grep -q "libdnnl-dev" <<< "$out" || fail "predict --int8 without oneDNN gave $status: $out"
fi

# Every recipe of the results is a valid config.
for config in "$configs"/*.json; do
  model=$(sed -n 's/.*"model": *"\([a-z_0-9]*\)".*/\1/p' "$config" | head -n 1)
  "$seqgrad" summary --model "$model" --config "$config" > /dev/null 2>&1 || fail "summary rejects $config"
done

# A missing checkpoint, a missing or bad config, a bad flag.
for cmd in eval predict; do
  extra=(); [ $cmd = predict ] && extra=(abc)
  out=$("$seqgrad" $cmd --checkpoint "$work/nothing_here" "${extra[@]}" 2>&1); status=$?
  refused "$cmd on a missing checkpoint" $status "$out" "no checkpoint at $work/nothing_here"
done
out=$("$seqgrad" train --task reverse --model transformer --config "$work/missing.json" --max-steps 1 \
      --out "$work/x" 2>&1)
status=$?
refused "a missing config" $status "$out" "missing.json"
echo '{"model": "transformer", "training": {"epoch": 3}}' > "$work/typo.json"
out=$("$seqgrad" train --task reverse --model transformer --config "$work/typo.json" --max-steps 1 --out "$work/y" 2>&1)
status=$?
refused "a config with an unknown key" $status "$out" 'unknown key "epoch"'
[ ! -e "$work/y" ] || fail "a rejected config still created the output directory"
out=$("$seqgrad" train --task g2p --model transformer --dictionary "$work/no_such.dict" --max-steps 1 \
      --out "$work/d" 2>&1)
status=$?
refused "a missing dictionary" $status "$out" "no_such.dict: cannot open"
[ ! -e "$work/d" ] || fail "a run refused for its data still created the output directory"
out=$("$seqgrad" train --bogus 2>&1); status=$?
refused "a bad flag" $status "$out" "--bogus"
# A negative number is refused, not read as "not given".
out=$("$seqgrad" train --task reverse --model transformer --lr -0.5 --max-steps 1 --out "$work/z" 2>&1); status=$?
refused "a negative --lr" $status "$out" "--lr: must be positive, got -0.5"
[ ! -e "$work/z" ] || fail "a refused flag still created the output directory"
out=$("$seqgrad" predict --checkpoint "$work/run" --beam 100000 abc 2>&1); status=$?
refused "a beam wider than the program allows" $status "$out" "--beam: Value 100000 not in range 1 to 256"
# ---- your own data: a corpus of pairs, from training to predictions ----
# Made-up words and their reversals: a TSV, and the same as aligned, gzip-compressed files.
for i in $(seq 1 600); do
  w=$(printf '%x' $((i * 2654435761 % 1000003)) | tr '0-9' 'g-p')
  printf '%s\t%s\n' "$w" "$(echo "$w" | rev)"
done > "$work/pairs.tsv"
cut -f1 "$work/pairs.tsv" | gzip > "$work/src.txt.gz"
cut -f2 "$work/pairs.tsv" | gzip > "$work/tgt.txt.gz"
head -n 20 "$work/pairs.tsv" > "$work/heldout.tsv"
cat > "$work/corpus.json" <<'EOF'
{"model": "attn_seq2seq", "hidden_size": 32, "num_layers": 1,
 "training": {"schedule": "constant", "lr": 0.003, "batch_sentences": 32}}
EOF
corpus=("$seqgrad" train --model attn_seq2seq --config "$work/corpus.json" --threads 1 --max-steps 8)
out=$("${corpus[@]}" --train "$work/pairs.tsv" --out "$work/own" 2>&1); status=$?
[ $status -eq 0 ] || fail "training on a TSV exited $status: $out"
grep -q "pairs.tsv: [0-9]* training pairs, [0-9]* dev sources" <<< "$out" \
  || fail "no start line with the counts: $out"
grep -q "dev and test carved from .*pairs.tsv" <<< "$out" \
  || fail "the start line did not say dev and test were carved: $out"
grep -q "unknown tokens: .* in train" <<< "$out" || fail "no count of unknown tokens: $out"
out=$("${corpus[@]}" --train "$work/src.txt.gz" "$work/tgt.txt.gz" --dev "$work/heldout.tsv" \
      --tgt-tokens sentencepiece \
      --spm-vocab-size 20 --out "$work/own_gz" 2>&1); status=$?
[ $status -eq 0 ] || fail "training on aligned gzip files with a SentencePiece target exited $status: $out"
grep -q "target sentencepiece" <<< "$out" || fail "the start line did not name the SentencePiece target: $out"
out=$("$seqgrad" eval --checkpoint "$work/own_gz" --test "$work/heldout.tsv" --metric bleu --metric chrf \
      --threads 1 2>&1)
status=$?
[ $status -eq 0 ] || fail "eval --test exited $status: $out"
grep -q "WER .*PER .*(20 words).*BLEU [0-9.]*  chrF [0-9.]*" <<< "$out" \
  || fail "eval printed no WER, PER, BLEU, chrF: $out"
out=$("$seqgrad" eval --checkpoint "$work/own" --split dev --threads 1 2>&1); status=$?
[ $status -eq 0 ] || fail "eval of a corpus run's dev split exited $status: $out"
printf 'abc\n\nfed\n' > "$work/inputs.txt"
out=$("$seqgrad" predict --checkpoint "$work/own" --input "$work/inputs.txt" --beam 3 --nbest 2 --threads 1 \
      2>"$work/predict.err"); status=$?
[ $status -eq 0 ] || fail "predict --nbest exited $status: $out $(cat "$work/predict.err")"
{ grep -q "^1	1	" <<< "$out" && grep -q "^1	2	" <<< "$out" && grep -q "^3	2	" <<< "$out"; } \
  || fail "predict --nbest 2 did not print line, rank, output, score: $out"
grep -q "lines/s" "$work/predict.err" || fail "predict printed no throughput: $(cat "$work/predict.err")"
out=$(printf 'abc\nfed\n' | "$seqgrad" predict --checkpoint "$work/own" --threads 1 2>/dev/null); status=$?
[ $status -eq 0 ] && [ "$(echo "$out" | wc -l)" -eq 2 ] || fail "predict from standard input gave $status: $out"
# Bad data: refused with its file and line, or trained on and counted with --skip-invalid.
{ cat "$work/pairs.tsv"; echo "no tab on this line"; } > "$work/bad.tsv"
out=$("${corpus[@]}" --train "$work/bad.tsv" --out "$work/bad" 2>&1); status=$?
refused "a line without a tab" $status "$out" "bad.tsv:601: no tab"
[ ! -e "$work/bad" ] || fail "a refused corpus still created the output directory"
out=$("${corpus[@]}" --train "$work/bad.tsv" --skip-invalid --out "$work/skipped" 2>&1); status=$?
[ $status -eq 0 ] || fail "--skip-invalid exited $status: $out"
grep -q "skipped 1 invalid line" <<< "$out" || fail "--skip-invalid did not say what it skipped: $out"
head -n 5 "$work/pairs.tsv" | cut -f2 > "$work/short.txt"
out=$("${corpus[@]}" --train "$work/src.txt.gz" "$work/short.txt" --out "$work/uneven" 2>&1); status=$?
refused "aligned files of different lengths" $status "$out" "src.txt.gz has 600, .*short.txt has 5"
echo "not a model" > "$work/broken.model"
out=$("${corpus[@]}" --train "$work/pairs.tsv" --src-tokens sentencepiece --src-spm-model "$work/broken.model" \
      --out "$work/spm" 2>&1); status=$?
refused "a SentencePiece model that does not load" $status "$out" "broken.model is not a SentencePiece model"
: > "$work/empty.tsv"
out=$("${corpus[@]}" --train "$work/empty.tsv" --out "$work/empty" 2>&1); status=$?
refused "an empty corpus" $status "$out" "empty train or dev split"
echo "the seqgrad programs behave"
