#!/usr/bin/env bash
# Ensembles and averaged checkpoints end to end: `eval` and `predict` with several --checkpoint
# flags (two copies of one model score as the model; a mixed pair decodes; bad weights and a
# different target vocabulary refused), `train --keep-checkpoints` and `seqgrad average` (the
# mean loads, evaluates and resumes; bad requests refused and nothing written).
set -uo pipefail
seqgrad=$1
work=$2
# shellcheck source=../lib.sh
source "$(dirname "$0")/../lib.sh"

fresh_dir "$work"
cat > "$work/tiny.json" <<'JSON'
{"d_model": 16, "n_heads": 2, "n_layers": 1, "d_ff": 32, "norm": "pre",
 "hidden_size": 16, "num_layers": 1,
 "training": {"synthetic": {"train_size": 200, "dev_size": 30, "test_size": 30, "max_length": 6},
              "schedule": "constant", "lr": 0.003, "eval_every_steps": 30}}
JSON
for model in transformer attn_seq2seq; do
  out=$("$seqgrad" train --task reverse --model $model --config "$work/tiny.json" --max-steps 120 --threads 1 \
        --keep-checkpoints 3 --out "$work/$model" 2>&1) || fail "training a tiny $model failed: $out"
done
kept=$(cd "$work/transformer" && ls step-*.safetensors | tr '\n' ' ')
[ "$kept" = "step-000000060.safetensors step-000000090.safetensors step-000000120.safetensors " ] \
  || fail "--keep-checkpoints 3 kept: $kept"

# ---- ensembles ----
wer_of() { sed -n 's/.*: WER \([0-9.]*\)%.*/\1/p' <<< "$1"; }
one=$("$seqgrad" eval --checkpoint "$work/transformer" --beam 3 --threads 1 2>&1) || fail "eval: $one"
two=$("$seqgrad" eval --checkpoint "$work/transformer" --checkpoint "$work/transformer" --beam 3 --threads 1 2>&1) \
  || fail "eval of two copies: $two"
[ -n "$(wer_of "$one")" ] && [ "$(wer_of "$one")" = "$(wer_of "$two")" ] \
  || fail "two copies of one checkpoint score differently from one: '$one' / '$two'"
grep -q "weight 0.5 + .*weight 0.5" <<< "$two" || fail "eval of an ensemble does not name its models: $two"
mixed=$("$seqgrad" eval --checkpoint "$work/transformer" --checkpoint "$work/attn_seq2seq" --weights 3 1 \
        --beam 3 --threads 1 2>&1) || fail "eval of a transformer with an attention LSTM: $mixed"
grep -q "weight 0.75 + .*attn_seq2seq.*weight 0.25, beam 3): WER" <<< "$mixed" || fail "mixed ensemble: $mixed"
out=$("$seqgrad" predict --checkpoint "$work/transformer" --checkpoint "$work/attn_seq2seq" --beam 2 --threads 1 \
      abcd 2>/dev/null) || fail "predict with two checkpoints: $out"
[[ "$out" == abcd$'\t'* ]] || fail "predict with two checkpoints printed: $out"
out=$("$seqgrad" eval --checkpoint "$work/transformer" --checkpoint "$work/attn_seq2seq" --weights 1 2>&1); status=$?
refused "one weight for two checkpoints" $status "$out" "one weight per model"
out=$("$seqgrad" eval --checkpoint "$work/transformer" --checkpoint "$work/attn_seq2seq" --weights 1 0 2>&1)
status=$?
refused "a weight of 0" $status "$out" "must be positive"
# A model whose targets have other symbols (a vocabulary of 3 letters).
sed 's/"max_length": 6/"max_length": 6, "vocab_size": 3/' "$work/tiny.json" > "$work/three.json"
out=$("$seqgrad" train --task reverse --model transformer --config "$work/three.json" --max-steps 2 \
      --threads 1 --out "$work/three" 2>&1) || fail "training on 3 symbols: $out"
out=$("$seqgrad" eval --checkpoint "$work/transformer" --checkpoint "$work/three" 2>&1); status=$?
refused "an ensemble of different target vocabularies" $status "$out" "target vocabularies of .* differ"

# ---- averaging ----
out=$("$seqgrad" average --checkpoint "$work/transformer" --last 2 --out "$work/mean" 2>&1) || fail "average: $out"
grep -q "averaged 2 files into $work/mean/model.safetensors" <<< "$out" && grep -q "step-000000120" <<< "$out" \
  && ! grep -q "step-000000060" <<< "$out" || fail "average --last 2: $out"
out=$("$seqgrad" eval --checkpoint "$work/mean" --threads 1 2>&1) || fail "eval of the mean: $out"
grep -q "mean/model.safetensors, step 120, beam 1): WER" <<< "$out" || fail "eval of the mean: $out"
out=$("$seqgrad" train --resume "$work/mean" --max-steps 130 --threads 1 2>&1) || fail "resuming the mean: $out"
out=$("$seqgrad" eval --checkpoint "$work/mean/model.safetensors" --threads 1 2>&1)
grep -q "step 130" <<< "$out" || fail "the resumed mean did not reach step 130: $out"
before=$(md5sum "$work/mean/model.safetensors")
out=$("$seqgrad" average --checkpoint "$work/transformer" --out "$work/mean" 2>&1); status=$?
refused "averaging into a checkpoint" $status "$out" "holds a checkpoint already"
[ "$(md5sum "$work/mean/model.safetensors")" = "$before" ] || fail "a refused average changed $work/mean"
out=$("$seqgrad" average "$work/transformer" "$work/attn_seq2seq" --out "$work/mixed-mean" 2>&1); status=$?
refused "averaging two different models" $status "$out" "differ in their model configs"
[ ! -e "$work/mixed-mean/model.safetensors" ] || fail "a refused average wrote a model"
out=$("$seqgrad" average --checkpoint "$work/three" --out "$work/none" 2>&1); status=$?
refused "averaging a run that kept nothing" $status "$out" "keep-checkpoints"
out=$("$seqgrad" average --checkpoint "$work/transformer" --last 4 --out "$work/four" 2>&1); status=$?
refused "averaging more files than kept" $status "$out" "keeps 3"
echo "ensembles decode and score, averaged checkpoints load, evaluate and resume"
