"""halter.cache: one bounded cache for memos and files; corrupt or foreign files are rebuilt."""
from __future__ import annotations

import os
import pickle
import subprocess
import sys
import time

import numpy as np
import pytest

import halter
from halter import cache


@pytest.fixture()
def cache_dir(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("HALTER_CACHE_DIR", str(d))
    cache.clear(disk=False)
    yield d
    cache.clear(disk=False)


def _vocab(n: int = 300) -> halter.Vocabulary:
    toks = [bytes([i]) for i in range(256)] + [f"w{i}".encode() for i in range(n - 256)]
    return halter.Vocabulary.from_token_bytes(toks, eog_ids=[0])


def _grammar(i: int) -> halter.Grammar:
    # long enough (> 2,000 characters of source) that the parsed grammar is stored on disk too
    alts = " | ".join(f'"w{j}"' for j in range(i, i + 400))
    return halter.Grammar.from_gbnf(f"root ::= ({alts}) [a-z]{{0,{i + 1}}}")


def test_info_counts_files_bytes_and_memos(cache_dir):
    assert cache.info()["files"] == 0
    cg = _grammar(1).compile(_vocab())
    cg.matcher().allowed_mask()                 # builds the tables of the start's positions
    assert cg.store()                           # ... which go to the cache
    info = cache.info()
    assert info["directory"] == str(cache_dir)
    assert set(info["kinds"]) >= {"grammars", "tables", "tries"}
    assert info["files"] == sum(k["files"] for k in info["kinds"].values())
    assert info["bytes"] == sum(p.stat().st_size for p in cache_dir.rglob("*") if p.is_file()
                                and p.name != "secret.key")
    assert info["memos"]["token tries"]["entries"] >= 1
    m = cg.matcher()                            # the tables work: "w5" may start, "a" may not
    assert m.is_allowed(256 + 5) and not m.is_allowed(ord("a"))


def test_cli_cache_info_and_clear(cache_dir):
    cg = _grammar(2).compile(_vocab())
    cg.matcher().allowed_mask()
    cg.store()
    env = dict(os.environ, HALTER_CACHE_DIR=str(cache_dir))
    out = subprocess.run([sys.executable, "-m", "halter", "cache", "info"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    files = cache.info()["files"]
    assert f"files      {files} " in out.stdout and "bytes" in out.stdout and "tables" in out.stdout
    out = subprocess.run([sys.executable, "-m", "halter", "cache", "clear"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and f"removed {files} files" in out.stdout
    assert cache.info()["files"] == 0


def test_eviction_keeps_the_directory_within_its_byte_limit(cache_dir, monkeypatch):
    for i in range(6):
        p = cache.path("blobs", f"b{i}", ".bin")
        assert cache.write_atomic(p, lambda t: t.write_bytes(b"x" * 100_000))
        os.utime(p, (time.time() - 100 + i, time.time() - 100 + i))   # b0 oldest, b5 newest
    cache.touch(cache.path("blobs", "b0", ".bin"))                     # a read makes b0 recent
    monkeypatch.setenv("HALTER_CACHE_MB", str(350_000 / (1024 * 1024)))
    assert cache.write_atomic(cache.path("blobs", "new", ".bin"), lambda t: t.write_bytes(b"y" * 100_000))
    left = sorted(p.stem for p in (cache_dir / "blobs").iterdir())
    assert cache.info()["bytes"] <= 350_000
    assert left == ["b0", "b5", "new"]          # least recently used went first; the new one stays


def test_eviction_by_file_count(cache_dir, monkeypatch):
    monkeypatch.setenv("HALTER_CACHE_FILES", "3")
    for i in range(5):
        cache.write_atomic(cache.path("blobs", f"f{i}", ".bin"), lambda t: t.write_bytes(b"z"))
    assert cache.info()["files"] == 3


def test_a_write_does_not_walk_a_large_cache(cache_dir, monkeypatch):
    """With 20,000 files a walk of the directory costs most of a second: a write within the bounds
    must not walk it (only every 256 writes, at a bound, or after 30 s)."""
    walks = []
    real = cache._files
    monkeypatch.setattr(cache, "_files", lambda: walks.append(1) or real())
    for i in range(100):
        cache.write_atomic(cache.path("blobs", f"w{i}", ".bin"), lambda t: t.write_bytes(b"w"))
    assert len(walks) <= 1
    monkeypatch.setenv("HALTER_CACHE_FILES", "50")          # a bound now passed: one walk evicts
    cache.write_atomic(cache.path("blobs", "last", ".bin"), lambda t: t.write_bytes(b"w"))
    assert len(walks) == 2 and cache.info()["files"] <= 50
    assert (cache_dir / "blobs" / "last.bin").exists()


def test_memo_is_bounded_lru():
    m = cache.memo("test memo", 2)
    m.put("a", 1), m.put("b", 2)
    assert m.get("a") == 1                      # a is now the most recent
    m.put("c", 3)
    assert m.get("b") is None and m.get("a") == 1 and m.get("c") == 3
    assert cache.info()["memos"]["test memo"] == {"entries": 2, "max_entries": 2}
    cache.clear(disk=False)
    assert len(m) == 0


def test_corrupt_table_and_trie_files_are_rebuilt(cache_dir):
    g, v = _grammar(3), _vocab()
    first = g.compile(v)
    ref = first.matcher()
    mask_ref = np.array(ref.allowed_mask()).copy() if hasattr(ref, "allowed_mask") else None
    assert first.store()
    files = [p for p in cache_dir.rglob("*.npz")]
    assert {p.parent.name for p in files} == {"tables", "tries"}
    for p in files:
        p.write_bytes(b"not a zip file at all")
    cache.clear(disk=False)                     # the trie memo too, so the file is read again
    again = _grammar(3).compile(v)             # a new Grammar object: nothing memoised on it
    assert not again.from_cache
    if mask_ref is not None:
        assert np.array_equal(np.array(again.matcher().allowed_mask()), mask_ref)
    assert again.store()
    for p in files:                             # replaced by good files
        with np.load(p) as z:
            assert len(z.files) > 0
    assert _grammar(3).compile(v).from_cache


class _Boom:
    def __reduce__(self):
        return (os.system, ("echo pwned > /dev/null",))


def test_foreign_or_tampered_pickles_are_never_unpickled(cache_dir, monkeypatch):
    calls = []
    monkeypatch.setattr(pickle, "loads", lambda *a, **k: calls.append(a) or None)
    p = cache.path("grammars", "x" * 32, ".pickle")
    p.parent.mkdir(parents=True)
    p.write_bytes(pickle.dumps(_Boom()))         # a plain pickle someone dropped in
    assert cache.load_pickle(p) is None and not p.exists() and calls == []
    monkeypatch.undo()
    assert cache.store_pickle(p, ("rules", 1))
    assert cache.load_pickle(p) == ("rules", 1)
    data = bytearray(p.read_bytes())
    data[-1] ^= 1                                # one flipped bit in the payload
    p.write_bytes(bytes(data))
    assert cache.load_pickle(p) is None and not p.exists()


def test_parsed_grammar_pickle_corrupted_is_rebuilt(cache_dir):
    g = _grammar(4)
    pickles = list(cache_dir.rglob("*.pickle"))
    assert len(pickles) == 1
    pickles[0].write_bytes(b"garbage")
    g2 = _grammar(4)
    assert g2.matches("w7abc") == g.matches("w7abc") is True
    assert cache.load_pickle(pickles[0]) is not None   # stored again, signed


def test_the_constructor_builds_what_compile_builds(cache_dir):
    """``CompiledGrammar(grammar, vocab)`` is a complete compiled grammar: it loads stored tables as
    ``compile`` does, gives the same masks, and refuses what is not a grammar or a vocabulary."""
    from halter.grammar.compiled import CompiledGrammar
    grammar, vocab = _grammar(3), _vocab()
    first = grammar.compile(vocab, cache=False)
    first.matcher().allowed_mask()
    assert first.store()
    direct = CompiledGrammar(grammar, vocab)
    assert direct.from_cache and direct.n_built == first.n_built > 0
    fresh = CompiledGrammar(grammar, vocab, cache=False)
    assert not fresh.from_cache and fresh.n_built == 0
    for cg in (direct, fresh):
        m, ref = cg.matcher(), first.matcher()
        for token in (256 + 3, ord("b"), ord("a")):
            assert (m.allowed_mask() == ref.allowed_mask()).all()
            assert m.accept_token(token) == ref.accept_token(token)
    with pytest.raises(TypeError, match="Vocabulary"):
        CompiledGrammar(grammar, [b"a"])
    with pytest.raises(TypeError, match="Grammar"):
        CompiledGrammar('root ::= "a"', vocab)


def test_background_writes_run_in_order_and_a_failure_does_not_stop_the_rest(tmp_path, caplog):
    """Cache writes queue for one writer thread: each runs, in order, after the caller has gone on;
    one that raises is logged and the ones queued after it still run."""
    import threading
    gate = threading.Event()
    done: list[str] = []

    def slow(name: str) -> None:
        gate.wait(5)
        done.append(name)

    def broken() -> None:
        raise RuntimeError("disk on fire")

    cache.write_in_background(slow, "first", name="first")
    cache.write_in_background(broken, name="broken")
    cache.write_in_background(lambda p: p.write_text("kept"), tmp_path / "later.txt", name="later")
    assert done == []                                  # queued behind the first, not run by the caller
    with caplog.at_level("ERROR", logger="halter.cache"):
        gate.set()
        cache.wait_for_writes()
    assert done == ["first"] and (tmp_path / "later.txt").read_text() == "kept"
    assert "cache write broken failed" in caplog.text and "disk on fire" in caplog.text
