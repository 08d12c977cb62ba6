#!/usr/bin/env bash
# The smaller programs end to end: `seqgrad score` against error rates worked out by hand,
# `seqgrad attention` drawing a trained model's attention (an SVG with one grid per map, each row a
# distribution over the source, for the output that predict gives) and refusing bad input, and
# `seqgrad demo` learning what it says it learned.
set -uo pipefail
seqgrad=$1
work=$2
# shellcheck source=../lib.sh
source "$(dirname "$0")/../lib.sh"

fresh_dir "$work"

# ---- score ----
# Four words, "read" with two references. By hand: "dog" has 1 substitution in 3 phones, "bird" 1
# deletion in 3, "cat" is right and so is "read" (its nearest reference, "r eh d", 3 phones):
# WER 2/4 = 50.00%, PER 2/12 = 16.67%.
printf 'cat\tk a t\ndog\td o g\nbird\tb er d\nread\tr iy d\nread\tr eh d\n' > "$work/refs.tsv"
printf 'bird\tb d\ncat\tk a t\ndog\td a g\nread\tr eh d\n' > "$work/predicted.tsv"
out=$("$seqgrad" score --predictions "$work/predicted.tsv" --references "$work/refs.tsv" 2>&1); status=$?
[ $status -eq 0 ] || fail "score exited $status: $out"
[ "$out" = "$work/predicted.tsv: WER 50.00%  PER 16.67%  (4 words)" ] || fail "score: $out"
# No output at all: every word wrong, every reference phone deleted.
printf 'bird\t\ncat\t\ndog\t\nread\t\n' > "$work/empty.tsv"
out=$("$seqgrad" score --predictions "$work/empty.tsv" --references "$work/refs.tsv" 2>&1); status=$?
[ $status -eq 0 ] && grep -q "WER 100.00%  PER 100.00%  (4 words)$" <<< "$out" || fail "score of empty outputs: $out"
# Sentences: BLEU and chrF are 100 for outputs equal to the references, and lower, but above 0,
# with one word changed in each.
printf 'one\tthe cat sat on the mat today\ntwo\ta dog ran in the park at noon\n' > "$work/sentences.tsv"
cp "$work/sentences.tsv" "$work/same.tsv"
sed 's/mat/hat/; s/park/yard/' "$work/sentences.tsv" > "$work/changed.tsv"
bleu_chrf() {  # BLEU and chrF of a file of predictions against sentences.tsv, as "BLEU chrF"
  local out
  out=$("$seqgrad" score --predictions "$1" --references "$work/sentences.tsv" --metric bleu --metric chrf 2>&1) \
    || fail "score --metric exited non-zero: $out"
  sed -n 's/.*(2 words)  BLEU \([0-9]\+\.[0-9][0-9]\)  chrF \([0-9]\+\.[0-9][0-9]\)$/\1 \2/p' <<< "$out"
}
same=$(bleu_chrf "$work/same.tsv")
[ "$same" = "100.00 100.00" ] || fail "BLEU and chrF of the references themselves: '$same'"
read -r bleu chrf <<< "$(bleu_chrf "$work/changed.tsv")"
awk -v b="${bleu:-x}" -v c="${chrf:-x}" 'BEGIN { exit !(b + 0 > 10 && b + 0 < 90 && c + 0 > 50 && c + 0 < 100) }' \
  || fail "BLEU and chrF with a word changed per sentence: '$bleu' '$chrf'"
# A source without a prediction, and a line without a tab, are refused.
printf 'cat\tk a t\ndog\td o g\nread\tr iy d\n' > "$work/partial.tsv"
out=$("$seqgrad" score --predictions "$work/partial.tsv" --references "$work/refs.tsv" 2>&1); status=$?
refused "predictions missing a word" $status "$out" "has no prediction for \"bird\""
printf 'cat k a t\n' > "$work/notab.tsv"
out=$("$seqgrad" score --predictions "$work/notab.tsv" --references "$work/refs.tsv" 2>&1); status=$?
refused "a prediction line without a tab" $status "$out" "notab.tsv:1: expected source<TAB>prediction"

# ---- attention ----
cat > "$work/tiny.json" <<'EOF'
{"d_model": 16, "n_heads": 2, "n_layers": 2, "d_ff": 32, "norm": "pre",
 "hidden_size": 16, "num_layers": 1,
 "training": {"synthetic": {"train_size": 200, "dev_size": 20, "test_size": 20, "max_length": 6},
              "schedule": "constant", "lr": 0.003}}
EOF
# Trained long enough to write letters (an untrained model may write <s> or nothing).
for model in transformer attn_seq2seq seq2seq; do
  steps=150; [ $model = seq2seq ] && steps=2
  out=$("$seqgrad" train --task reverse --model $model --config "$work/tiny.json" --max-steps $steps --threads 1 \
        --out "$work/$model" 2>&1) || fail "training a tiny $model failed: $out"
