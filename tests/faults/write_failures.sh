#!/usr/bin/env bash
# A checkpoint that cannot be written: a full disk (a file-size limit, `ulimit -f`, below what the
# checkpoint needs), a destination that is not writable (a directory where the file should go) and
# an output path that cannot be created. Each must end the run with a clear message and a status
# below 128 (an error, not a crash), leave the previous checkpoint intact and loadable, and leave
# no temporary file behind.
#   write_failures.sh SEQGRAD WORK_DIR
set -uo pipefail
seqgrad=$1
work=$2
# shellcheck source=../lib.sh
source "$(dirname "$0")/../lib.sh"
intact() {  # DIR STEP: the committed checkpoint is from STEP, it loads, and nothing else is there
  "$seqgrad" predict --checkpoint "$1/model.safetensors" --threads 1 abc > /dev/null 2>&1 \
    || fail "$1/model.safetensors no longer loads"
  out=$("$seqgrad" train --resume "$1" --max-steps "$2" --threads 1 --show 0 2>&1) \
    || fail "$1 no longer resumes: $out"
  grep -q "after $2 steps" <<< "$out" || fail "$1 is not the checkpoint of step $2: $out"
  leftovers=$(ls -A "$1" | grep -v -x -e model.safetensors -e best.safetensors -e training.safetensors)
  [ -z "$leftovers" ] || fail "files left behind in $1: $leftovers"
}

fresh_dir "$work"
cat > "$work/tiny.json" <<'JSON'
{"model": "transformer", "d_model": 32, "n_heads": 2, "n_layers": 1, "d_ff": 64, "norm": "pre",
 "training": {"synthetic": {"train_size": 400, "dev_size": 20, "test_size": 20, "max_length": 6},
              "schedule": "constant", "lr": 0.003, "save_every_steps": 2}}
JSON
train=("$seqgrad" train --task reverse --model transformer --config "$work/tiny.json" --threads 1 --show 0)
"${train[@]}" --max-steps 4 --out "$work/run" > /dev/null 2>&1 || fail "the first run failed"

# A full disk: files may not grow past 64 KiB; the model file alone is larger.
out=$(trap '' XFSZ; ulimit -f 64; "$seqgrad" train --resume "$work/run" --max-steps 8 --threads 1 --show 0 2>&1)
refused "a full disk" $? "$out" "the checkpoint of step 6 was not written, and the last one in .*run is intact"
grep -q "File too large" <<< "$out" || fail "the full disk's message does not say why: $out"
intact "$work/run" 4

# A destination that cannot be written: a directory stands where the pending file goes.
mkdir -p "$work/run/training.safetensors.next/blocked"
out=$("$seqgrad" train --resume "$work/run" --max-steps 8 --threads 1 --show 0 2>&1)
refused "an unwritable checkpoint file" $? "$out" "the checkpoint of step 6 was not written"
rm -rf "$work/run/training.safetensors.next"
intact "$work/run" 4

# An output directory that cannot be created: nothing is trained, nothing is written.
out=$("${train[@]}" --max-steps 2 --out /proc/seqgrad-cannot-be-here 2>&1)
refused "an uncreatable output directory" $? "$out" "cannot create the output directory /proc/seqgrad-cannot-be-here"
echo "write failures: clear messages, previous checkpoints intact and loadable, nothing left behind"
