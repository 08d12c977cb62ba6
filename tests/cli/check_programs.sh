#!/usr/bin/env bash
# The train, eval, predict and summary programs end to end, on a tiny model and a synthetic task:
# a short run, Ctrl-C (it saves, says how to resume and exits 130; every wait has a limit), resuming
# it, evaluating and predicting from the checkpoint, in float32, int8 and bf16 (where bfloat16
# products run, else refused), --int8 with --bf16 and eval --text refused; every recipe in configs/
# is accepted; and a missing checkpoint,
# a missing or bad config or dictionary, a bad flag, a negative number and a beam out of range
# give a clear message and a non-zero exit, and a refused run leaves no directory behind.
set -uo pipefail
seqgrad=$1
configs=$2
work=$3
with_dnnl=${4:-0}  # 1: the build has oneDNN, so --int8 works
# shellcheck source=../lib.sh
source "$(dirname "$0")/../lib.sh"

fresh_dir "$work"
cat > "$work/tiny.json" <<'EOF'
{"model": "transformer", "d_model": 32, "n_heads": 2, "n_layers": 1, "d_ff": 64, "norm": "pre",
 "training": {"synthetic": {"train_size": 400, "dev_size": 40, "test_size": 40, "max_length": 6},
              "schedule": "constant", "lr": 0.003, "lr_decay": 1, "average_decay": 0}}
EOF
train=("$seqgrad" train --task reverse --model transformer --config "$work/tiny.json" --threads 1)
trained_steps=300  # enough for the tiny model to reverse most words (the int8 check needs a trained model)

# A short run: exit 0, a checkpoint, the best dev WER, some dev words.
out=$("${train[@]}" --max-steps 6 --out "$work/run" 2>&1); status=$?
[ $status -eq 0 ] || fail "a short run exited $status: $out"
[ -f "$work/run/model.safetensors" ] && [ -f "$work/run/best.safetensors" ] && [ -f "$work/run/training.safetensors" ] \
  || fail "the run left no complete checkpoint"
grep -q "Best dev WER" <<< "$out" || fail "the run did not report its best dev WER"
# Its log begins with what --version names, on one line; then the start line names the level of
# seqgrad's kernels (isa_level(), as SEQGRAD_MAX_CPU_ISA caps it) and the library the products of
# weights run on (float32_products_kernel()).
level=${SEQGRAD_MAX_CPU_ISA:-(portable|avx2|avx512)}
grep -qE "^seqgrad [0-9.]+; kernels: $level \(.*; products of weights: .*; OpenBLAS: .*; oneDNN: .*; MPI: " \
  <<< "$(head -1 <<< "$out")" || fail "the log does not begin with the runtime's line: $(head -1 <<< "$out")"
grep -qE "^Training transformer on reverse into .*\(1 thread, $level kernels, products on (OpenBLAS sgemm|oneDNN) " \
  <<< "$out" || fail "the start line does not name the kernels' level and the products' library: $(head -1 <<< "$out")"
# An unknown library is refused before anything is written.
out=$(SEQGRAD_FLOAT32_PRODUCTS=mkl "${train[@]}" --max-steps 6 --out "$work/mkl" 2>&1); status=$?
refused "an unknown SEQGRAD_FLOAT32_PRODUCTS" $status "$out" "not one of sgemm, onednn, auto"
[ ! -e "$work/mkl" ] || fail "the refused run left $work/mkl behind"

# Training into a directory that holds a checkpoint is refused.
out=$("${train[@]}" --max-steps 6 --out "$work/run" 2>&1); status=$?
refused "training over an existing checkpoint" $status "$out" "already holds a checkpoint"

# Ctrl-C: the run saves, says how to resume, and exits 130; --resume continues it.
"${train[@]}" --minutes 5 --out "$work/interrupted" > "$work/interrupted.log" 2>&1 &
pid=$!
start=$SECONDS
until [ -f "$work/interrupted/model.safetensors" ]; do  # its first checkpoint: it is training
  kill -0 $pid 2> /dev/null || fail "the run ended before its first checkpoint: $(cat "$work/interrupted.log")"
  if [ $((SECONDS - start)) -ge 120 ]; then
    stop_job $pid
    fail "no checkpoint after 120 s: $(cat "$work/interrupted.log")"
  fi
  sleep 0.1
done
sleep 0.5
kill -INT $pid
end_job $pid 60 "the run, after Ctrl-C,"; status=$?
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
echo "abc" > "$work/a_text.txt"
out=$("$seqgrad" eval --checkpoint "$work/run" --text "$work/a_text.txt" --threads 1 2>&1); status=$?
refused "eval --text of a model that translates" $status "$out" "--text is for language models"
for cmd in "eval --split test" "predict abc"; do
  out=$("$seqgrad" $cmd --checkpoint "$work/run" --int8 --bf16 --threads 1 2>&1); status=$?
  refused "$cmd with both --int8 and --bf16" $status "$out" "excludes"
done

