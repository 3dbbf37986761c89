#!/usr/bin/env bash
# Prepare bench/gpu_check.sh's run on a bare GPU machine with no network: download halter's
# pure-Python dependencies (and the few compiled ones they pull in) as wheels for the machine's
# Python (3.12, x86-64 manylinux) into .whl/, a folder git ignores. numpy and torch are the
# machine's own and are not carried. halter itself travels as the working tree.
#
#   bash bench/gpu_prepare.sh            # once, here (needs network)
#   then on the device:  carry [".whl"], command "bash bench/gpu_check.sh"
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> "$(git rev-parse --git-path info/exclude)"
mkdir -p .whl
PLAT=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
      --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any)
# halter's dependencies besides numpy/torch, and theirs (pinned to what this tree is tested with)
PKGS=$(python - <<'PY'
import importlib.metadata as md
names = ["lark", "gguf", "jsonschema", "jsonschema-specifications", "referencing", "rpds-py", "attrs",
         "jinja2", "markupsafe", "pyyaml", "tqdm", "typing-extensions", "pytest", "iniconfig", "pluggy",
         "packaging", "pygments"]
print(" ".join(f"{n}=={md.version(n)}" for n in names))
PY
)
python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${PLAT[@]}" -d .whl $PKGS
ls -la .whl
du -sh .whl
