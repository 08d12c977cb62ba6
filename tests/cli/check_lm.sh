#!/usr/bin/env bash
# A language model end to end: `seqgrad train --model gpt --text`, its report (the split, the
# validation loss as nats, perplexity and bits per character), `eval` (the run's last figures again;
# --text's own count of tokens, figures that agree with each other, another text another loss),
# `generate` (the text written as it is made, the same for the same seed, tokens per second; int8
# and bf16 weights), a SentencePiece model with its own validation text (--val) stopped by Ctrl-C
# and resumed, `summary --model gpt`; and the bad inputs, each refused with a clear message
# and a status from 1 to 127, nothing written: an empty text, a text shorter than one window,
# invalid UTF-8, a prompt with unknown symbols under --strict, a temperature below 0, a top-p outside
# (0, 1], a top-k below 1, --text with a sequence-to-sequence model, a context above the model's,
# eval of a one-token text, with --split test, --metric or --test, or of two models.
set -uo pipefail
seqgrad=$1
work=$2
data=${3:-$(dirname "$0")/../../data/tinyshakespeare.txt}  # a text with words to cut into pieces
# shellcheck source=../lib.sh
source "$(dirname "$0")/../lib.sh"

fresh_dir "$work"
for i in $(seq 1 400); do echo "the cat sat on the mat, and the dog ran after it; line $((i % 17))."; done \
  > "$work/text.txt"
tiny=(--model gpt --n-layers 1 --d-model 32 --n-heads 2 --d-ff 64 --context 32 --batch-size 8 --threads 1)

# Training: the split and its sizes on the start line, evaluations over the whole validation text.
out=$("$seqgrad" train "${tiny[@]}" --text "$work/text.txt" --max-steps 40 --eval-every 20 --warmup-steps 5 \
      --out "$work/lm" 2>&1); status=$?
[ $status -eq 0 ] || fail "training a GPT exited $status: $out"
grep -q "characters to train on, .* to validate on (the last 10% of $work/text.txt)" <<< "$out" \
  || fail "the start line does not give the split: $out"
figures="loss [0-9]+\.[0-9]+ nats  perplexity [0-9]+\.[0-9]+  [0-9]+\.[0-9]+ bits per character  \([0-9]+ tokens\)"
grep -qE "dev after step 20 .*: $figures" <<< "$out" \
  || fail "no validation loss in nats, perplexity and bits per character: $out"
last_dev=$(grep -oE "dev after step 40 .*: $figures" <<< "$out" | grep -oE "$figures")
[ -n "$last_dev" ] || fail "no validation loss after step 40: $out"
grep -q "Best dev loss" <<< "$out" || fail "no best validation loss: $out"
[ -f "$work/lm/best.safetensors" ] || fail "no best weights"

