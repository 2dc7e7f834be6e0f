#!/usr/bin/env bash
# Writes the GPT's default training text: every English fortune of Debian's `fortunes`
# package (/usr/share/games/fortunes, about 2.5 MB) in one UTF-8 file, the fortunes in a
# fixed shuffled order so that the validation split (the last 10%) is drawn from all the
# files alike. Deterministic: the same package gives the same file, byte for byte.
# Usage: scripts/fortunes_corpus.sh [OUT]   (default out/fortunes.txt; prints OUT)
set -euo pipefail
SRC=/usr/share/games/fortunes
OUT=${1:-out/fortunes.txt}
[ -d "$SRC" ] || { echo "fortunes_corpus.sh: $SRC is missing: apt-get install fortunes" >&2; exit 1; }
mkdir -p "$(dirname "$OUT")"
files=()
for f in "$SRC"/*; do
  case "$f" in *.dat|*.u8|*/ascii-art|*/translate-me) continue ;; esac
  [ -f "$f" ] && files+=("$f")
done
# One fortune per NUL-terminated record, shuffled with a fixed random source, then
# written back with the fortune file's own "%" separator lines.
cat "${files[@]}" | awk 'BEGIN { RS = "\n%\n"; ORS = "\0" } NF { print }' |
  shuf -z --random-source=<(yes kiln) | sed -z 's/$/\n%\n/' | tr -d '\0' > "$OUT.tmp"
mv "$OUT.tmp" "$OUT"
echo "$OUT"
