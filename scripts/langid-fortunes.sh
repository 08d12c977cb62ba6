#!/usr/bin/env bash
# A sentence-level language-identification set from Debian's fortune-cookie packages, in 11
# languages: scripts/langid-fortunes.sh OUT_DIR writes OUT_DIR/{train,dev,test}.tsv, one
# "text<TAB>label" line each (label an ISO 639-1 code), and OUT_DIR/README with the counts.
#
# A cookie is the text between lines holding only "%". It loses its attribution (a line starting
# with "--" and all after it), IRC nicknames ("<nick> "), mail quotes ("> "), overstrikes and
# terminal colours; its lines are joined with spaces (without, for Chinese) and runs of white space
# become one space. A cookie of at most 200 characters is one text; a longer one is cut after each
# ". ", "! ", "? ", "… " and after 。！？, and each piece is a text. A text is kept if it holds 20 to
# 200 characters (code points), at least 60% of those not spaces being letters (not ASCII digits or
# punctuation). Texts are deduplicated, and one found under two labels is dropped. A language keeps
# at most 4,000 texts, those with the smallest hash h2 (English, German, Russian, Polish, Italian,
# Czech, Spanish and Chinese have more). The split is by another hash, h1 of the text: h1 mod 10 = 0
# is test, 1 is dev, the rest train. Both hashes are polynomials over the text's bytes modulo
# 2^31 - 1, exact in any awk's doubles, so the set is the same on every machine.
set -euo pipefail
out=${1:?usage: scripts/langid-fortunes.sh OUT_DIR}
export LC_ALL=C  # awk and sort see bytes; lengths in characters are counted by hand
cap=4000

