"""Token masks for schema grammars vs the plain JSON grammar, on a real GGUF vocabulary.

For each schema (a sample of JSONSchemaBench) and one of its valid instances, the instance is cut
into tokens (greedy longest match over the vocabulary's text tokens: a token that continues a valid
text is always allowed, so this is the longest allowed token at each step) and the token ids are
replayed through a freshly compiled schema grammar, calling ``fill_bitmask`` before each token
(timed, the fill alone) and ``accept_token`` after; the same ids are then replayed through the plain
JSON grammar (``../shared/grammars/json.gbnf``), compiled afresh for each schema so that both start
with no cached masks. Each sequence is replayed twice: the first pass pays for computing masks the
first time a parser state is seen (what one generation with a new schema costs), the second reads
them from the compiled grammar's caches (the steady state). Every pass starts with a full garbage
collection (untimed), so that the collector's debt left by compiling (a compile makes many
long-lived objects) and by earlier passes is not paid inside the next timed pass, wherever it
happens to fall; what a pass's own allocations cost the collector stays in its times, and the
collections inside first passes are counted and timed (``gc.callbacks``) per grammar. A full
collection visits every tracked object of the process, so its cost depends on what else is loaded:
``--import-torch`` imports torch first, as in any process that runs a model (~180k more objects; a
full collection then takes ~100-200 ms instead of ~20 ms). ``--no-collect`` leaves the collector
alone, as a real process does (noisier: a full collection lands in whichever pass comes next); the
automatic collections over the whole run, compiles included, are reported too. Reported: compile
time and mean/p95 mask time per token for both grammars, and the schema/plain ratios; then, for the
first pass, the ``accept_token`` times too (timed apart from the fill: a first pass also pays for building each new
parser state when a token is accepted, and so do the peers), alone and added to the fill; the
second pass's fill + accept; and how many parser states and masks each grammar made for the first
time per token in its first pass (what a first pass pays for, beyond the steady state).

``--interleave`` times halter's masks while choosing each token instead (the longest allowed token
is searched between two fills, as this bench did before 2026-11-21): that search walks thousands of
vocabulary entries, so every fill starts with cold CPU caches, which about doubles the median of
first-time masks. The peers have always been timed in a tight replay loop.

``--peers`` (off by default, so the script runs where the peers are not installed) adds XGrammar and
llguidance (adapters in ``bench/peers_masks.py``; a peer that does not import is reported and left
out), measured in the same run on the same schemas, the same vocabulary (their tokenizers are built
from halter's ``Vocabulary``: same bytes, same ids) and the same token ids, replayed the same way:
each peer fills its mask before each token (timed, the fill alone, like halter's) and accepts the
token after (timed apart). Each peer compiles each schema (timed, its schema-to-grammar conversion
included; halter's compile column is ``compile`` alone, its grammar build is printed apart, and build +
compile is what the peers' compile compares with) and walks the
sequence twice: first pass and steady state. A peer that refuses a schema or rejects a token of
the sequence skips that schema (counted); ratios halter/peer are taken on the schemas the peer
completed, halter's schema-grammar times against the peer's.

halter's schema grammars are built the way users build them, ``Grammar.from_json_schema`` (so a
``uniqueItems`` check runs beside the grammar where a schema has one), with an empty on-disk cache (a
temporary ``$HALTER_CACHE_DIR``), as for a schema never seen before: the build is timed (``build``)
and so is ``compile``. (Before 2026-11-22 the bench built them from ``json_schema_to_gbnf`` text
through the user's grammar cache, which after a first run made the build look like ~0.1 s.)

Run: ``python bench/schema_mask_bench.py [--vocab NAME] [--schemas N] [--strict] [--peers]
[--interleave] [--import-torch] [--no-collect] [-v]``.
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

from halter.grammar import Grammar, Vocabulary
from halter.grammar.bitmask import allocate_bitmask

SHARED = Path(__file__).resolve().parents[1].parent / "shared"


class GcClock:
    """Automatic garbage collections (young, full) and their time: per ``bucket`` while one is set,
    and over the whole run (the bench's own ``collect()`` calls left out)."""

    def __init__(self) -> None:
        self.bucket: str | None = None
        self.stats: dict[str, list] = {}
        self.total = [0, 0, 0.0]
        self.enabled = True              # False: ``collect`` does nothing (``--no-collect``)
        self._explicit = False
        self._t0 = 0.0
        gc.callbacks.append(self)

    def collect(self) -> None:
        if self.enabled:
            self._explicit = True
            try:
                gc.collect()
            finally:
                self._explicit = False

    @contextlib.contextmanager
    def counting(self, bucket: str | None):
        """Count collections under ``bucket`` inside the block (``None``: only the whole run)."""
        self.bucket = bucket
        try:
            yield
        finally:
            self.bucket = None

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
        elif not self._explicit:
            dt, full = time.perf_counter() - self._t0, info["generation"] == 2
            for st in ([self.total, self.stats.setdefault(self.bucket, [0, 0, 0.0])] if self.bucket else [self.total]):
                st[1 if full else 0] += 1
                st[2] += dt


GC_CLOCK = GcClock()


def write_text(cg, vocab, text: bytes, bitmask: np.ndarray, tokens: list[int] | None = None) -> list[float] | None:
    """Mask times (seconds) while writing ``text``; None if the grammar refuses it. Token ids go to ``tokens``."""
    GC_CLOCK.collect()
    tm = cg.matcher()
    by_first: dict[int, list[int]] = {}
    for tid, b in enumerate(vocab.token_bytes):
        if b:
            by_first.setdefault(b[0], []).append(tid)
    times, pos = [], 0
    while pos < len(text):
        t0 = time.perf_counter()
        tm.fill_bitmask(bitmask, 0)
        times.append(time.perf_counter() - t0)
        best = None
        for tid in by_first.get(text[pos], []):
            b = vocab.token_bytes[tid]
            if text.startswith(b, pos) and (best is None or len(b) > len(vocab.token_bytes[best])):
                if bitmask[0, tid >> 5] >> (tid & 31) & 1:
                    best = tid
        if best is None or not tm.accept_token(best):
            return None
        pos += len(vocab.token_bytes[best])
        if tokens is not None:
            tokens.append(best)
    return times


def greedy_tokens(vocab, text: bytes, index: dict[int, list[int]]) -> list[int] | None:
    """Token ids spelling ``text``, longest text token first at each step (None if some byte has none)."""
    tokens, pos = [], 0
    while pos < len(text):
        best, best_len = None, 0
        for tid in index.get(text[pos], ()):
            b = vocab.token_bytes[tid]
            if len(b) > best_len and text.startswith(b, pos):
                best, best_len = tid, len(b)
        if best is None:
            return None
        tokens.append(best)
        pos += best_len
    return tokens


def text_token_index(vocab) -> dict[int, list[int]]:
    """First byte -> ids of the text tokens (not control, not end-of-generation, not empty) starting with it."""
    skip = set(vocab.eog_ids) | set(vocab.special_ids)
    index: dict[int, list[int]] = {}
    for tid, b in enumerate(vocab.token_bytes):
        if b and tid not in skip:
            index.setdefault(b[0], []).append(tid)
    return index


def replay(cg, tokens: list[int], bitmask: np.ndarray, accepts: list[float] | None = None,
           gc_bucket: str | None = None) -> list[float] | None:
    """Mask times (seconds) while accepting ``tokens`` from the start; None if one is refused.
    ``accept_token`` times go to ``accepts`` when given; collections during it to ``gc_bucket``."""
    GC_CLOCK.collect()  # untimed: the collector's debt from compiling and earlier passes is paid here
    tm = cg.matcher()
    fill, accept, times = tm.fill_bitmask, tm.accept_token, []
    acc = accepts if accepts is not None else []
    with GC_CLOCK.counting(gc_bucket):
        return _replay_loop(tokens, bitmask, fill, accept, times, acc)


def _replay_loop(tokens, bitmask, fill, accept, times, acc) -> list[float] | None:
    for tid in tokens:
        t0 = time.perf_counter()
        fill(bitmask, 0)
        t1 = time.perf_counter()
        times.append(t1 - t0)
        if not bitmask[0, tid >> 5] >> (tid & 31) & 1:
            return None
        t1 = time.perf_counter()
        ok = accept(tid)
        acc.append(time.perf_counter() - t1)
        if not ok:
            return None
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab", default="ggml-vocab-llama-spm.gguf")
    ap.add_argument("--schemas", type=int, default=20)
    ap.add_argument("--strict", action="store_true", help="strict mode (default: the API's default mode)")
    ap.add_argument("-v", "--verbose", action="store_true", help="one line per schema")
    ap.add_argument("--peers", action="store_true", help="also XGrammar and llguidance, same schemas and tokens")
    ap.add_argument("--interleave", action="store_true",
                    help="time halter's masks while searching each token (cold caches; the method before 2026-11-21)")
    ap.add_argument("--import-torch", action="store_true",
                    help="import torch first: full garbage collections cost what they do next to a model")
    ap.add_argument("--no-collect", action="store_true",
                    help="no collection before each pass: passes pay the debt compiles leave, as in a real process")
    args = ap.parse_args()
    GC_CLOCK.enabled = not args.no_collect
    os.environ["HALTER_CACHE_DIR"] = tempfile.mkdtemp(prefix="halter-schema-bench-")   # every schema built anew
    if args.import_torch:
        import torch  # noqa: F401 - only its objects matter here
    vocab = Vocabulary.from_gguf(SHARED / "vocab" / args.vocab)
    peers = []
    if args.peers:
        from peers_masks import load_peers  # bench/ is on sys.path when the script runs
        peers = load_peers(vocab, strict=args.strict)
    # per peer: compile times, first/second pass times, halter's on the same schemas, skip reasons
    peer_stats = {p.name: {"compile": [], "first": [], "second": [], "h_first": [], "h_second": [],
                           "accept": [], "h_accept": [], "h_build_compile": [], "refused": 0, "rejected": 0}
                  for p in peers}
    convert: list[float] = []
    bitmask = allocate_bitmask(1, vocab.size)
    index = text_token_index(vocab)
    t0 = time.perf_counter()
    plain_text = (SHARED / "grammars" / "json.gbnf").read_text()
    plain = Grammar.from_gbnf(plain_text).compile(vocab, cache=False, progress=False)
    plain_compile = time.perf_counter() - t0
    rows = [json.loads(line) for line in (SHARED / "schema" / "jsonschemabench_dev.jsonl").open()]
    step = max(1, len(rows) // args.schemas)
    schema_times, plain_times, compiles, skipped = [], [], [], 0
    warm_schema: list[float] = []
    warm_plain: list[float] = []
    schema_accepts: list[float] = []     # accept_token times, first pass
    plain_accepts: list[float] = []
    warm_schema_acc: list[float] = []    # accept_token times, second pass
    warm_plain_acc: list[float] = []
    new_states = {"schema grammars": [0, 0, 0], "plain JSON": [0, 0, 0]}   # first pass: states, masks, tokens
    for row in rows[::step][:args.schemas]:
        valid = [t["data"] for t in row["tests"] if t["valid"]]
        if not valid:
            continue
        text = json.dumps(valid[0]).encode()
        try:
            t0 = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                g = Grammar.from_json_schema(row["schema"], strict=args.strict)
            t_build = time.perf_counter() - t0
            t0 = time.perf_counter()
            cg = g.compile(vocab, cache=False, progress=False)
            compiles.append(time.perf_counter() - t0)
            convert.append(t_build)
        except Exception as e:  # noqa: BLE001 - counted
            skipped += 1
            if args.verbose:
                print(f"  {row['id']}: skipped ({type(e).__name__}: {str(e)[:80]})")
            continue
        # both grammars start cold (fresh compile, no masks cached yet): the same conditions
        plain = Grammar.from_gbnf(plain_text).compile(vocab, cache=False, progress=False)
        st2: list[float] = []
        if args.interleave:
            tokens: list[int] = []
            st = write_text(cg, vocab, text, bitmask, tokens)
            pt = write_text(plain, vocab, text, bitmask)
            if st is not None and pt is not None:        # second pass: cached masks (steady state)
                st2 = write_text(cg, vocab, text, bitmask) or []
                warm_schema += st2
                warm_plain += write_text(plain, vocab, text, bitmask) or []
        else:
            tokens = greedy_tokens(vocab, text, index) or []
            s_acc: list[float] = []
            p_acc: list[float] = []
            n0 = (len(cg.space.nodes), len(plain.space.nodes))
            st = replay(cg, tokens, bitmask, s_acc, "schema grammars") if tokens else None
            pt = replay(plain, tokens, bitmask, p_acc, "plain JSON") if tokens else None
            if st is not None and pt is not None:        # second pass: cached masks (steady state)
                for name, c, before in (("schema grammars", cg, n0[0]), ("plain JSON", plain, n0[1])):
                    counts = new_states[name]
                    counts[0] += len(c.space.nodes) - before
                    counts[1] += len(c._mask_memo)
                    counts[2] += len(tokens)
                st2 = replay(cg, tokens, bitmask, warm_schema_acc) or []
                warm_schema += st2
                warm_plain += replay(plain, tokens, bitmask, warm_plain_acc) or []
        if st is None or pt is None:
            skipped += 1
            if args.verbose:
                print(f"  {row['id']}: skipped (the {'schema' if st is None else 'plain'} grammar refused the text)")
            continue
        if args.verbose:
            print(f"  {row['id']}: {len(st)} tokens, compile {compiles[-1]:.2f} s, mask {1000 * statistics.mean(st):.3f} ms "
                  f"vs {1000 * statistics.mean(pt):.3f} ms plain; {len(g.rules) if hasattr(g, 'rules') else '?'} rules")
        schema_times += st
        plain_times += pt
        if not args.interleave:
            schema_accepts += s_acc
            plain_accepts += p_acc
        for peer in peers:  # the same schema, replaying the token ids halter chose in its first pass
            ps = peer_stats[peer.name]
            try:
                t0 = time.perf_counter()
                m = peer.compile(json.dumps(row["schema"]))
                ctime = time.perf_counter() - t0
            except Exception as e:  # noqa: BLE001 - PeerError, or anything else: the run goes on
                ps["refused"] += 1
                if args.verbose:
                    print(f"  {row['id']}: {peer.name} refused the schema ({e})")
                continue
            p_acc = []
            try:
                GC_CLOCK.collect()
                with GC_CLOCK.counting(peer.name):
                    first = peer.walk(m, tokens, p_acc)
                GC_CLOCK.collect()
                second = peer.walk(m, tokens)
            except Exception as e:  # noqa: BLE001 - a peer failing must not stop the run
                ps["rejected"] += 1
                if args.verbose:
                    print(f"  {row['id']}: {peer.name} rejected the sequence ({e})")
                continue
            ps["compile"].append(ctime)
            ps["h_build_compile"].append(convert[-1] + compiles[-1])
            ps["first"] += first
            ps["second"] += second
            ps["h_first"] += st
            ps["h_second"] += st2
            if not args.interleave:
                ps["accept"] += p_acc
                ps["h_accept"] += s_acc
            if args.verbose:
                print(f"  {row['id']}: {peer.name} compile {ctime:.3f} s, mask {1000 * statistics.mean(first):.3f} ms, "
                      f"second pass {1000 * statistics.mean(second):.3f} ms")

    def ms(xs, q=None):
        if not xs:
            return "-"
        return f"{1000 * (statistics.mean(xs) if q is None else np.percentile(xs, q)):.4f} ms"

    def row_(name, compile_s, xs):
        return f"| {name} | {compile_s} | {ms(xs)} | {ms(xs, 50)} | {ms(xs, 95)} | {len(xs)} |"

    print(f"vocabulary {args.vocab}: {vocab.size} tokens; {len(compiles)} schemas, {skipped} skipped")
    print("| grammar | compile (mean) | mask per token (mean) | median | p95 | tokens |")
    print("|---|---:|---:|---:|---:|---:|")
    print(row_("plain JSON (json.gbnf)", f"{plain_compile:.2f} s", plain_times))
    print(row_("schema grammars", f"{statistics.mean(compiles) if compiles else 0:.2f} s", schema_times))
    print(row_("plain JSON, second pass (masks cached)", "", warm_plain))
    print(row_("schema grammars, second pass", "", warm_schema))
    for peer in peers:
        ps = peer_stats[peer.name]
        comp = f"{statistics.mean(ps['compile']):.3f} s" if ps["compile"] else "-"
        print(row_(f"{peer.name} {peer.version}, schemas", comp, ps["first"]))
        print(row_(f"{peer.name}, second pass", "", ps["second"]))
    for name, s, p in (("first pass", schema_times, plain_times), ("second pass", warm_schema, warm_plain)):
        if s and p:
            print(f"ratio schema/plain, {name}: mean {statistics.mean(s) / statistics.mean(p):.2f}x, "
                  f"p95 {np.percentile(s, 95) / np.percentile(p, 95):.2f}x")
    if schema_accepts and plain_accepts:
        # a first pass also pays accept_token, which builds each new parser state: fill + accept
        print("\nfirst pass, accept_token alone and fill + accept per token:")
        print("| grammar | accept (mean) | median | fill + accept (mean) | median | p95 |")
        print("|---|---:|---:|---:|---:|---:|")
        both = {}

        def acc_row(name, fills, accepts):
            xs = both[name] = [f + a for f, a in zip(fills, accepts)]
            print(f"| {name} | {ms(accepts)} | {ms(accepts, 50)} | {ms(xs)} | {ms(xs, 50)} | {ms(xs, 95)} |")

        acc_row("plain JSON (json.gbnf)", plain_times, plain_accepts)
        acc_row("schema grammars", schema_times, schema_accepts)
        for peer in peers:
            ps = peer_stats[peer.name]
            if ps["accept"]:
                acc_row(f"{peer.name}, schemas", ps["first"], ps["accept"])
        s_, p_ = both["schema grammars"], both["plain JSON (json.gbnf)"]
        print(f"ratio schema/plain, fill + accept, first pass: mean {statistics.mean(s_) / statistics.mean(p_):.2f}x, "
              f"median {np.percentile(s_, 50) / np.percentile(p_, 50):.2f}x")
        s2 = [f + a for f, a in zip(warm_schema, warm_schema_acc)]
        p2 = [f + a for f, a in zip(warm_plain, warm_plain_acc)]
        if s2 and p2:
            print(f"second pass, fill + accept per token: schema grammars {ms(s2)} (median {ms(s2, 50)}), "
                  f"plain JSON {ms(p2)} (median {ms(p2, 50)}); ratio mean "
                  f"{statistics.mean(s2) / statistics.mean(p2):.2f}x, median "
                  f"{np.percentile(s2, 50) / np.percentile(p2, 50):.2f}x")
        # what a first pass pays for: parser states and masks made for the first time
        print("first pass, made for the first time per token: " + "; ".join(
            f"{name}: {c[0] / c[2]:.2f} parser states, {c[1] / c[2]:.2f} masks ({c[0]} and {c[1]} over {c[2]} tokens)"
            for name, c in new_states.items() if c[2]))
        for peer in peers:
            ps = peer_stats[peer.name]
            if ps["accept"]:
                h = [f + a for f, a in zip(ps["h_first"], ps["h_accept"])]
                p = both[f"{peer.name}, schemas"]
                print(f"ratio halter/{peer.name}, fill + accept, first pass (same schemas, same tokens): "
                      f"mean {statistics.mean(h) / statistics.mean(p):.2f}x, "
                      f"median {np.percentile(h, 50) / np.percentile(p, 50):.2f}x")
    if GC_CLOCK.stats:
        print("garbage collection inside first passes" + (" (torch imported)" if args.import_torch else "") + ": "
              + "; ".join(f"{k}: {v[0]} young, {v[1]} full, {1000 * v[2]:.0f} ms"
                          for k, v in GC_CLOCK.stats.items()))
        t = GC_CLOCK.total
        print(f"automatic garbage collections over the whole run (compiles, passes, peers): {t[0]} young, {t[1]} full, "
              f"{1000 * t[2]:.0f} ms")
    if convert:
        build_compile = [b + c for b, c in zip(convert, compiles)]
        print(f"halter schema grammar build (Grammar.from_json_schema, empty on-disk cache; not in the compile "
              f"column): mean {statistics.mean(convert):.3f} s; build + compile: mean "
              f"{statistics.mean(build_compile):.3f} s, median {statistics.median(build_compile):.3f} s")
    for peer in peers:
        ps = peer_stats[peer.name]
        if ps["compile"]:
            print(f"ratio halter build + compile / {peer.name} compile (its conversion included; same schemas): "
                  f"mean {statistics.mean(ps['h_build_compile']) / statistics.mean(ps['compile']):.2f}x, "
                  f"median {statistics.median(ps['h_build_compile']) / statistics.median(ps['compile']):.2f}x")
        print(f"{peer.name}: {len(ps['compile'])} schemas completed, {ps['refused']} refused at compile, "
              f"{ps['rejected']} rejected a token of the sequence")
        for name, h, p in (("first pass", ps["h_first"], ps["first"]), ("second pass", ps["h_second"], ps["second"])):
            if h and p:
                print(f"ratio halter/{peer.name}, {name} (same schemas, same tokens): "
                      f"mean {statistics.mean(h) / statistics.mean(p):.2f}x, "
                      f"median {np.percentile(h, 50) / np.percentile(p, 50):.2f}x, "
                      f"p95 {np.percentile(h, 95) / np.percentile(p, 95):.2f}x")


if __name__ == "__main__":
    main()
