#!/usr/bin/env bash
# Starts a model family from an existing one: src/titan/models/FROM/ is copied
# to src/titan/models/NAME/ with its namespace, registry name, Hugging Face
# architecture and model_type renamed, and NAME's line is added to
# src/titan/models/families.h -- the one file outside the family's folder that
# a family touches. What is left is the family's own: its flavors
# (flavors.cpp) and its Hugging Face traits and defaults (hf_family.cpp).
# See docs/adding-a-model.md.
#
#   scripts/new_family.sh NAME FROM [ROOT]     e.g. scripts/new_family.sh mymodel mistral
set -euo pipefail

if [ $# -lt 2 ] || [ $# -gt 3 ]; then
  echo "usage: $0 NAME FROM [ROOT]" >&2
  exit 2
fi
name=$1
from=$2
root=${3:-$(cd "$(dirname "$0")/.." && pwd)}
models=$root/src/titan/models
list=$models/families.h

if ! [[ $name =~ ^[a-z][a-z0-9_]*$ ]]; then
  echo "new_family: NAME must be a lower-case C++ identifier (it names a namespace), got '$name'" >&2
  exit 2
fi
if [ ! -f "$models/$from/hf_family.cpp" ]; then
  echo "new_family: no family '$from' in $models (want one of: $(ls "$models" | tr '\n' ' '))" >&2
  exit 2
fi
if [ -e "$models/$name" ] || grep -q "X($name)" "$list"; then
  echo "new_family: '$name' exists already ($models/$name or its line in $list)" >&2
  exit 2
fi

# The template's Hugging Face class prefix ("Mistral" of MistralForCausalLM) and the new one (CamelCase of NAME).
from_class=$(sed -n 's/.*family.architecture = "\([A-Za-z0-9]*\)ForCausalLM".*/\1/p' "$models/$from/hf_family.cpp")
name_class=$(echo "$name" | sed -E 's/(^|_)([a-z])/\U\2/g')
if [ -z "$from_class" ]; then
  echo "new_family: cannot read the architecture (XxxForCausalLM) of $models/$from/hf_family.cpp" >&2
  exit 2
fi

cp -r "$models/$from" "$models/$name"
for file in "$models/$name"/*; do
  sed -i -e "s/\b$from\b/$name/g" -e "s/${from_class}ForCausalLM/${name_class}ForCausalLM/g" \
    -e "s/\b${from_class}\b/${name_class}/g" "$file"
done

# The list's last entry gets a continuation; the new family goes after it.
last=$(grep -n '^  X([a-z0-9_]*)' "$list" | tail -1 | cut -d: -f1)
sed -i -e "${last}s/\$/ \\\\/" -e "${last}a\\  X($name)" "$list"
if command -v clang-format > /dev/null && [ -f "$root/.clang-format" ]; then clang-format -i "$list"; fi
echo "new_family: $models/$name from $from; added X($name) to $list"
