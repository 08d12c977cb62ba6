#!/usr/bin/env bash
# Installs seqgrad's build and run dependencies from Debian's apt (bookworm), skipping what is
# already there. Run as root.
set -euo pipefail
packages=(
  g++ cmake make pkg-config
  libopenblas-dev          # BLAS (sgemm)
  catch2                   # tests (v2.13)
  libbenchmark-dev         # bench/
  nlohmann-json3-dev       # safetensors headers, configs
  libcli11-dev             # the seqgrad program's flags
  pocketsphinx-en-us       # CMUdict, the G2P task's dictionary
  # fortune cookies in 11 languages, the language-identification set (scripts/langid-fortunes.sh)
  fortunes fortunes-min fortunes-de fortunes-es fortunes-it fortunes-br
  fortunes-pl fortunes-ru fortunes-cs fortunes-bg fortunes-eo fortunes-zh
  libsentencepiece-dev     # subword tokenizers (own corpora)
  zlib1g-dev               # gzip-compressed corpora
  libopenmpi-dev openmpi-bin  # optional: data-parallel training over MPI (mpirun)
  libdnnl-dev              # optional: oneDNN, weights packed for decoding (float32, --int8)
  clang libfuzzer-14-dev   # the sanitizer tree and the fuzz harnesses (scripts/test.sh)
  clang-format             # the style check (scripts/check-format.sh)
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "Installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
