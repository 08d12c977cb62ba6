#!/usr/bin/env bash
# An encoder end to end: `seqgrad train --model bert` on labelled texts (classify) and on a text
# (mlm), `eval` of each (a classifier's table of accuracy, macro-F1, per-class measures and the
# confusion matrix, drawn with --out; a masked model's masked loss, as the run last measured it),
# `predict` (labels with probabilities, --top-k; the tokens for each <mask>), a classifier started
# from the masked model (--init-from); and the bad inputs, each refused with one line and a status
# from 1 to 127, nothing written: a label only dev has, a line with the wrong number of fields, an
# empty text, --init-from a GPT, --task classify with a GPT, predict without a <mask>.
set -uo pipefail
seqgrad=$1
work=$2
# shellcheck source=../lib.sh
source "$(dirname "$0")/../lib.sh"

fresh_dir "$work"
# Texts whose label one word gives away, among filler words.
make_texts() {  # make_texts COUNT SEED
  awk -v n="$1" -v seed="$2" 'BEGIN { srand(seed); split("the a it was and of", f, " ");
    split("good fine nice", y, " "); split("bad poor sad", no, " ");
    for (i = 0; i < n; i++) { line = f[int(rand() * 6) + 1] " " f[int(rand() * 6) + 1] " ";
      if (i % 2) print line y[int(rand() * 3) + 1] "\tyes"; else print line no[int(rand() * 3) + 1] "\tno" } }'
}
make_texts 300 1 > "$work/train.tsv"
make_texts 60 2 > "$work/dev.tsv"
make_texts 60 3 > "$work/test.tsv"
tiny=(--model bert --tokens char --n-layers 1 --d-model 32 --n-heads 2 --d-ff 64 --max-seq-len 32 --batch-size 16
      --threads 1 --warmup-steps 5 --lr 0.003)

# Classification: the data's report, evaluations as accuracy and macro-F1, the best weights.
out=$("$seqgrad" train "${tiny[@]}" --train "$work/train.tsv" --dev "$work/dev.tsv" --test "$work/test.tsv" \
      --max-steps 80 --eval-every 40 --out "$work/cls" 2>&1); status=$?
[ $status -eq 0 ] || fail "training a classifier exited $status: $out"
grep -q "2 labels, with their training counts: no 150, yes 150" <<< "$out" || fail "no labels in the report: $out"
grep -qE "dev after step 80 .*: accuracy [0-9.]+%  macro-F1 [0-9.]+%  \(60 texts\)" <<< "$out" \
  || fail "no dev accuracy and macro-F1: $out"
grep -q "Best dev accuracy" <<< "$out" || fail "no best dev accuracy: $out"

# eval: the test split as a table, the confusion matrix drawn.
out=$("$seqgrad" eval --checkpoint "$work/cls" --split test --out "$work/confusion.svg" --threads 1 2>&1); status=$?
[ $status -eq 0 ] || fail "eval of a classifier exited $status: $out"
grep -qE "^accuracy (9[0-9]|100)\.[0-9]+%" <<< "$out" || fail "the classifier did not learn (or no accuracy): $out"
grep -q "precision" <<< "$out" || fail "no per-class table: $out"
grep -q "<svg" "$work/confusion.svg" && grep -q "predicted" "$work/confusion.svg" || fail "no confusion matrix drawn"
out2=$("$seqgrad" eval --checkpoint "$work/cls" --test "$work/test.tsv" --threads 1 2>&1)
[ "$(tail -n +2 <<< "$out" | grep -v "^wrote ")" = "$(tail -n +2 <<< "$out2")" ] \
  || fail "--test of the same file differs: $out2"

# predict: a label and its probability per input; --top-k 2 gives both, summing to 1.
out=$("$seqgrad" predict --checkpoint "$work/cls" "it was good" "it was bad" --threads 1 2>&1); status=$?
[ $status -eq 0 ] || fail "predict with a classifier exited $status: $out"
[ "$out" = "$(printf 'it was good\tyes\t%s\nit was bad\tno\t%s' "$(cut -f3 <<< "$out" | head -1)" \
  "$(cut -f3 <<< "$out" | tail -1)")" ] || fail "predict's labels: $out"
# --int8: the same labels from int8 products (test_encoder_tasks.cpp checks that the weights are
# packed in int8; the flag was once accepted and ignored for encoders).
labels=$(cut -f1,2 <<< "$out")
out8=$("$seqgrad" predict --checkpoint "$work/cls" "it was good" "it was bad" --int8 --threads 1 2>&1); status=$?
[ $status -eq 0 ] && [ "$(cut -f1,2 <<< "$out8")" = "$labels" ] || fail "predict --int8 with a classifier: $out8"
out=$(echo "it was good" | "$seqgrad" predict --checkpoint "$work/cls" --top-k 2 --threads 1 2>&1)
awk -F'\t' 'NF != 5 || $3 + $5 < 0.999 || $3 + $5 > 1.001 { bad = 1 } END { exit bad }' <<< "$out" \
  || fail "--top-k 2: $out"

