#!/usr/bin/env bash
# The docs name files to read and to touch (docs/architecture.md follows one op,
# one family and one parallelism through theirs; docs/adding-an-op.md lists an
# op's). A path that no longer exists sends a newcomer nowhere, so every
# backticked path under src/, tests/, docs/, scripts/, configs/, bench/ or cmake/
# in README.md, CONTRIBUTING.md and docs/*.md must exist (patterns such as <name>,
# * and {a,b} are skipped; a path may also be given relative to src/titan/).
set -euo pipefail
root=$1
status=0
checked=0
for doc in "$root"/README.md "$root"/CONTRIBUTING.md "$root"/docs/*.md; do
  [[ -f "$doc" ]] || continue
  while IFS= read -r path; do
    path=${path%%:*}               # `file.cpp:42` names a line of the file
    path=${path%/}
    [[ "$path" == *"<"* || "$path" == *"*"* || "$path" == *"{"* || "$path" == *"..."* ]] && continue
    checked=$((checked + 1))
    if [[ ! -e "$root/$path" && ! -e "$root/src/titan/$path" ]]; then
      echo "${doc#$root/}: names \`$path\`, which does not exist"
      status=1
    fi
  done < <(grep -oE '`(src|tests|docs|scripts|configs|bench|cmake)/[A-Za-z0-9_./<>*{},-]+`' "$doc" | tr -d '`' | sort -u)
done
# The op guide's list is the contract of the adding-an-op test: it must name files.
files_listed=$(sed -n '/^## Files/,/^## /p' "$root/docs/adding-an-op.md" | grep -cE '^- `[^`]+`' || true)
if [[ "$files_listed" -lt 10 ]]; then
  echo "docs/adding-an-op.md: its '## Files' section lists $files_listed files (expected the op's whole list)"
  status=1
fi
[[ $status -eq 0 ]] && echo "doc paths: $checked paths named in the docs exist"
exit $status
