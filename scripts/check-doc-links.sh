#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Checks every relative link of README.md, docs/*.md and examples/*/README.md (or of the markdown
# files given): the file a link names must exist, and a #anchor must be a heading of its markdown
# target, slugged as GitHub does (lower case; ASCII punctuation but '-' and '_' dropped; spaces
# become '-'; a repeated heading gets -1, -2, ...). Links inside fenced code blocks and inline code
# are not links. Exits 1 after naming every broken link as FILE:LINE; needs only bash, awk and grep.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export LC_ALL=C  # byte semantics: a byte above '~' (UTF-8) is kept in a slug, as GitHub keeps letters

# The anchors of one markdown file, one per line.
anchors() {
  awk '
    /^[ ]*(```|~~~)/ { fence = !fence; next }
    fence { next }
    /^#+ / {
      h = $0; sub(/^#+ +/, "", h); sub(/ +#+ *$/, "", h); h = tolower(h); s = ""
      for (i = 1; i <= length(h); i++) {
        c = substr(h, i, 1)
        if (c ~ /[a-z0-9_-]/) s = s c
        else if (c == " ") s = s "-"
        else if (c > "~") s = s c
      }
      if (s in seen) print s "-" seen[s]++; else { seen[s] = 1; print s }
    }' "$1"
}

# The link targets of one markdown file: LINE<TAB>TARGET.
links() {
  awk '
    /^[ ]*(```|~~~)/ { fence = !fence; next }
    fence { next }
    {
      line = $0; gsub(/`[^`]*`/, "", line)
      while (match(line, /\]\([^)]*\)/)) {
        t = substr(line, RSTART + 2, RLENGTH - 3); line = substr(line, RSTART + RLENGTH)
        sub(/ .*/, "", t)
        print NR "\t" t
      }
    }' "$1"
}

files=("$@")
if ((${#files[@]} == 0)); then files=(README.md docs/*.md examples/*/README.md); fi
broken=0
checked=0
for f in "${files[@]}"; do
  dir=$(dirname "$f")
  while IFS=$'\t' read -r line target; do
    case $target in
      '' | http://* | https://* | mailto:*) continue ;;
    esac
    checked=$((checked + 1))
    path=${target%%#*}
    anchor=
    if [[ $target == *'#'* ]]; then anchor=${target#*#}; fi
    if [[ -z $path ]]; then dest=$f; else dest=$dir/$path; fi
    if [[ ! -e $dest ]]; then
      echo "$f:$line: ($target): no such file $dest"
      broken=$((broken + 1))
    elif [[ -n $anchor ]]; then
      if [[ $dest != *.md ]]; then
        echo "$f:$line: ($target): an anchor into a file that is not markdown"
        broken=$((broken + 1))
      elif ! grep -qxF -- "$anchor" <<<"$(anchors "$dest")"; then
        echo "$f:$line: ($target): no heading #$anchor in $dest"
        broken=$((broken + 1))
      fi
    fi
  done < <(links "$f")
done
echo "check-doc-links: $checked relative links in ${#files[@]} files, $broken broken"
((broken == 0))