# label, package, and the cookie files of the package not to use (ASCII art, another language)
sources=(
  "en fortunes ascii-art"
  "en fortunes-min"
  "de fortunes-de de/asciiart"
  "es fortunes-es"  # its off/ (offensive) files are skipped below
  "it fortunes-it it/banner"
  "pt fortunes-br"
  "pl fortunes-pl"
  "ru fortunes-ru"
  "cs fortunes-cs cs/klasik-sk"  # Slovak, 289 cookies: too few for a language of its own
  "bg fortunes-bg"
  "eo fortunes-eo"
  "zh fortunes-zh"
)
missing=()
for source in "${sources[@]}"; do
  read -r _ package _ <<< "$source"
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "missing Debian packages: ${missing[*]}" >&2
  echo "install them with: apt-get install --no-install-recommends ${missing[*]} or run scripts/install-deps.sh" >&2
  exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for source in "${sources[@]}"; do
  read -r label package skip <<< "$source"
  skip=" $skip "
  # The package's cookie files: regular files (not the .u8 links or .dat indexes), no rot13/off ones.
  dpkg -L "$package" | grep '^/usr/share/games/fortunes/' | sort | while read -r file; do
    if [ ! -f "$file" ] || [ -L "$file" ] || [ ! -s "$file" ]; then continue; fi
    case "$file" in *.dat | */off/*) continue ;; esac
    name=${file#/usr/share/games/fortunes/}
    [[ "$skip" == *" $name "* ]] && continue
    iconv -f utf-8 -t utf-8 "$file" > /dev/null 2>&1 || { echo "not UTF-8, skipped: $file" >&2; continue; }
    printf '%s\n' "$file"
  done > "$work/files"
  xargs -d '\n' cat < "$work/files" | awk -v label="$label" -v joiner="$([ "$label" = zh ] || echo ' ')" '
    function characters(s, t) { t = s; return length(s) - gsub(/[\200-\277]/, "", t) }  # UTF-8 code points
    function keep(s, t) {
      sub(/^ /, "", s); sub(/ $/, "", s)
      if (characters(s) < 20 || characters(s) > 200) return
      t = s; gsub(/ /, "", t); total = characters(t)
      gsub(/[!-@[-`{-~]/, "", t)
      if (characters(t) >= 0.6 * total) print s "\t" label
    }
    function flush(s, n, i, piece) {
      s = cookie; cookie = ""; attributed = 0
      gsub(/\302\240/, " ", s)  # no-break space
      gsub(/[\001-\040\177]+/, " ", s)
      if (characters(s) <= 200) { keep(s); return }
      gsub(/[.!?]+ |… |。|！|？/, "&\n", s)
      n = split(s, piece, "\n")
      for (i = 1; i <= n; i++) keep(piece[i])
    }
    {
      sub(/\r$/, "")
      if ($0 == "%") { flush(); next }
      if (attributed) next
      gsub(/.\010/, "")                  # overstrike: a character, a backspace, the next one
      gsub(/\033\[[0-9;]*[A-Za-z]/, "")  # terminal colours
      if ($0 ~ /^[ \t]*--/) { attributed = 1; next }
      gsub(/<[^<>]*> ?/, "")              # "<nick> " of IRC logs, <e-mail addresses>
      sub(/^[ \t]*(> ?)+/, "")             # quoted mail
      cookie = cookie joiner $0
    }
    END { flush() }'
done > "$work/texts"

# Deduplicate; drop a text that two languages claim; hash; cap each language; split.
sort -u "$work/texts" > "$work/distinct"
awk -F'\t' '
  { if ($1 == last) { seen++ } else { if (seen == 1) print line; seen = 1 }; last = $1; line = $0 }
  END { if (seen == 1) print line }' "$work/distinct" > "$work/unique"
awk -F'\t' -v OFS='\t' '
  BEGIN { for (i = 1; i < 256; i++) code[sprintf("%c", i)] = i }
  function hash(s, multiplier, h, i) {
    h = 0
    for (i = 1; i <= length(s); i++) h = (h * multiplier + code[substr(s, i, 1)]) % 2147483647
    return h
  }
  { print $2, hash($1, 257), hash($1, 263), $1 }' "$work/unique" \
  | sort -t$'\t' -k1,1 -k3,3n -k4,4 \
  | awk -F'\t' -v OFS='\t' -v cap=$cap '++count[$1] <= cap { print $2, $4, $1 }' \
  | sort -t$'\t' -k1,1n -k2,2 > "$work/kept"
mkdir -p "$out"
awk -F'\t' -v OFS='\t' '$1 % 10 == 0 { print $2, $3 }' "$work/kept" > "$out/test.tsv"
awk -F'\t' -v OFS='\t' '$1 % 10 == 1 { print $2, $3 }' "$work/kept" > "$out/dev.tsv"
awk -F'\t' -v OFS='\t' '$1 % 10 > 1 { print $2, $3 }' "$work/kept" > "$out/train.tsv"

{
  echo "Language identification from Debian's fortunes, made by scripts/langid-fortunes.sh."
  echo "Texts by language before the cap of $cap, and in each split:"
  printf '%-6s %7s %7s %6s %6s\n' label found train dev test
  for source in "${sources[@]}"; do echo "${source%% *}"; done | uniq | while read -r label; do
    printf '%-6s %7d %7d %6d %6d\n' "$label" "$(grep -c $'\t'"$label"'$' "$work/unique")" \
      "$(grep -c $'\t'"$label"'$' "$out/train.tsv")" "$(grep -c $'\t'"$label"'$' "$out/dev.tsv")" \
      "$(grep -c $'\t'"$label"'$' "$out/test.tsv")"
  done
  printf '%-6s %7d %7d %6d %6d\n' all "$(wc -l < "$work/unique")" "$(wc -l < "$out/train.tsv")" \
    "$(wc -l < "$out/dev.tsv")" "$(wc -l < "$out/test.tsv")"
  echo "$(wc -l < "$work/texts") texts cut from the cookies, $(wc -l < "$work/distinct") distinct;" \
    "$(($(cut -f1 "$work/distinct" | uniq | wc -l) - $(wc -l < "$work/unique"))) found under two labels, dropped."
} > "$out/README"
cat "$out/README"
