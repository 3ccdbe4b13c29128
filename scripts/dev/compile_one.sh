#!/usr/bin/env bash
# Compiles one source file exactly as the build does (its command from
# build/compile_commands.json), into a throwaway object: a quick check of one
# file that does not touch the build folder, so several can run at once.
# Usage: scripts/dev/compile_one.sh src/titan/ops/cuda/elementwise_kernels.cu
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
file=$(realpath "$1")
build=${TITAN_BUILD_DIR:-$root/build}
/usr/bin/python3 - "$build/compile_commands.json" "$file" <<'PY' > /tmp/compile_one.$$.sh
import json, os, shlex, sys
entries = json.load(open(sys.argv[1]))
target = sys.argv[2]
def command_for(entry):
    return entry["command"] if "command" in entry else shlex.join(entry["arguments"])
match = [e for e in entries if os.path.realpath(e["file"]) == target]
if not match:
    # A new file: borrow a sibling's command of the same kind.
    ext = os.path.splitext(target)[1]
    folder = os.path.dirname(target)
    match = [e for e in entries if os.path.splitext(e["file"])[1] == ext and os.path.dirname(e["file"]) == folder]
    if not match:
        sys.exit(f"no compile command for {target} or a sibling")
    entry = dict(match[0])
    cmd = command_for(entry).replace(entry["file"], target)
else:
    entry = match[0]
    cmd = command_for(entry)
args = shlex.split(cmd)
out = f"/tmp/compile_one.{os.getpid()}.o"
for i, a in enumerate(args):
    if a == "-o":
        args[i + 1] = out
print("cd " + shlex.quote(entry["directory"]) + " && " + shlex.join(args) + " && rm -f " + out)
PY
bash /tmp/compile_one.$$.sh
status=$?
rm -f /tmp/compile_one.$$.sh
exit $status