# --int8: int8 weights with oneDNN; without it, a clear refusal. A model trained until it reverses
# most words gives nearly the same outputs with int8 weights as with float32 ones, and nearly the
# same error rates; int8 products gone wrong would not.
out=$("$seqgrad" predict --checkpoint "$work/run" --int8 abc cab 2>&1); status=$?
if [ "$with_dnnl" = 1 ]; then
  [ $status -eq 0 ] || fail "predict --int8 exited $status: $out"
  [ "$(grep -c '^abc\|^cab' <<< "$out")" -eq 2 ] || fail "predict --int8 did not print both words: $out"
  out=$("${train[@]}" --max-steps "$trained_steps" --out "$work/trained" 2>&1) \
    || fail "training the model for int8 failed: $out"
  words=(abc bad cafe dig ghee jab bead deaf hide jade fig aged bide each gibe head idea jibe dice chef)
  float32=$("$seqgrad" predict --checkpoint "$work/trained" --threads 1 "${words[@]}" 2>&1) \
    || fail "predict on the trained model failed: $float32"
  int8=$("$seqgrad" predict --checkpoint "$work/trained" --threads 1 --int8 "${words[@]}" 2>&1) \
    || fail "predict --int8 on the trained model failed: $int8"
  reversed=$(awk -F'\t' '{ r = ""; for (i = length($1); i > 0; i--) r = r substr($1, i, 1) } r == $2' <<< "$float32")
  [ "$(grep -c . <<< "$reversed")" -ge 16 ] || fail "the trained model reversed too few of 20 words: $float32"
  same=$(paste <(echo "$float32") <(echo "$int8") | awk -F'\t' '$1 == $3 && $2 == $4' | wc -l)
  [ "$same" -ge 18 ] || fail "int8 gave the float32 output for $same of 20 words: $int8 (float32: $float32)"
  rates() {  # WER and PER of the trained model on its test split, as "WER PER"
    "$seqgrad" eval --checkpoint "$work/trained" --split test --threads 1 "$@" 2>&1 \
      | sed -n 's/.*: WER \([0-9.]*\)%  PER \([0-9.]*\)%  (40 words)$/\1 \2/p'
  }
  read -r wer per <<< "$(rates)"
  read -r wer8 per8 <<< "$(rates --int8)"
  # float32 below 60% WER (untrained: near 100%); int8 within 10 points of its WER and 5 of its PER.
  awk -v w="${wer:-x}" -v p="${per:-x}" -v w8="${wer8:-x}" -v p8="${per8:-x}" 'BEGIN {
      d = w8 - w; e = p8 - p
      exit !(w ~ /^[0-9.]+$/ && w8 ~ /^[0-9.]+$/ && w < 60 && d * d <= 100 && e * e <= 25) }' \
    || fail "eval --int8 gave WER $wer8% and PER $per8%, float32 WER $wer% and PER $per%"
  # --bf16: bfloat16 weights where bfloat16 products run (bf16_expected, lib.sh), nearly the float32
  # outputs and error rates; elsewhere refused in one sentence.
  bf16=$("$seqgrad" predict --checkpoint "$work/trained" --threads 1 --bf16 "${words[@]}" 2>&1); status=$?
  if bf16_expected; then
    [ $status -eq 0 ] || fail "predict --bf16 exited $status: $bf16"
    same=$(paste <(echo "$float32") <(echo "$bf16") | awk -F'\t' '$1 == $3 && $2 == $4' | wc -l)
    [ "$same" -ge 18 ] || fail "bf16 gave the float32 output for $same of 20 words: $bf16 (float32: $float32)"
    read -r wer16 per16 <<< "$(rates --bf16)"
    awk -v w="${wer:-x}" -v p="${per:-x}" -v w8="${wer16:-x}" -v p8="${per16:-x}" 'BEGIN {
        d = w8 - w; e = p8 - p
        exit !(w8 ~ /^[0-9.]+$/ && d * d <= 100 && e * e <= 25) }' \
      || fail "eval --bf16 gave WER $wer16% and PER $per16%, float32 WER $wer% and PER $per%"
  else
    refused "predict --bf16 without bfloat16 products" $status "$bf16" "bf16 needs"
    out=$("$seqgrad" eval --checkpoint "$work/trained" --split test --threads 1 --bf16 2>&1); status=$?
    refused "eval --bf16 without bfloat16 products" $status "$out" "bf16 needs"
  fi
else
  [ $status -ne 0 ] && grep -q "libdnnl-dev" <<< "$out" || fail "predict --int8 without oneDNN gave $status: $out"
fi

# --accumulate: a step's batch (sentences of several lengths) cut into micro-batches, their
# gradients summed by tokens, gives the losses of the whole batch (to the 4 decimals printed).
cat > "$work/accumulate.json" <<'JSON'
{"d_model": 16, "n_heads": 2, "n_layers": 1, "d_ff": 32, "norm": "pre", "dropout": 0,
 "training": {"synthetic": {"train_size": 64, "dev_size": 8, "test_size": 8, "max_length": 8},
              "batch_sentences": 32, "schedule": "constant", "lr": 0.003, "eval_every_steps": 0,
              "label_smoothing": 0.1, "log_every": 1}}
