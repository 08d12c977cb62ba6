#!/usr/bin/env bash
# The best G2P model an hour of training on two cores buys: two different models trained side by
# side, one thread each, for the whole hour (the attention encoder-decoder and the Transformer of
# configs/, each keeping the weights of its last 5 dev evaluations); then the attention model's
# kept weights averaged into one, and that average and the Transformer's best weights
# decoded together (an ensemble, weights 0.6 and 0.4, beam 5) on the test words. Each model alone
# is scored too, and every part is timed.
#
#   bash scripts/g2p-hour.sh                       # CMUdict (the task of docs/results.md)
#   DATA="--train runs/italian-g2p.tsv --tgt-tokens space" OUT=runs/italian-hour bash scripts/g2p-hour.sh
#
# MINUTES (default 60) is each model's budget; SEQGRAD the program (default ./build/cli/seqgrad).
set -euo pipefail
cd "$(dirname "$0")/.."
seqgrad=${SEQGRAD:-./build/cli/seqgrad}
minutes=${MINUTES:-60}
out=${OUT:-runs/g2p-hour}
read -r -a data <<< "${DATA:---task g2p}"
[ -x "$seqgrad" ] || { echo "no program at $seqgrad: build first (README)" >&2; exit 1; }
for run in attn transformer attn-avg; do
  [ ! -e "$out/$run" ] || { echo "$out/$run exists: give another OUT or remove it" >&2; exit 1; }
done
mkdir -p "$out"

seconds_since() { echo $(( $(date +%s) - $1 )); }
start=$(date +%s)
echo "training attn_seq2seq and transformer side by side, $minutes minutes, one thread each ($out/*.log)"
"$seqgrad" train "${data[@]}" --model attn_seq2seq --config configs/g2p-attn_seq2seq.json --minutes "$minutes" \
  --dev-limit 2000 --threads 1 --keep-checkpoints 5 --out "$out/attn" > "$out/attn.log" 2>&1 &
attn=$!
"$seqgrad" train "${data[@]}" --model transformer --config configs/g2p-transformer.json --minutes "$minutes" \
  --dev-limit 2000 --threads 1 --keep-checkpoints 5 --out "$out/transformer" > "$out/transformer.log" 2>&1 &
transformer=$!
status=0
wait $attn || status=$?
wait $transformer || status=$?
[ $status -eq 0 ] || { echo "a training run failed (status $status): see $out/*.log" >&2; exit $status; }
echo "trained in $(seconds_since "$start") s:"
grep -h "^Stopped" "$out/attn.log" "$out/transformer.log" | sed 's/^/  /'

start=$(date +%s)
# Its kept weights: those of its last 5 evaluations (fewer if a large corpus gave it fewer).
"$seqgrad" average --checkpoint "$out/attn" --out "$out/attn-avg" > /dev/null
echo "averaged the attention model's $(ls "$out"/attn/step-*.safetensors | wc -l) kept weights in" \
  "$(seconds_since "$start") s"

score() {  # score NAME CHECKPOINT_FLAGS...: test WER and PER, beam 5, both cores, timed
  local name=$1 t0 result
  shift
  t0=$(date +%s%N)
  result=$("$seqgrad" eval "$@" --split test --beam 5 --threads 2 | sed 's/.*: WER/WER/')
  printf '  %-44s %s  in %s s\n' "$name" "$result" \
    "$(awk -v a="$t0" -v b="$(date +%s%N)" 'BEGIN { printf "%.1f", (b - a) / 1e9 }')"
}
echo "test words, beam 5:"
score "attn_seq2seq (best dev)" --checkpoint "$out/attn"
score "transformer (best dev)" --checkpoint "$out/transformer"
score "attn_seq2seq, mean of its kept weights" --checkpoint "$out/attn-avg"
score "ensemble: that mean 0.6 + transformer 0.4" --checkpoint "$out/attn-avg" --checkpoint "$out/transformer" \
  --weights 0.6 0.4
