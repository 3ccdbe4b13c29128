#!/usr/bin/env bash
# Installs everything titan.cpp needs to build, test and run, from Debian's
# packages (and npm for the tokenizer peers). Idempotent and non-interactive:
# packages already present are skipped, so a second run costs a few seconds.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  libdnnl-dev ocl-icd-opencl-dev    # oneDNN: CPU GEMM (its CMake package requires OpenCL)
  libopenmpi-dev openmpi-bin        # collectives on the CPU backend
  libgloo-dev                       # the fault-tolerant replicas' rebuildable process group
  slurmctld slurmd slurm-client munge  # a real Slurm that the cluster tests start on this machine
  libtomlplusplus-dev libcli11-dev nlohmann-json3-dev libfmt-dev
  libpcre2-dev libzstd-dev
  libicu-dev                        # Unicode forms and case for tokenizer.json normalizers
  sentencepiece                     # spm_train: real SentencePiece models for the T5 tokenizer tests
  libpng-dev libjpeg62-turbo-dev    # image datasets (FLUX): PNG and JPEG decoding, PNG writing
  libgtest-dev libgmock-dev libbenchmark-dev
  python3-torch python3-numpy       # the PyTorch reference the tests compare against
  python3-pil                       # PIL: the independent image decoder and resizer the image tests compare against
  python3-protobuf                  # the independent TensorBoard event-file reader (tests/reference)
  libopenblas0-pthread              # an optimised BLAS for that peer (Debian's torch uses the system BLAS)
  clang-format clang-tidy clang libclang-rt-14-dev  # formatting and lint checks, libFuzzer
  nodejs npm                        # tokenizer compatibility peers
  fortunes                          # the embedded English corpus
  dict-gcide                        # 40 MB of English for the tokenizer training benchmark
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node and npm may come from outside Debian (nodesource); accept any working pair.
if command -v node >/dev/null && command -v npm >/dev/null; then
  missing=("${missing[@]/nodejs/}"); missing=("${missing[@]/npm/}")
fi
# Drop the empty entries the substitutions above leave behind.
kept=()
for p in ${missing[@]+"${missing[@]}"}; do [ -n "$p" ] && kept+=("$p"); done
missing=(${kept[@]+"${kept[@]}"})

# Some packages' install scripts run as the package's own user (munge creates
# its key as user munge), which fails when other users cannot enter the root
# directory: a root unpacked into a mktemp folder (a chroot or container
# image) is mode 700. A normal machine's / is 755 and is left alone.
if ((${#missing[@]})) && [ $((0$(stat -c %a /) & 05)) -ne 5 ]; then
  echo "setup: / is mode $(stat -c %a /): letting other users enter it (package scripts that run as their own user need it)"
  [ "$(id -u)" -eq 0 ] && chmod o+rx / || sudo chmod o+rx /
fi

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo_cmd apt-get update -qq
  $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all Debian packages present"
fi

/usr/bin/python3 -c "import torch" || { echo "setup: python3-torch is not importable from /usr/bin/python3" >&2; exit 1; }

# The tokenizer and chat-template peers (npm `tiktoken`, `llama3-tokenizer-js`, `@huggingface/tokenizers`,
# `@huggingface/jinja`), pinned by tests/peers/package-lock.json: the compatibility tests and the tokenizer
# benchmark run them, and the built-in tokenizers read their data. npm ci
# reinstalls from scratch, so it runs only when the lock file changed.
peers="$(dirname "$0")/../tests/peers"
if cmp -s "$peers/package-lock.json" "$peers/node_modules/.titan-installed-lock" &&
   [ -f "$peers/node_modules/tiktoken/package.json" ] && [ -f "$peers/node_modules/llama3-tokenizer-js/package.json" ] &&
   [ -f "$peers/node_modules/@huggingface/tokenizers/package.json" ] &&
   [ -f "$peers/node_modules/@huggingface/jinja/package.json" ]; then
  echo "setup: tokenizer peers up to date"
else
  echo "setup: installing the tokenizer peers (npm ci in tests/peers)"
  (cd "$peers" && npm ci --no-audit --no-fund --loglevel=error)
  cp "$peers/package-lock.json" "$peers/node_modules/.titan-installed-lock"
fi