# figures_of NAME OUTPUT CHARACTERS [TOKENS]: OUTPUT's figures hold together for a text of
# CHARACTERS characters: a loss over TOKENS tokens (each character but the first, given, unless
# said), perplexity e^loss, and bits per character loss x tokens / (characters x ln 2), each within
# the rounding of four or five digits.
figures_of() {
  [[ $2 =~ loss\ ([0-9.]+)\ nats\ \ perplexity\ ([0-9.]+)\ \ ([0-9.]+)\ bits\ per\ character\ \ \(([0-9]+)\ tokens ]] \
    || fail "$1: no figures in: $2"
  local loss=${BASH_REMATCH[1]} perplexity=${BASH_REMATCH[2]} bits=${BASH_REMATCH[3]} tokens=${BASH_REMATCH[4]}
  local expected=${4:-$(($3 - 1))}
  [ "$tokens" -eq "$expected" ] || fail "$1: $tokens tokens for a text of $3 characters (expected $expected)"
  awk -v l="$loss" -v p="$perplexity" -v b="$bits" -v t="$tokens" -v c="$3" 'function abs(x) { return x < 0 ? -x : x }
    BEGIN { exit !(abs(exp(l) - p) <= 2e-4 * p + 1e-3 && abs(l * t / (c * log(2)) - b) <= 2e-4 * b + 1e-3) }' \
    || fail "$1: loss $loss, perplexity $perplexity and $bits bits per character do not agree over $3 characters"
}

# eval: the run's validation text by default, as the run last measured it (the same weights);
# --text reads that text (its count of tokens, and a text the model never saw scores otherwise).
out=$("$seqgrad" eval --checkpoint "$work/lm" --threads 1 2>&1); status=$?
[ $status -eq 0 ] || fail "eval of the run's validation text exited $status: $out"
grep -qF "the run's validation text ($work/lm/best.safetensors, step 40): $last_dev" <<< "$out" \
  || fail "eval of the validation text does not repeat the run's last figures ($last_dev): $out"
head -n 50 "$work/text.txt" > "$work/other.txt"
out=$("$seqgrad" eval --checkpoint "$work/lm" --text "$work/other.txt" --threads 1 2>&1); status=$?
[ $status -eq 0 ] || fail "eval --text exited $status: $out"
figures_of "eval --text" "$out" "$(wc -m < "$work/other.txt")"
seen=$(grep -oE "loss [0-9.]+" <<< "$out")
printf 'qqqq zzzz xxxx qqqq zzzz xxxx\n%.0s' $(seq 1 20) > "$work/unseen.txt"
out=$("$seqgrad" eval --checkpoint "$work/lm" --text "$work/unseen.txt" --threads 1 2>&1); status=$?
[ $status -eq 0 ] || fail "eval --text of an unseen text exited $status: $out"
figures_of "eval --text (an unseen text)" "$out" "$(wc -m < "$work/unseen.txt")"
[ "$(grep -oE "loss [0-9.]+" <<< "$out")" != "$seen" ] || fail "two texts scored the same $seen: --text ignored?"

# generate: the prompt and its continuation; the same seed writes the same text, another seed
# another; temperature 0 repeats; the speed goes to standard error.
gen=("$seqgrad" generate --checkpoint "$work/lm" --threads 1)
a=$("${gen[@]}" --max-tokens 60 --prompt "the cat" --seed 3 2> "$work/gen.err"); status=$?
[ $status -eq 0 ] || fail "generate exited $status: $a $(cat "$work/gen.err")"
[[ "$a" == "the cat"* ]] && [ ${#a} -gt 40 ] || fail "generate did not continue the prompt: $a"
grep -q "generated 60 tokens in .* tokens/s" "$work/gen.err" || fail "no tokens per second: $(cat "$work/gen.err")"
b=$("${gen[@]}" --max-tokens 60 --prompt "the cat" --seed 3 2> /dev/null)
[ "$a" = "$b" ] || fail "the same seed wrote different texts: '$a' and '$b'"
c=$("${gen[@]}" --max-tokens 60 --prompt "the cat" --seed 4 --temperature 1.5 2> /dev/null)
[ "$a" != "$c" ] || fail "two seeds wrote the same text: '$a'"
g1=$("${gen[@]}" --temperature 0 --max-tokens 100 2> /dev/null)  # past the context of 32: the window slides
g2=$("${gen[@]}" --temperature 0 --max-tokens 100 --seed 9 2> /dev/null)
[ "$g1" = "$g2" ] && [ ${#g1} -gt 90 ] || fail "greedy generation did not repeat: '$g1' and '$g2'"
# --int8 and --bf16 sample from reduced-precision weights: the prompt continued, the same for the
# same seed; bf16 only where bfloat16 products run (bf16_expected, lib.sh), else refused.
i1=$("${gen[@]}" --int8 --max-tokens 40 --prompt "the cat" --seed 3 2> "$work/gen8.err"); status=$?
[ $status -eq 0 ] && [[ "$i1" == "the cat"* ]] && [ ${#i1} -gt 30 ] \
  || fail "generate --int8 exited $status: $i1 $(cat "$work/gen8.err")"
i2=$("${gen[@]}" --int8 --max-tokens 40 --prompt "the cat" --seed 3 2> /dev/null)
[ "$i1" = "$i2" ] || fail "generate --int8 wrote two texts for one seed: '$i1' and '$i2'"
out=$("${gen[@]}" --bf16 --max-tokens 40 --prompt "the cat" --seed 3 2>&1); status=$?
if bf16_expected; then
  [ $status -eq 0 ] && [[ "$out" == "the cat"* ]] || fail "generate --bf16 exited $status: $out"
else
  refused "generate --bf16 without bfloat16 products" $status "$out" "bf16 needs"
fi
out=$("${gen[@]}" --int8 --bf16 2>&1); status=$?
refused "generate with both --int8 and --bf16" $status "$out" "excludes"
printf 'the dog' > "$work/prompt.txt"
out=$("${gen[@]}" --prompt-file "$work/prompt.txt" --num-samples 2 2> /dev/null); status=$?
[ $status -eq 0 ] && [ "$(grep -c '^the dog' <<< "$out")" -eq 2 ] || fail "--prompt-file --num-samples 2: $out"
out=$("${gen[@]}" --prompt "THE CAT" 2>&1 > /dev/null); status=$?
[ $status -eq 0 ] && grep -q "6 of the prompt's 7 symbols are not in the model's vocabulary" <<< "$out" \
  || fail "unknown prompt symbols were not counted: $out"

# SentencePiece: a model of subwords trained on the text (and kept in the checkpoint), evaluated
# over a validation text of its own (--val) in fewer tokens than characters; generation writes
# text (pieces joined, no "▁"); Ctrl-C stops the run with a checkpoint and --resume goes on with
# the same pieces (the validation text in the same tokens) and the same validation text.
head -c 60000 "$data" > "$work/shakespeare.txt"
tail -c 6000 "$data" > "$work/shakespeare_val.txt"
spm=("$seqgrad" train "${tiny[@]}" --text "$work/shakespeare.txt" --val "$work/shakespeare_val.txt"
     --tokens sentencepiece --spm-vocab-size 200 --eval-every 10 --warmup-steps 5)
"${spm[@]}" --max-steps 100000 --out "$work/spm" > "$work/spm.log" 2>&1 &
job=$!
await_line $job "$work/spm.log" "checkpoint saved at step 20"
kill -INT $job
end_job $job 60 "the SentencePiece run, after Ctrl-C,"; status=$?
log=$(cat "$work/spm.log")
[ $status -eq 130 ] || fail "Ctrl-C should exit 130, got $status: $log"
grep -q "tokens: sentencepiece (200 pieces)" <<< "$log" || fail "the start line does not name the pieces: $log"
grep -q "to validate on ($work/shakespeare_val.txt)" <<< "$log" || fail "--val is not the validation text: $log"
steps=$(sed -n 's/^Stopped (interrupted) after \([0-9]*\) steps.*/\1/p' <<< "$log")
[ -n "$steps" ] || fail "Ctrl-C did not report where it stopped: $log"
val_chars=$(wc -m < "$work/shakespeare_val.txt")
first=$(grep -oE "dev after step 10 .*" <<< "$log")
tokens=$(grep -oE "\(([0-9]+) tokens\)" <<< "$first" | grep -oE "[0-9]+")
[ -n "$tokens" ] && [ "$tokens" -lt $((val_chars * 3 / 4)) ] \
  || fail "SentencePiece read $val_chars characters as ${tokens:-no} tokens (subwords: far fewer): $first"
figures_of "SentencePiece's dev figures" "$first" "$val_chars" "$tokens"
out=$("$seqgrad" train --resume "$work/spm" --max-steps $((steps + 10)) --threads 1 2>&1); status=$?
[ $status -eq 0 ] && grep -q "after $((steps + 10)) steps" <<< "$out" || fail "resuming the SentencePiece run: $out"
out=$("$seqgrad" eval --checkpoint "$work/spm" --threads 1 2>&1); status=$?
[ $status -eq 0 ] || fail "eval of the resumed SentencePiece run: $out"
figures_of "SentencePiece's eval after resuming" "$out" "$val_chars" "$tokens"
text=$("$seqgrad" generate --checkpoint "$work/spm" --prompt "ROMEO:" --max-tokens 30 --seed 2 --threads 1 2> /dev/null)
status=$?
[ $status -eq 0 ] && [[ "$text" == "ROMEO:"* ]] && [ ${#text} -gt 36 ] || fail "generate from pieces: $text"
grep -q $'\u2581' <<< "$text" && fail "generated text holds SentencePiece's word marks: $text"

# A config file that names its model needs no --model; a --model that differs is refused.
cat > "$work/lm.json" <<'JSON'
{"model": "gpt", "n_layers": 1, "d_model": 32, "n_heads": 2, "d_ff": 64, "context": 32,
 "training": {"batch_sentences": 8, "max_steps": 3, "eval_every_steps": 3}}
JSON
out=$("$seqgrad" train --config "$work/lm.json" --text "$work/text.txt" --threads 1 --out "$work/lm-config" 2>&1)
status=$?
[ $status -eq 0 ] && grep -q "^Training gpt on" <<< "$out" || fail "train --config naming gpt exited $status: $out"

# summary --model gpt walks its shapes.
out=$("$seqgrad" summary --model gpt --n-layers 2 --d-model 64 --n-heads 4 --context 32 2>&1); status=$?
[ $status -eq 0 ] && grep -q "token_embedding" <<< "$out" && grep -q "blocks.1" <<< "$out" \
  || fail "summary --model gpt: $out"

# Bad inputs: refused, nothing written.
: > "$work/empty.txt"
echo "to be or not" > "$work/short.txt"
printf 'caf\xe9 au lait, encore\n' > "$work/latin1.txt"
expect_refused() {  # NAME PATTERN COMMAND...: refused with PATTERN, no directory "$work/refused"
  local name=$1 pattern=$2
  shift 2
  rm -rf "$work/refused"
  out=$("$@" 2>&1); status=$?
  refused "$name" $status "$out" "$pattern"
  [ ! -e "$work/refused" ] || fail "$name: a refused run wrote $work/refused"
}
train=("$seqgrad" train "${tiny[@]}" --max-steps 2 --out "$work/refused")
expect_refused "an empty text" "empty.txt: the text is empty" "${train[@]}" --text "$work/empty.txt"
expect_refused "a text shorter than one window" "fewer than one window of 33" "${train[@]}" --text "$work/short.txt"
expect_refused "invalid UTF-8" "latin1.txt: invalid UTF-8 at byte 3 (line 1)" "${train[@]}" --text "$work/latin1.txt"
expect_refused "a missing text" "no_such.txt" "${train[@]}" --text "$work/no_such.txt"
expect_refused "--text with a sequence-to-sequence model" "language model" \
  "$seqgrad" train --model transformer --text "$work/text.txt" --max-steps 2 --out "$work/refused"
expect_refused "a prompt with unknown symbols under --strict" "6 symbols the vocabulary lacks" \
  "${gen[@]}" --prompt "THE CAT" --strict
expect_refused "a temperature below 0" "temperature" "${gen[@]}" --temperature -0.5
expect_refused "a top-p of 0" "--top-p: must be in (0, 1], got 0" "${gen[@]}" --top-p 0
expect_refused "a top-p above 1" "--top-p: must be in (0, 1], got 1.5" "${gen[@]}" --top-p 1.5
expect_refused "a negative top-k" "--top-k: must be 0 or more, got -1" "${gen[@]}" --top-k -1
expect_refused "a context above the model's" "above the model's, 32" "${gen[@]}" --context 64
expect_refused "eval with a context above the model's" "context" \
  "$seqgrad" eval --checkpoint "$work/lm" --context 64 --threads 1
printf 'a' > "$work/one.txt"
expect_refused "eval of a text of one token" "one.txt: the text has 1 tokens; a loss needs at least 2" \
  "$seqgrad" eval --checkpoint "$work/lm" --text "$work/one.txt" --threads 1
expect_refused "eval --split test of a language model" "a language model's run has a validation text only" \
  "$seqgrad" eval --checkpoint "$work/lm" --split test --threads 1
expect_refused "eval --metric of a language model" "--test and --metric are for models that translate" \
  "$seqgrad" eval --checkpoint "$work/lm" --metric bleu --threads 1
expect_refused "eval --test of a language model" "--test and --metric are for models that translate" \
  "$seqgrad" eval --checkpoint "$work/lm" --test "$work/other.txt" --threads 1
expect_refused "eval of two language models" "its loss is one model's" \
  "$seqgrad" eval --checkpoint "$work/lm" --checkpoint "$work/lm" --threads 1
expect_refused "--model other than the config's" "describes model gpt but --model is transformer" \
  "$seqgrad" train --model transformer --config "$work/lm.json" --text "$work/text.txt" --out "$work/refused"
sed 's/eval_every_steps/eval_every/' "$work/lm.json" > "$work/typo.json"
expect_refused "a config's unknown training key" "unknown key \"eval_every\"" \
  "$seqgrad" train --config "$work/typo.json" --text "$work/text.txt" --out "$work/refused"
expect_refused "summary of a config with an unknown training key" "unknown key \"eval_every\"" \
  "$seqgrad" summary --config "$work/typo.json"
expect_refused "an empty prompt" "the prompt is empty" "${gen[@]}" --prompt ""
expect_refused "generate from a missing checkpoint" "no checkpoint at" \
  "$seqgrad" generate --checkpoint "$work/nothing_here"
echo "language model programs: all checks passed"
