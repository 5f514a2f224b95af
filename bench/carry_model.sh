#!/usr/bin/env bash
# A model folder carried to a machine that cannot download it, in parts small enough to send one by one.
#
#   bench/carry_model.sh pack SRC DEST     # copy SRC's files to DEST, each weight file over 40 MB split into
#                                          # <name>.part-aa, -ab, ... with <name>.sha256 beside them
#   bench/carry_model.sh unpack DEST       # there: join the parts, check each SHA-256, remove the parts
set -euo pipefail
case ${1:-} in
  pack)
    src=$2; dest=$3
    mkdir -p "$dest"
    for file in "$src"/*; do
      [[ -f $file ]] || continue
      name=$(basename "$file")
      if (( $(stat -c %s "$file") > 40000000 )); then
        (cd "$(dirname "$file")" && sha256sum "$name") > "$dest/$name.sha256"
        split -b 40M "$file" "$dest/$name.part-"
      else
        cp "$file" "$dest/$name"
      fi
    done ;;
  unpack)
    dest=$2
    for sums in "$dest"/*.sha256; do
      [[ -e $sums ]] || continue
      name=$(basename "$sums" .sha256)
      cat "$dest/$name".part-* > "$dest/$name"
      (cd "$dest" && sha256sum -c --quiet "$name.sha256")
      rm "$dest/$name".part-* "$sums"
    done ;;
  *) echo "usage: $0 pack SRC DEST | unpack DEST" >&2; exit 2 ;;
esac
