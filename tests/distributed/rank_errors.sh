#!/usr/bin/env bash
# Ranks that cannot train together, under mpirun -np 2 with one command line per rank
# (mpirun's "A : B"), on a corpus of words and their reversals:
#   - ranks that read different training data, or built different vocabularies, are refused
#     before the first step, with a message saying so;
#   - an error on one rank alone (its training file is missing; later, its checkpoint cannot be
#     written) ends the whole job within seconds, with a message naming that rank, not a hang.
#   rank_errors.sh MPIRUN SEQGRAD WORK_DIR
set -uo pipefail
mpirun=$1
seqgrad=$2
work=$3
# shellcheck source=../lib.sh
source "$(dirname "$0")/../lib.sh"

fresh_dir "$work"
cat > "$work/tiny.json" <<'JSON'
{"model": "transformer", "d_model": 32, "n_heads": 2, "n_layers": 1, "d_ff": 64, "dropout": 0,
 "training": {"schedule": "constant", "lr": 0.003, "batch_sentences": 32, "save_every_steps": 3}}
JSON
for i in $(seq 1 320); do
  w=$(printf '%x' $((i * 2654435761 % 1000003)) | tr '0-9' 'g-p')
  printf '%s\t%s\n' "$w" "$(echo "$w" | rev)"
done > "$work/more.tsv"
head -n 300 "$work/more.tsv" > "$work/words.tsv"  # the same symbols, fewer pairs
# The same sources (so the same split into train and dev), as many symbols, one target symbol else.
awk -F '\t' '{ gsub("a", "z", $2); print $1 "\t" $2 }' "$work/words.tsv" > "$work/other.tsv"
train=("$seqgrad" train --model transformer --config "$work/tiny.json" --threads 1 --show 0 --max-steps 30)

# run NAME RANK0_ARGS... : RANK1_ARGS...: the job, at most 120 s; its output in $out, status in $status.
run() {
  local name=$1
  shift
  out=$(timeout -k 10 120 "$mpirun" --allow-run-as-root --oversubscribe --bind-to none "$@" 2>&1)
  status=$?
  echo "$out" > "$work/$name.log"
  [ $status -ne 124 ] && [ $status -ne 137 ] || fail "$name: the job still ran after 120 s: $out"
  [ $status -ne 0 ] || fail "$name: the job exited 0: $out"
}

run different_data -np 1 "${train[@]}" --train "$work/words.tsv" --out "$work/data" \
  : -np 1 "${train[@]}" --train "$work/more.tsv" --out "$work/data"
grep -q "error on rank [01] of 2: train: the ranks read different training data" <<< "$out" \
  || fail "ranks that read different data were not refused so: $out"
[ ! -e "$work/data" ] || fail "the refused run left $work/data behind"
run different_vocabularies -np 1 "${train[@]}" --train "$work/words.tsv" --out "$work/vocab" \
  : -np 1 "${train[@]}" --train "$work/other.tsv" --out "$work/vocab"
grep -q "error on rank [01] of 2: train: the ranks read different training data or built different vocabularies" \
  <<< "$out" || fail "ranks with different vocabularies were not refused so: $out"
echo "ranks that read different data, or built different vocabularies, are refused"

run missing_file -np 1 "${train[@]}" --train "$work/words.tsv" --out "$work/missing" \
  : -np 1 "${train[@]}" --train "$work/absent.tsv" --out "$work/missing"
grep -q "error on rank 1 of 2: .*absent.tsv" <<< "$out" || fail "no message names rank 1 and its missing file: $out"
echo "a file missing on rank 1 ends the job (status $status), naming rank 1"

# Rank 0 alone writes checkpoints: past a file-size limit its first one fails, while rank 1 waits
# for it in the next step.
run unwritable_checkpoint -np 1 bash -c 'trap "" XFSZ; ulimit -f 64; exec "$@"' rank0 "${train[@]}" \
  --train "$work/words.tsv" --out "$work/full" : -np 1 "${train[@]}" --train "$work/words.tsv" --out "$work/full"
grep -q "error on rank 0 of 2: .*checkpoint of step 3 was not written" <<< "$out" \
  || fail "no message names rank 0 and its checkpoint: $out"
echo "a checkpoint rank 0 cannot write ends the job (status $status), naming rank 0"