done
# Each map is a grid of (output symbols) x (source symbols) cells, each cell's tooltip its weight;
# a row of a map is a distribution over the source, so its weights add up to 1.
check_heatmap() {  # check_heatmap MODEL WORD MAPS
  local model=$1 word=$2 maps=$3 out status
  out=$("$seqgrad" attention --checkpoint "$work/$model" "$word" --out "$work/$model.svg" 2>&1); status=$?
  [ $status -eq 0 ] || fail "attention ($model) exited $status: $out"
  # The rows are the symbols of the output predict gives (greedy), then </s> when it ended; the
  # columns the word's letters.
  local drawn predicted rows columns=${#word}
  drawn=$(sed -n "s/^$word -> //p" <<< "$out")
  predicted=$("$seqgrad" predict --checkpoint "$work/$model" --threads 1 "$word" 2>/dev/null | cut -f2)
  [ -n "$predicted" ] && [ "$(sed 's| </s>$||; s/ //g' <<< "$drawn")" = "$predicted" ] \
    || fail "attention ($model) drew the output '$drawn', predict gives '$predicted'"
  rows=${#predicted}
  [[ "$drawn" == *"</s>" ]] && rows=$((rows + 1))
  grep -q "^wrote $work/$model.svg ($maps attention maps\?, $rows x $columns)$" <<< "$out" \
    || fail "attention ($model) did not draw $maps maps of $rows x $columns: $out"
  local svg=$work/$model.svg
  [ "$(head -n 1 "$svg")" = '<?xml version="1.0" encoding="UTF-8"?>' ] && grep -q '^<svg' "$svg" \
    && [ "$(tail -n 1 "$svg")" = "</svg>" ] || fail "$svg is not an SVG document"
  [ "$(grep -c '<title>' "$svg")" = "$(grep -c '</title>' "$svg")" ] || fail "$svg has unclosed titles"
  local cells
  cells=$(grep -c '<title>output symbols .*, source symbols .*: [0-9.]*</title>' "$svg")
  [ "$cells" -eq $((maps * rows * columns)) ] \
    || fail "$svg has $cells cells, not $maps maps x $rows x $columns"
  sed -n 's|.*<title>output symbols .*: \([0-9.]*\)</title>.*|\1|p' "$svg" \
    | awk -v n="$columns" '{ s += $1 } NR % n == 0 { if (s < 0.99 || s > 1.01) bad = 1; s = 0 } END { exit bad }' \
    || fail "a row of $svg does not add up to 1"
}
check_heatmap transformer abcd 4    # 2 layers x 2 heads of cross-attention
check_heatmap attn_seq2seq cdbaf 1
out=$("$seqgrad" attention --checkpoint "$work/seq2seq" abc --out "$work/none.svg" 2>&1); status=$?
refused "attention of a model without attention" $status "$out" "has no attention to draw"
out=$("$seqgrad" attention --checkpoint "$work/transformer" "" --out "$work/empty.svg" 2>&1); status=$?
refused "attention of an empty word" $status "$out" "the word is empty"
out=$("$seqgrad" attention --checkpoint "$work/transformer" abc --max-len -1 --out "$work/zero.svg" 2>&1); status=$?
refused "attention with --max-len -1" $status "$out" "--max-len: must be 0 or more, got -1"
out=$("$seqgrad" attention --checkpoint "$work/nothing_here" abc --out "$work/missing.svg" 2>&1); status=$?
refused "attention of a missing checkpoint" $status "$out" "nothing_here"
out=$("$seqgrad" attention --checkpoint "$work/transformer" abc --out "$work/no/such/dir/a.svg" 2>&1); status=$?
refused "attention into a missing directory" $status "$out" "a.svg"
for f in none empty zero missing; do [ ! -e "$work/$f.svg" ] || fail "a refused attention left $f.svg"; done

# ---- demo ----
# 300 steps learn the sums of nearly every pair; one step learns next to nothing. The answers
# it prints agree with the count.
out=$("$seqgrad" demo 2>&1); status=$?
[ $status -eq 0 ] || fail "demo exited $status: $out"
correct=$(sed -n 's/^It now adds \([0-9]*\) of the 100 pairs correctly.*/\1/p' <<< "$out")
[ -n "$correct" ] && [ "$correct" -ge 95 ] || fail "demo did not learn to add: $out"
first=$(sed -n 's/^  step    1  loss \([0-9.]*\)$/\1/p' <<< "$out")
last=$(sed -n 's/^  step  300  loss \([0-9.]*\)$/\1/p' <<< "$out")
awk -v a="${first:-x}" -v b="${last:-x}" 'BEGIN { exit !(a + 0 > 2 && b + 0 < a / 10) }' \
  || fail "demo's loss did not fall from above 2 to a tenth: '$first' to '$last'"
right=$(sed -n 's/^  \([0-9]\) + \([0-9]\) = \([0-9]*\)$/\1 \2 \3/p' <<< "$out" | awk '$1 + $2 == $3' | wc -l)
[ "$right" -ge 5 ] || fail "demo printed $right right answers of 6 after saying $correct of 100: $out"
out=$("$seqgrad" demo --steps 1 2>&1); status=$?
correct=$(sed -n 's/^It now adds \([0-9]*\) of the 100 pairs correctly.*/\1/p' <<< "$out")
[ $status -eq 0 ] && [ -n "$correct" ] && [ "$correct" -lt 50 ] || fail "demo after one step: $out"
out=$("$seqgrad" demo --steps 0 2>&1); status=$?
refused "demo with --steps 0" $status "$out" "--steps must be positive"
echo "score, attention and demo behave"
