#!/usr/bin/env bash
# Prepare bench/gpu_check.sh's run on a bare GPU machine with no network: download halter's
# dependencies that the GPU image lacks (pure Python, and rpds-py compiled) as wheels for the machine's
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
# halter's run-time dependencies (the closure of its requirements, as installed here) less what the
# GPU image already holds (its package list: /work/.library/device/KINDS.md): numpy, torch, numba,
# jinja2, pyyaml, tqdm, attrs, pytest and the like are the image's own.
PKGS=$(python - <<'PY'
import importlib.metadata as md
from packaging.requirements import Requirement
on_image = {"numpy", "torch", "numba", "llvmlite", "sympy", "mpmath", "networkx", "filelock", "fsspec",
            "setuptools", "jinja2", "markupsafe", "pyyaml", "tqdm", "typing-extensions", "attrs", "idna",
            "six", "python-dateutil", "requests", "urllib3", "certifi", "charset-normalizer", "packaging"}
seen, todo = {}, ["halter"]
while todo:
    name = todo.pop().lower().replace("_", "-")
    if name in seen or name in on_image:
        continue
    dist = md.distribution(name)
    seen[name] = dist.version
    for r in dist.requires or []:
        req = Requirement(r)
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            todo.append(req.name)
del seen["halter"]
print(" ".join(f"{n}=={v}" for n, v in sorted(seen.items())))
PY
)
echo "carrying: $PKGS"
rm -f .whl/*.whl
python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${PLAT[@]}" -d .whl $PKGS
ls -la .whl
du -sh .whl
