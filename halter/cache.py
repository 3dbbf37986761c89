"""halter's one cache: every memo kept in memory and every file kept on disk, bounded and clearable.

On disk, everything lives under one directory, ``$HALTER_CACHE_DIR`` (default ``~/.cache/halter``):
parsed grammars, token tries, compiled tables, GGUF tokenizers and packed weights
(``tokenizers/``, ``packed/``: ``halter.engine.tokenizer_cache``, ``halter.engine.packed_cache``),
fetched models. The directory is bounded in bytes (``$HALTER_CACHE_MB``, default 4096) and in files (``$HALTER_CACHE_FILES``, default 20,000); when a
write takes it past either bound, the least recently used files are deleted (a read counts as a
use) down to 90% of the bound — except downloaded models (``models/``, see ``halter.fetch``),
which only ``clear`` deletes. A write costs O(1): the process keeps a running count of the
directory's bytes and files and walks the directory only when that count reaches a bound, after
256 writes or after 30 seconds (so other processes' writes are counted within that time). Writes are atomic (a temporary file renamed into place), so two processes may share the
directory; a file that is corrupt, truncated or not written by halter is ignored and rebuilt.
Pickled files carry an HMAC of their bytes under a key kept in the directory (``secret.key``,
created on first use, readable by its owner only): a pickle whose HMAC does not verify is never
unpickled.

In memory, each memo is a ``BoundedMemo`` (an LRU of at most ``max_entries`` values, safe to use
from several threads) registered here by name, so ``halter.cache.info()`` can report it and
``halter.cache.clear()`` can empty it with the files. ``python -m halter cache info|clear`` does
the same from the command line.
"""
from __future__ import annotations

import collections
import hashlib
import hmac
import json
import logging
import os
import pickle
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable, Generic, Hashable, TypeVar

V = TypeVar("V")

DEFAULT_MB = 4096
DEFAULT_FILES = 20_000
_MAGIC = b"HALTER-PICKLE-1\n"
_SECRET = "secret.key"
MODELS_SUBDIR = "models"      # downloaded models (halter.fetch): cleared, never evicted


def directory() -> Path:
    """The cache directory (not created until something is written)."""
    return Path(os.environ.get("HALTER_CACHE_DIR") or Path.home() / ".cache" / "halter")


def max_bytes() -> int:
    """The byte bound of the directory, from ``$HALTER_CACHE_MB``."""
    return int(float(os.environ.get("HALTER_CACHE_MB") or DEFAULT_MB) * 1024 * 1024)


def max_files() -> int:
    """The file-count bound of the directory, from ``$HALTER_CACHE_FILES``."""
    return int(os.environ.get("HALTER_CACHE_FILES") or DEFAULT_FILES)


