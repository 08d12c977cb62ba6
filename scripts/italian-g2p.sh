#!/usr/bin/env bash
# Italian grapheme-to-phoneme data from Debian's festlex-ifd (the Italian FESTIVAL lexicon of
# ISTC-CNR and ITC-irst, GPL): 440,092 entries of word, part of speech and syllabified phones
# (a1 is a stressed a), in Latin-1. Writes runs/italian-g2p.tsv: one "word<TAB>phones" line per
# distinct pronunciation (410,849 lines, 409,772 words), UTF-8, phones separated by spaces.
# Also writes runs/italian-baseline.tsv, the simplest baseline: the word spelled out, one letter a
# phone, with the stress on the accented vowel or else on the last vowel but one.
set -euo pipefail
cd "$(dirname "$0")/.."
lexicon=/usr/share/festival/dicts/ifd/lex.out
if [ ! -f "$lexicon" ]; then
  echo "Installing festlex-ifd"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends festlex-ifd
fi
mkdir -p runs
# ("abaco" S-MS (((a1) 1) ((b a) 0) ((k o) 0)))  ->  abaco<TAB>a1 b a k o
iconv -f latin1 -t utf-8 "$lexicon" | tail -n +2 \
  | sed -E 's/^\("([^"]*)" [^ ]+ (.*)\)$/\1\t\2/; s/\) [0-9]+\)/)/g; s/[()]//g; s/ +/ /g; s/\t /\t/; s/ $//' \
  | LC_ALL=C sort -u > runs/italian-g2p.tsv
awk -F'\t' '
{
    w = $1  # accented vowels become one upper-case byte each, so that substr() sees letters
    gsub(/à|á/, "A", w); gsub(/è|é/, "E", w); gsub(/ì|í/, "I", w); gsub(/ò|ó/, "O", w); gsub(/ù|ú/, "U", w)
    n = length(w); vowels = 0; accent = 0
    for (i = 1; i <= n; i++) {
        c = substr(w, i, 1)
        if (c ~ /[AEIOU]/) accent = i
        if (c ~ /[aeiouAEIOU]/) position[++vowels] = i
    }
    stress = accent ? accent : (vowels >= 2 ? position[vowels - 1] : (vowels ? position[1] : 0))
    out = ""
    for (i = 1; i <= n; i++) out = out (i > 1 ? " " : "") tolower(substr(w, i, 1)) (i == stress ? "1" : "")
    print $1 "\t" out
}' runs/italian-g2p.tsv > runs/italian-baseline.tsv
echo "wrote runs/italian-g2p.tsv ($(wc -l < runs/italian-g2p.tsv) pairs) and runs/italian-baseline.tsv"
