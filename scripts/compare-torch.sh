#!/usr/bin/env bash
# Every comparison with PyTorch in docs/performance.md, one after the other, each printing its table in the
# page's format; PyTorch in each of its three thread settings (bench/torch_settings.py), the
# ratios to its best. Needs Debian's python3-torch. Run it on a quiet machine: the sides alternate,
# but anything else running moves both.
#
#   bash scripts/compare-torch.sh [train] [bf16] [decode] [g2p] [gpt] [bert]   (default: all six)
#
#   train   bench/compare.py: one training step of each model at each shape, 2 threads
#           (about 15 minutes)
#   bf16    bench/compare.py --bf16: the Transformer's step in float32 and bfloat16 on both sides
#           (PyTorch: torch.autocast), 2 threads (about 15 minutes; a CPU with AVX512_BF16 or AMX)
#   decode  bench/compare_decode.py: beam search of a Transformer-base, 1 and 2 threads
#           (about 30 minutes: PyTorch's nn.Transformer recomputing the prefix is most of it)
#   g2p     bench/torch_g2p_predict.py: `seqgrad predict` on the G2P test words, beam 5, float32 and
#           int8 at 1 and 2 threads, median of two runs each, and `seqgrad eval` of the same
#           checkpoint for the WER and PER columns (about 15 minutes; first, if $G2P_CHECKPOINT
#           does not exist, 20 minutes of training it with the G2P recipe on two threads)
#   gpt     bench/compare_gpt.py: a GPT's training step at nanoGPT's CPU and baby shapes, and
#           sampling 256 tokens with a key/value cache, 2 threads
#   bert    bench/compare_gpt.py --benchmarks bert: a BERT's fine-tuning (classification) and
#           masked-LM steps and classifying 64 texts, at the langid, small and mini shapes, 2 threads
#           (about 10 minutes)
#
# Outputs go to runs/compare-torch/ (one log per run); the tables are printed at the end.
# OPENBLAS_CORETYPE, if set, forces OpenBLAS's kernels for both sides; `env -u OPENBLAS_CORETYPE
# bash scripts/compare-torch.sh` measures what OpenBLAS picks by itself.
set -euo pipefail
cd "$(dirname "$0")/.."
python=/usr/bin/python3
out=runs/compare-torch
checkpoint=${G2P_CHECKPOINT:-runs/g2p-transformer-20min}
parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(train bf16 decode g2p gpt bert)
for part in "${parts[@]}"; do
  case "$part" in
    train | bf16 | decode | g2p | gpt | bert) ;;
    *) echo "compare-torch.sh: unknown part '$part' (train, bf16, decode, g2p, gpt, bert)" >&2 && exit 2 ;;
  esac
done
if ! "$python" -c 'import torch' 2>/dev/null; then
  echo "compare-torch.sh: $python has no torch (apt-get install python3-torch)" >&2
  exit 1
fi

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target seqgrad_bench seqgrad_cli
mkdir -p "$out"
seqgrad=build/cli/seqgrad

for part in "${parts[@]}"; do
  case "$part" in
    train)
      echo "== training steps (bench/compare.py) -> $out/train.md" >&2
      "$python" bench/compare.py --bench build/bench/seqgrad_bench --threads 2 --rounds 2 | tee "$out/train.md"
      ;;
    bf16)
      echo "== training steps in float32 and bfloat16 (bench/compare.py --bf16) -> $out/bf16.md" >&2
      "$python" bench/compare.py --bench build/bench/seqgrad_bench --threads 2 --rounds 2 --bf16 | tee "$out/bf16.md"
      ;;
    gpt)
      echo "== a GPT's training steps and sampling (bench/compare_gpt.py) -> $out/gpt.md" >&2
      "$python" bench/compare_gpt.py --bench build/bench/seqgrad_bench --threads 2 --rounds 2 | tee "$out/gpt.md"
      ;;
    bert)
      echo "== a BERT's training steps and classification (bench/compare_gpt.py --benchmarks bert) -> $out/bert.md" >&2
      "$python" bench/compare_gpt.py --bench build/bench/seqgrad_bench --threads 2 --rounds 2 --benchmarks bert \
        | tee "$out/bert.md"
      ;;
    decode)
      echo "== decoding a Transformer-base (bench/compare_decode.py) -> $out/decode.md" >&2
      "$python" bench/compare_decode.py --bench build/bench/seqgrad_bench --threads 1 2 --rounds 2 \
        | tee "$out/decode.md"
      ;;
    g2p)
      # The G2P test words: CMUdict's headwords (without a variant's "(2)") whose FNV-1a hash falls
      # in the test split (training/dataset.cpp), each once, in the dictionary's order.
      "$python" - "$out/g2p-test-words.txt" <<'EOF'