class BoundedMemo(Generic[V]):
    """A thread-safe LRU memo of at most ``max_entries`` values."""

    def __init__(self, name: str, max_entries: int) -> None:
        self.name = name
        self.max_entries = max_entries
        self._data: OrderedDict[Hashable, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> V | None:
        with self._lock:
            value = self._data.get(key)
            if value is not None:
                self._data.move_to_end(key)
            return value

    def put(self, key: Hashable, value: V) -> V:
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.max_entries:
                self._data.popitem(last=False)
            return value

    def get_or_make(self, key: Hashable, make: Callable[[], V]) -> V:
        value = self.get(key)
        return value if value is not None else self.put(key, make())

    def clear(self) -> None:
        with self._lock:
            self._data.clear()

    def __len__(self) -> int:
        return len(self._data)


_MEMOS: dict[str, BoundedMemo[Any]] = {}
_MEMOS_LOCK = threading.Lock()


def memo(name: str, max_entries: int) -> BoundedMemo[Any]:
    """The process-wide memo called ``name`` (made on first request)."""
    with _MEMOS_LOCK:
        m = _MEMOS.get(name)
        if m is None:
            m = _MEMOS[name] = BoundedMemo(name, max_entries)
        return m


# -- files ------------------------------------------------------------------------------------


def path(kind: str, key: str, suffix: str) -> Path:
    """Where the file of ``kind`` (a subfolder) and ``key`` (a hex digest) lives."""
    return directory() / kind / f"{key}{suffix}"


_digests: dict[tuple[str, ...], str] = {}


def source_digest(*modules: str) -> str:
    """A sha256 (hex, 16 digits) of the source files of ``modules`` (dotted names, e.g.
    ``"halter.engine.bpe"``), computed once per process: part of a cache key, so that stored
    results made by other code are never read back."""
    got = _digests.get(modules)
    if got is None:
        import importlib.util
        h = hashlib.sha256()
        for name in modules:
            spec = importlib.util.find_spec(name)
            origin = spec.origin if spec is not None else None
            h.update(name.encode() + b"\0")
            if origin:
                h.update(Path(origin).read_bytes())
        got = _digests[modules] = h.hexdigest()[:16]
    return got


def switched_on(variable: str) -> bool:
    """False when the environment variable ``variable`` is ``0``, ``false``, ``no`` or ``off``."""
    return os.environ.get(variable, "1").strip().lower() not in ("0", "false", "no", "off")


def file_key(path: str | os.PathLike[str], **extra: Any) -> str | None:
    """A key (sha256 hex) for what is derived from the file ``path``: its identity (resolved path,
    size, modification time in nanoseconds, inode) and ``extra`` (JSON values: what else the
    result depends on). None when the file cannot be stat'ed."""
    try:
        real = os.path.realpath(path)
        st = os.stat(real)
    except OSError:
        return None
    ident = {"path": real, "size": st.st_size, "mtime_ns": st.st_mtime_ns, "ino": st.st_ino, **extra}
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()


_pending: collections.deque[tuple[Callable[..., Any], tuple[Any, ...], str]] = collections.deque()
_pending_lock = threading.Lock()
_writer: threading.Thread | None = None


def write_in_background(write: Callable[..., Any], *args: Any, name: str) -> None:
    """Run ``write(*args)`` (a cache write) on the cache's writer thread, off the caller's path.

    Writes queue up for one non-daemon thread, started when none is running and ending when the
    queue is empty: a process that ends at once still finishes them, and a write queued while
    another runs costs no thread start (starting a thread waits until it runs, ~10 ms while the
    packed weights are being written). ``name`` names the write in the log when it fails."""
    global _writer
    with _pending_lock:
        _pending.append((write, (*args,), name))
        if _writer is not None:
            return
        _writer = threading.Thread(target=_drain, name="halter-cache-writer", daemon=False)
        _writer.start()          # (it runs once the lock is released: joinable from now on)


def _drain() -> None:
    global _writer
    while True:
        with _pending_lock:
            if not _pending:
                _writer = None
                return
            write, args, name = _pending.popleft()
        try:
            write(*args)
        except Exception:  # noqa: BLE001 - a failed write must not stop the ones queued after it
            logging.getLogger("halter.cache").exception("cache write %s failed", name)


def wait_for_writes() -> None:
    """Wait for the background writes queued so far (tests; a process also waits at exit)."""
    while True:
        with _pending_lock:
            thread = _writer
        if thread is None:
            return
        thread.join()


def touch(p: Path) -> None:
    """Mark a file as just used (the LRU order is the files' modification times)."""
    try:
        os.utime(p)
    except OSError:
        pass


def write_atomic(p: Path, write: Callable[[Path], None]) -> bool:
    """Write ``p`` through ``write(tmp_path)`` and rename it into place; then keep the bounds.

    Returns False (and leaves nothing behind) when the directory cannot be written: a read-only
    home must not break the caller, which simply goes on without a cached copy.
    """
    tmp = p.with_name(f".{p.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        write(tmp)
        os.replace(tmp, p)
    except OSError:
        try:
            tmp.unlink()
        except OSError:
            pass
        return False
    _note_write(p)
    return True


_RESCAN_WRITES = 256            # writes between walks of the directory (other processes write too)
_RESCAN_SECONDS = 30.0
_tally_lock = threading.Lock()
_tally: dict[str, Any] = {"key": None, "bytes": 0, "files": 0, "writes": 0, "when": 0.0}


def _note_write(p: Path) -> None:
    """Count a file just written; walk the directory and evict only when the count says so."""
    try:
        size = p.stat().st_size
    except OSError:
        size = 0
    key = (str(directory()), max_bytes(), max_files())
    with _tally_lock:
        t = _tally
        fresh = t["key"] == key and t["writes"] < _RESCAN_WRITES and time.monotonic() - t["when"] < _RESCAN_SECONDS
        if fresh and t["bytes"] + size <= key[1] and t["files"] + 1 <= key[2]:
            t["bytes"] += size
            t["files"] += 1
            t["writes"] += 1
            return
    evict(keep=p)


def _secret() -> bytes:
    d = directory()
    sp = d / _SECRET
    try:
        data = sp.read_bytes()
        if len(data) == 32:
            return data
    except OSError:
        pass
    d.mkdir(parents=True, exist_ok=True)
    key = os.urandom(32)
    try:
        fd = os.open(sp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(key)
        return key
    except FileExistsError:                      # another process made it first: use theirs
        data = sp.read_bytes()
        if len(data) == 32:
            return data
        sp.unlink(missing_ok=True)               # a broken key file: replace it
        return _secret()


def store_pickle(p: Path, obj: Any) -> bool:
    """Pickle ``obj`` to ``p`` with an HMAC header (see the module docstring). False when it could
    not be written (a structure nested too deeply for the pickler is not cached: it is rebuilt)."""
    try:
        payload = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    except RecursionError:
        return False
    try:
        tag = hmac.new(_secret(), payload, hashlib.sha256).digest()
    except OSError:
        return False

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as f:
            f.write(_MAGIC + tag + payload)
    return write_atomic(p, write)


def load_pickle(p: Path) -> Any | None:
    """The object stored at ``p`` by ``store_pickle``, or None when absent, corrupt or foreign.

    A file that fails the check is deleted, so the caller's rebuild replaces it.
    """
    try:
        data = p.read_bytes()
    except OSError:
        return None
    head = len(_MAGIC) + 32
    ok = data[:len(_MAGIC)] == _MAGIC and len(data) > head
    if ok:
        try:
            expected = hmac.new(_secret(), data[head:], hashlib.sha256).digest()
        except OSError:
            return None
        ok = hmac.compare_digest(expected, data[len(_MAGIC):head])
    if ok:
        try:
            obj = pickle.loads(data[head:])
        except Exception:                        # noqa: BLE001 - signed but unreadable (old code)
            ok = False
    if not ok:
        try:
            p.unlink()
        except OSError:
            pass
        return None
    touch(p)
    return obj


def _files() -> list[tuple[float, int, Path]]:
    out = []
    root = directory()
    if not root.is_dir():
        return out
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            if name == _SECRET and dirpath == str(root):
                continue
            fp = Path(dirpath) / name
            try:
                st = fp.stat()
            except OSError:
                continue                         # deleted by another process meanwhile
            out.append((st.st_mtime, st.st_size, fp))
    return out


def evict(keep: Path | None = None) -> int:
    """When the directory is past a bound, delete least recently used files (never ``keep``) until
    it is within 90% of each; how many went."""
    models = directory() / MODELS_SUBDIR
    files = [f for f in _files() if models not in f[2].parents]
    total = sum(size for _, size, _ in files)
    limit_b, limit_n = max_bytes(), max_files()
    count, removed = len(files), 0
    if total > limit_b or count > limit_n:       # down to 90%, so the next writes need no walk
        target_b, target_n = limit_b * 9 // 10, max(1, limit_n * 9 // 10)
        files.sort(key=lambda f: f[0])
        for _, size, fp in files:
            if total <= target_b and count <= target_n:
                break
            if keep is not None and fp == keep:
                continue
            try:
                fp.unlink()
            except OSError:
                continue
            total -= size
            count -= 1
            removed += 1
    with _tally_lock:
        _tally.update(key=(str(directory()), limit_b, limit_n), bytes=total, files=count, writes=0,
                      when=time.monotonic())
    return removed


def info() -> dict[str, Any]:
    """What the cache holds: files and bytes on disk (per subfolder) and entries per memo."""
    files = _files()
    kinds: dict[str, list[int]] = {}
    root = directory()
    for _, size, fp in files:
        rel = fp.relative_to(root).parts
        kind = rel[0] if len(rel) > 1 else "."
        k = kinds.setdefault(kind, [0, 0])
        k[0] += 1
        k[1] += size
    return {
        "directory": str(root),
        "files": len(files),
        "bytes": sum(size for _, size, _ in files),
        "max_bytes": max_bytes(),
        "max_files": max_files(),
        "kinds": {k: {"files": v[0], "bytes": v[1]} for k, v in sorted(kinds.items())},
        "memos": {name: {"entries": len(m), "max_entries": m.max_entries}
                  for name, m in sorted(_MEMOS.items())},
    }


def clear(disk: bool = True) -> None:
    """Empty every memo and (unless ``disk=False``) delete every cached file."""
    for m in list(_MEMOS.values()):
        m.clear()
    if disk:
        with _tally_lock:
            _tally["key"] = None
        for _, _, fp in _files():
            try:
                fp.unlink()
            except OSError:
                pass
