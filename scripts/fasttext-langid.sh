#!/usr/bin/env bash
# The fastText anchor for the language-identification set of scripts/langid-fortunes.sh:
#   scripts/fasttext-langid.sh DATA_DIR
# trains fastText's supervised classifier on DATA_DIR/train.tsv with the settings fastText
# documents, and prints for each the dev and test accuracy (fastText's P@1: one label a text), the
# training time and the time to predict the test set (the model's loading included). The variants:
#   dim16          fastText's language-identification post (fasttext.cc/blog/2017/10/02/blog-post.html),
#                  its first model: -dim 16
#   dim16-char     the same post with subword features, "character ngrams of length 2, 3 and 4":
#                  -dim 16 -minn 2 -maxn 4
#   dim16-char-hs  and with the hierarchical softmax it suggests for speed: -loss hs
#   tutorial       the text-classification tutorial's (fasttext.cc/docs/en/supervised-tutorial.html)
#                  best flat setting: -lr 1.0 -epoch 25 -wordNgrams 2, no character n-grams
#   tutorial-char  the tutorial's setting with the post's character n-grams
# The anchor is the one best on dev. On two threads a run is not repeated bit for bit (fastText is
# only with -thread 1); -seed fixes what it can. fastText is optional: Debian's `fasttext` package.
set -euo pipefail
data=${1:?usage: scripts/fasttext-langid.sh DATA_DIR}
if ! command -v fasttext > /dev/null; then
  echo "fasttext is not installed: apt-get install --no-install-recommends fasttext" >&2
  exit 1
fi
for split in train dev test; do
  [ -s "$data/$split.tsv" ] || { echo "no $data/$split.tsv: run scripts/langid-fortunes.sh $data" >&2; exit 1; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for split in train dev test; do  # fastText's format: "__label__xx text"
  awk -F'\t' '{ print "__label__" $2 " " $1 }' "$data/$split.tsv" > "$work/$split.txt"
done

variants=(
  "dim16          -dim 16"
  "dim16-char     -dim 16 -minn 2 -maxn 4"
  "dim16-char-hs  -dim 16 -minn 2 -maxn 4 -loss hs"
  "tutorial       -lr 1.0 -epoch 25 -wordNgrams 2"
  "tutorial-char  -lr 1.0 -epoch 25 -wordNgrams 2 -minn 2 -maxn 4"
)
timed() {  # runs a command; its wall and CPU (user + system) seconds go to the file named first
  local file=$1 TIMEFORMAT='%R %U %S'
  shift
  { time "$@" 2>&3; } 3>&2 2> "$file"
}
accuracy() {  # the share of a split's texts whose predicted label is theirs, in per cent
  awk '{ print $1 }' "$work/$1.txt" | paste -d' ' - "$2" \
    | awk '$1 == $2 { right++ } END { printf "%.2f", 100 * right / NR }'
}
echo "fastText $(dpkg-query -W -f='${Version}' fasttext 2> /dev/null || echo '(version unknown)');" \
  "$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) cores; -thread 2 -seed 1;" \
  "load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "train $(wc -l < "$work/train.txt"), dev $(wc -l < "$work/dev.txt"), test $(wc -l < "$work/test.txt") texts"
echo "seconds are wall (CPU): training; predicting the test set, loading the model included"
printf '%-14s %7s %7s %14s %12s  %s\n' variant dev% test% train_s predict_s flags
best="" best_dev=-1
for variant in "${variants[@]}"; do
  read -r name flags <<< "$variant"
  # shellcheck disable=SC2086  # the flags are words
  timed "$work/train.time" fasttext supervised -input "$work/train.txt" -output "$work/$name" $flags \
    -thread 2 -seed 1 -verbose 0
  timed "$work/predict.time" fasttext predict "$work/$name.bin" "$work/test.txt" > "$work/$name.test"
  fasttext predict "$work/$name.bin" "$work/dev.txt" > "$work/$name.dev"
  dev=$(accuracy dev "$work/$name.dev") test=$(accuracy test "$work/$name.test")
  read -r train_wall train_user train_sys < "$work/train.time"
  read -r predict_wall predict_user predict_sys < "$work/predict.time"
  printf '%-14s %7s %7s %6.1f (%5.1f) %5.2f (%4.2f)  %s\n' "$name" "$dev" "$test" "$train_wall" \
    "$(awk -v u="$train_user" -v s="$train_sys" 'BEGIN { print u + s }')" "$predict_wall" \
    "$(awk -v u="$predict_user" -v s="$predict_sys" 'BEGIN { print u + s }')" "$flags"
  if awk -v a="$dev" -v b="$best_dev" 'BEGIN { exit !(a > b) }'; then best=$name best_dev=$dev; fi
done
echo "anchor (best on dev): $best"
# The anchor's errors on test, by true label: how many of each language it got wrong, and as what.
awk '{ print $1 }' "$work/test.txt" | paste - "$work/$best.test" | sed 's/__label__//g' \
  | awk '{ total[$1]++ } $1 != $2 { wrong[$1]++; as[$1 " " $2]++ }
         END {
           for (l in total) {
             line = sprintf("  %s: %d of %d wrong", l, wrong[l], total[l]); sep = " ("
             for (m in total) if (as[l " " m]) { line = line sep "as " m " " as[l " " m]; sep = ", " }
             print line (sep == ", " ? ")" : "")
           }
         }' | sort