import re, sys
words, seen = [], set()
for line in open("/usr/share/pocketsphinx/model/en-us/cmudict-en-us.dict", "rb"):
    fields = line.split()
    if not fields:
        continue
    word = re.sub(rb"^(.+)\(\d+\)$", rb"\1", fields[0])
    h = 0x811C9DC5
    for c in word:
        h = ((h ^ c) * 0x01000193) & 0xFFFFFFFF
    if h % 100 >= 95 and word not in seen:
        seen.add(word)
        words.append(word)
open(sys.argv[1], "wb").write(b"\n".join(words) + b"\n")
print(f"{len(words)} test words", file=sys.stderr)
EOF
      if [ ! -e "$checkpoint" ]; then
        echo "== training $checkpoint: the G2P Transformer, 20 minutes on two threads" >&2
        "$seqgrad" train --task g2p --model transformer --config configs/g2p-transformer.json --minutes 20 \
          --dev-limit 2000 --threads 2 --out "$checkpoint" > "$out/g2p-train.log"
      fi
      for int8 in "" --int8; do
        "$seqgrad" eval --checkpoint "$checkpoint" --split test --beam 5 $int8 | tee "$out/g2p-eval${int8}.txt"
        for threads in 1 2; do
          log="$out/g2p-predict-${threads}${int8}.txt"
          echo "== bench/torch_g2p_predict.py --threads $threads $int8 -> $log" >&2
          "$python" bench/torch_g2p_predict.py --checkpoint "$checkpoint" --input "$out/g2p-test-words.txt" \
            --beam 5 --threads "$threads" --repeats 2 $int8 | tee "$log"
        done
      done
      # docs/results.md's table, from the last line of each run and the two evaluations.
      "$python" - "$out" <<'EOF' | tee "$out/g2p.md"
import re, sys
sys.path.insert(0, "bench")
from torch_settings import label
out = sys.argv[1]
def run(threads, int8):
    text = open(f"{out}/g2p-predict-{threads}{int8}.txt").read()
    same, total = re.search(r"^agreement: (\d+) of (\d+)", text, re.M).groups()
    result = dict(re.findall(r"(\w+)=(\S+)", text.strip().splitlines()[-1]), same=int(same), total=int(total))
    for setting, cores in re.findall(r"^torch (\w+)[^:]*: [0-9.]+ words/s \((\d+) cores\)", text, re.M):
        result[f"cores_{setting}"] = cores  # a setting that used more cores than seqgrad's threads
    return result
def quality(int8):
    wer, per = re.search(r"WER ([0-9.]+)%\s+PER ([0-9.]+)%", open(f"{out}/g2p-eval{int8}.txt").read()).groups()
    return f"{wer}% / {per}%"
def words(value):
    return f"{float(value):,.0f}"
def torch_cell(r, setting):
    cores = f" ({r[f'cores_{setting}']} cores)" if f"cores_{setting}" in r else ""
    return words(r.get(f"torch_{setting}", "nan")) + cores
modes = {"": "seqgrad, float32 (weights packed)", "--int8": "seqgrad, int8 (`--int8`)"}
runs = {(t, i): run(t, i) for t in (1, 2) for i in modes}
print("| G2P test words, beam 5 | 1 thread | 2 threads | test WER / PER | outputs as PyTorch's |")
print("|---|---:|---:|---:|---:|")
for int8, name in modes.items():
    bold = "" if int8 else "**"
    cells = [f"{words(runs[t, int8]['seqgrad'])} words/s, {bold}{runs[t, int8]['ratio']}x{bold}" for t in (1, 2)]
    r = runs[2, int8]
    agreement = f"{r['same']:,} of {r['total']:,}" if r["same"] == r["total"] else \
        f"{r['same']:,} ({100 * r['same'] / r['total']:.1f}%)"
    print(f"| {name} | {cells[0]} | {cells[1]} | {quality(int8)} | {agreement} |")
best = [" / ".join(f"{words(runs[t, i]['torch'])} ({label(runs[t, i]['torch_best'], t)})" for i in modes)
        for t in (1, 2)]
print(f"| PyTorch 1.13, at its best | {best[0]} words/s | {best[1]} words/s | | |")
for setting in ("default", "threads", "passive"):
    cells = [" / ".join(torch_cell(runs[t, i], setting) for i in modes) for t in (1, 2)]
    print(f"| PyTorch 1.13, {label(setting, 'N')} | {cells[0]} words/s | {cells[1]} words/s | | |")
EOF
      ;;
  esac
done

echo
for part in "${parts[@]}"; do
  echo "== $part ($out/$part.md)"
  grep '^|' "$out/$part.md"
  echo
done
