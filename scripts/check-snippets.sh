#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Checks that code the documentation shows is the code that builds and runs. In README.md,
# docs/*.md and examples/*/README.md (or the markdown files given), a line
#   <!-- snippet: PATH MARK -->
# must be followed by a fenced block whose lines equal PATH's lines between its two marker lines
# `// [MARK]`, `# [MARK]` or `<!-- [MARK] -->` (PATH relative to the markdown file, as a link is;
# a region that is one fenced block itself is compared by its content). Exits 1 after naming each
# snippet that differs as FILE:LINE, with the diff; with no files given, also when README.md shows
# none. Needs only bash, awk, grep and diff.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

# The lines of the fenced block that opens on the line after LINE of FILE; fails without one.
block() {  # block FILE LINE
  awk -v at="$2" '
    NR == at + 1 { if ($0 !~ /^[ ]*(```|~~~)/) exit; open = 1; next }
    open && /^[ ]*(```|~~~)/ { closed = 1; exit }
    open { print }
    END { if (!closed) exit 1 }' "$1"
}

# The lines of FILE strictly between its first two MARK lines, less the fences of a region that
# is one fenced block; fails unless there are two.
region() {  # region FILE MARK
  awk -v mark="[$2]" '
    { t = $0; sub(/^[ \t]+/, "", t); sub(/[ \t]+$/, "", t) }
    t == "// " mark || t == "# " mark || t == "<!-- " mark " -->" { if (++marks == 2) exit; next }
    marks == 1 { line[++n] = $0 }
    END {
      if (marks != 2) exit 1
      first = 1; last = n
      fenced = n >= 2 && line[1] ~ /^[ ]*(```|~~~)/ && line[n] ~ /^[ ]*(```|~~~)$/
      if (fenced) { first = 2; last = n - 1 }
      for (i = first; i <= last; i++) print line[i]
    }' "$1"
}

files=("$@")
if ((${#files[@]} == 0)); then files=(README.md docs/*.md examples/*/README.md); fi
checked=0
differ=0
readme=0
for f in "${files[@]}"; do
  while IFS=: read -r line text; do
    read -r _ _ path mark _ <<<"$text"
    checked=$((checked + 1))
    if [[ $f == README.md ]]; then readme=$((readme + 1)); fi
    src=$(dirname "$f")/$path
    src=${src#./}
    if ! shown=$(block "$f" "$line"); then
      echo "$f:$line: no fenced block follows the snippet line"
      differ=$((differ + 1))
    elif [[ ! -f $src ]]; then
      echo "$f:$line: no such file $src"
      differ=$((differ + 1))
    elif ! want=$(region "$src" "$mark"); then
      echo "$f:$line: $src has no pair of [$mark] lines"
      differ=$((differ + 1))
    elif [[ $shown != "$want" ]]; then
      echo "$f:$line: the block differs from $src's [$mark] region (- the source, + the block):"
      diff -u --label "$src" --label "$f" <(printf '%s\n' "$want") <(printf '%s\n' "$shown") || true
      differ=$((differ + 1))
    fi
  done < <(grep -n '^<!-- snippet: ' "$f" || true)
done
echo "check-snippets: $checked snippets in ${#files[@]} files, $differ differ"
if (($# == 0 && readme == 0)); then
  echo "check-snippets: README.md shows no snippet (<!-- snippet: PATH MARK -->)"
  exit 1
fi
((differ == 0))