JSON
losses_of() {  # OUT [FLAGS...]: "step loss" of each of 6 steps
  "$seqgrad" train --task reverse --model transformer --config "$work/accumulate.json" --max-steps 6 --threads 1 \
    --out "$work/$1" "${@:2}" 2>&1 | sed -n 's/^step \([0-9]*\) .*loss \([0-9.]*\) .*/\1 \2/p'
}
whole=$(losses_of accumulate1)
[ "$(wc -l <<< "$whole")" -eq 6 ] || fail "no loss for each of 6 steps: $whole"
for parts in 3 32; do
  got=$(losses_of "accumulate$parts" --accumulate $parts)
  [ "$got" = "$whole" ] || fail "--accumulate $parts gave other losses than one batch: $got / $whole"
done

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
refused "a beam wider than the program allows" $status "$out" "--beam: must be in \\[1, 256\\], got 100000"
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
# Judged by chrF: every dev line and the best weights' carry it beside WER and PER.
out=$("${corpus[@]}" --train "$work/pairs.tsv" --dev-metric chrf --eval-every 4 --out "$work/own_chrf" 2>&1)
status=$?
[ $status -eq 0 ] || fail "training judged by dev chrF exited $status: $out"
grep -q "Best dev WER [0-9.]*%  PER [0-9.]*%  ([0-9]* words)  chrF [0-9.]*;" <<< "$out" \
  || fail "a run judged by chrF did not report its best dev chrF: $out"
out=$("$seqgrad" train --model gpt --text "$work/pairs.tsv" --dev-metric bleu --max-steps 1 --out "$work/z" 2>&1)
status=$?
refused "a text judged by BLEU" $status "$out" "a text is judged by its loss"
[ ! -e "$work/z" ] || fail "a refused --dev-metric still created the output directory"
out=$("$seqgrad" eval --checkpoint "$work/own_gz" --test "$work/heldout.tsv" --metric bleu --metric chrf \
      --threads 1 2>&1)
status=$?
[ $status -eq 0 ] || fail "eval --test exited $status: $out"
number='\([0-9]\+\.[0-9][0-9]\)'  # a real number, as eval prints it
read -r wer bleu chrf < <(
  sed -n "s/.*: WER $number%  PER [0-9.]*%  (20 words)  BLEU $number  chrF $number$/\1 \2 \3/p" <<< "$out")
[ -n "$chrf" ] || fail "eval printed no WER, PER, BLEU, chrF: $out"
awk -v b="$bleu" -v c="$chrf" 'BEGIN { exit !(b <= 100 && c <= 100) }' || fail "BLEU $bleu or chrF $chrf is over 100"
# The same numbers from the outputs predict gives for the same sources, scored by score: eval
# decodes and scores what predict would print (score itself is checked by check_tools.sh).
cut -f1 "$work/heldout.tsv" | "$seqgrad" predict --checkpoint "$work/own_gz" --threads 1 > "$work/heldout.out" \
  2> "$work/heldout.err" || fail "predict on the held-out sources failed: $(cat "$work/heldout.err")"
out=$("$seqgrad" score --predictions "$work/heldout.out" --references "$work/heldout.tsv" --metric bleu \
      --metric chrf 2>&1)
grep -q ": WER $wer%  PER [0-9.]*%  (20 words)  BLEU $bleu  chrF $chrf$" <<< "$out" \
  || fail "eval gave WER $wer%, BLEU $bleu, chrF $chrf; score of predict's outputs: $out"
out=$("$seqgrad" eval --checkpoint "$work/own" --split dev --threads 1 2>&1); status=$?
[ $status -eq 0 ] || fail "eval of a corpus run's dev split exited $status: $out"
printf 'abc\n\nfed\n' > "$work/inputs.txt"
out=$("$seqgrad" predict --checkpoint "$work/own" --input "$work/inputs.txt" --beam 3 --nbest 2 --threads 1 \
      2>"$work/predict.err"); status=$?
[ $status -eq 0 ] || fail "predict --nbest exited $status: $out $(cat "$work/predict.err")"
{ grep -q "^1	1	" <<< "$out" && grep -q "^1	2	" <<< "$out" && grep -q "^3	2	" <<< "$out"; } \
  || fail "predict --nbest 2 did not print line, rank, output, score: $out"
grep -q "lines/s" "$work/predict.err" || fail "predict printed no throughput: $(cat "$work/predict.err")"
# The n-best lists are best first, and their first is what the same beam gives without --nbest.
awk -F'\t' '$1 == line && $4 > score { exit 1 } { line = $1; score = $4 }' <<< "$out" \
  || fail "predict --nbest 2 printed a better hypothesis second: $out"
best=$("$seqgrad" predict --checkpoint "$work/own" --input "$work/inputs.txt" --beam 3 --threads 1 2>/dev/null)
[ "$(awk -F'\t' '$2 == 1 { print $3 }' <<< "$out")" = "$(cut -f2 <<< "$best")" ] \
  || fail "predict --nbest 2's first hypotheses are not predict --beam 3's outputs: $out (beam 3: $best)"
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