# A masked language model on a text, evaluated again by eval, then fill-mask and a classifier from it.
for i in $(seq 1 300); do echo "the cat sat on the mat, and the dog ran after it."; done > "$work/text.txt"
out=$("$seqgrad" train "${tiny[@]}" --text "$work/text.txt" --max-steps 60 --eval-every 30 --out "$work/mlm" 2>&1)
status=$?
[ $status -eq 0 ] || fail "training a masked language model exited $status: $out"
figures="masked loss [0-9]+\.[0-9]+ nats  accuracy [0-9.]+%  \([0-9]+ masked tokens\)"
last=$(grep -oE "dev after step 60 .*: $figures" <<< "$out" | grep -oE "$figures")
[ -n "$last" ] || fail "no masked loss: $out"
out=$("$seqgrad" eval --checkpoint "$work/mlm/model.safetensors" --threads 1 2>&1)
grep -qF "$last" <<< "$out" || fail "eval does not repeat the run's masked loss ($last): $out"
out=$("$seqgrad" predict --checkpoint "$work/mlm" "the cat s<mask>t on the <mask>at" --top-k 3 --threads 1 2>&1)
status=$?
[ $status -eq 0 ] || fail "fill-mask exited $status: $out"
[ "$(wc -l <<< "$out")" -eq 2 ] && awk -F'\t' 'NF != 8 { bad = 1 } END { exit bad }' <<< "$out" \
  || fail "fill-mask should give 3 tokens for each of 2 masks: $out"
out=$("$seqgrad" train "${tiny[@]}" --train "$work/train.tsv" --dev "$work/dev.tsv" --init-from "$work/mlm" \
      --max-steps 10 --eval-every 10 --out "$work/tuned" 2>&1); status=$?
[ $status -eq 0 ] || fail "a classifier from the masked model exited $status: $out"
grep -q "the encoder from $work/mlm/best.safetensors (step [0-9]*): [0-9]* tensors; new: classifier.weight" <<< "$out" \
  || fail "the start from the masked model is not reported: $out"

# Bad input: one line each, nothing written.
printf 'good day\tyes\nbad day\tmaybe\n' > "$work/dev-new.tsv"
out=$("$seqgrad" train "${tiny[@]}" --train "$work/train.tsv" --dev "$work/dev-new.tsv" --max-steps 1 \
      --out "$work/bad1" 2>&1)
refused "a label only dev has" $? "$out" "dev-new.tsv:2.*maybe"
printf 'good day\tyes\nbad\tday\tno\n' > "$work/fields.tsv"
out=$("$seqgrad" train "${tiny[@]}" --train "$work/fields.tsv" --max-steps 1 --out "$work/bad2" 2>&1)
refused "a line of three fields after one of two" $? "$out" "fields.tsv:2"
printf 'good day\tyes\n\tno\n' > "$work/empty.tsv"
out=$("$seqgrad" train "${tiny[@]}" --train "$work/empty.tsv" --max-steps 1 --out "$work/bad3" 2>&1)
refused "an empty text" $? "$out" "empty.tsv:2"
"$seqgrad" train --model gpt --n-layers 1 --d-model 32 --n-heads 2 --d-ff 64 --context 16 --batch-size 8 \
  --text "$work/text.txt" --max-steps 1 --threads 1 --out "$work/gpt" > /dev/null 2>&1 || fail "a GPT did not train"
out=$("$seqgrad" train "${tiny[@]}" --train "$work/train.tsv" --init-from "$work/gpt" --max-steps 1 \
      --out "$work/bad4" 2>&1)
refused "--init-from a GPT" $? "$out" "holds a \"gpt\" model, not a \"bert\""
out=$("$seqgrad" train --model gpt --task classify --train "$work/train.tsv" --max-steps 1 --out "$work/bad5" 2>&1)
refused "classify with a GPT" $? "$out" "the task \"classify\" trains an encoder (bert), not \"gpt\""
for d in bad1 bad2 bad3 bad4 bad5; do [ ! -e "$work/$d" ] || fail "a refused run wrote $work/$d"; done
out=$("$seqgrad" predict --checkpoint "$work/mlm" "no masks here" --threads 1 2>&1)
refused "fill-mask without a mask" $? "$out" "has no <mask>"
out=$("$seqgrad" eval --checkpoint "$work/mlm" --out "$work/x.svg" --threads 1 2>&1)
refused "a confusion matrix of a masked model" $? "$out" "--test and --out are a classifier's"
echo "encoder: OK"
