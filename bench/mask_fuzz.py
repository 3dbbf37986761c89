"""Differential fuzz of token masks and the character matcher on random grammars.

Random GBNF grammars (1-6 rules: recursion, left recursion, empty alternatives, every repetition
form, literals with escapes, classes with ranges and negation, multi-byte characters, ``.``) are
checked three ways:

* ``Grammar.matches`` against an independent recogniser of the same grammar (a fixpoint over
  (rule, start) -> ends, written here from the grammar's own tree) on random strings and on
  strings the grammar draws (``random_text``);
* the token mask of every state along random walks, against feeding each token's bytes to the
  character matcher (a copy of ``Grammar.matcher()`` advanced by the same text), on a vocabulary of
  all single bytes plus pieces cut from the grammar's strings (some splitting a UTF-8 character),
  an end-of-generation token (allowed exactly where the text may end) and a special token (never);
* ``fill_bitmask`` against ``allowed_mask``, and ``rollback`` against the masks recorded on the way.

A grammar the engine refuses with ``GrammarError`` (no finite string, too complex) is counted apart;
any other exception, a wrong verdict or a grammar over the time limit is a finding (a time-out
names what was running: halter, or the fuzz's own recogniser, slow on some very ambiguous
grammars). The 2026-11-22 round of this design (~2,800 grammars, ~30M token verdicts) found no
wrong mask, and found the slow cases fixed in 7cf9203 (cyclic grammars) and documented in
docs/grammar.md.

Run: ``python bench/mask_fuzz.py [--grammars N] [--seed S] [--time-limit SECONDS]``.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import tempfile
from typing import Any

import numpy as np

ALPHABET = ["a", "b", "c", "(", ")", ",", '"', " ", "0", "1", "é", "漢", "😀", "\\", "\n"]

# grammar tree: ("lit", text) ("cls", ((lo, hi), ...), negated) ("any",) ("ref", name)
#               ("seq", [items]) ("alt", [options]) ("rep", expr, min, max or None)


def _expr(rng: random.Random, names: list[str], depth: int) -> tuple:
    r = rng.random()
    if depth <= 0 or r < 0.35:
        k = rng.random()
        if k < 0.4:
            return ("lit", "".join(rng.choice(ALPHABET) for _ in range(rng.choice([0, 1, 1, 2, 3]))))
        if k < 0.65:
            ranges = []
            for _ in range(rng.randint(1, 3)):
                a, b = ord(rng.choice(ALPHABET)), ord(rng.choice(ALPHABET))
                ranges.append(tuple(sorted((a, b))) if rng.random() < 0.35 else (a, a))
            return ("cls", tuple(ranges), rng.random() < 0.25)
        return ("any",) if k < 0.72 else ("ref", rng.choice(names))
    if r < 0.55:
        return ("seq", [_expr(rng, names, depth - 1) for _ in range(rng.randint(2, 3))])
    if r < 0.75:
        options = [_expr(rng, names, depth - 1) for _ in range(rng.randint(2, 3))]
        if rng.random() < 0.2:
            options.insert(rng.randint(0, len(options)), ("seq", []))
        return ("alt", options)
    lo = rng.choice([0, 0, 1, 2])
    hi = rng.choice([None, None, lo, lo + 1, lo + 2])
    return ("rep", _expr(rng, names, depth - 1), lo, hi)


def random_rules(rng: random.Random) -> dict[str, tuple]:
    names = ["root"] + [f"r{i}" for i in range(1, rng.randint(1, 6))]
    rules = {}
    for name in names:
        body = _expr(rng, names, rng.randint(1, 4))
        if rng.random() < 0.4:
            body = ("alt", [body, _expr(rng, names, 2), *([("seq", [])] if rng.random() < 0.3 else [])])
        if rng.random() < 0.15:                                   # left recursion
            body = ("alt", [("seq", [("ref", name), _expr(rng, names, 1)]), body])
        rules[name] = body
    return rules


def _char(ch: str, rng: random.Random, in_class: bool) -> str:
    cp, r = ord(ch), rng.random()
    if r < 0.1 and cp <= 0xFF:
        return f"\\x{cp:02x}"
    if r < 0.18 and cp <= 0xFFFF:
        return f"\\u{cp:04X}"
    if r < 0.22:
        return f"\\U{cp:08x}"
    specials = {"\\": "\\\\", "\n": "\\n", **({"]": "\\]", "-": "\\-", "^": "\\^"} if in_class else {'"': '\\"'})}
    return specials.get(ch, ch)


def render(e: tuple, rng: random.Random, top: bool = False) -> str:
    kind = e[0]
    if kind == "lit":
        return '"' + "".join(_char(c, rng, False) for c in e[1]) + '"'
    if kind == "cls":
        body = "".join(_char(chr(lo), rng, True) + ("" if lo == hi else "-" + _char(chr(hi), rng, True))
                       for lo, hi in e[1])
        return "[" + ("^" if e[2] else "") + body + "]"
    if kind == "any":
        return "."
    if kind == "ref":
        return e[1]
    if kind == "seq":
        return " ".join(render(x, rng) for x in e[1]) if e[1] else '""'
    if kind == "alt":
        text = " | ".join(render(x, rng) for x in e[1])
        return text if top else "(" + text + ")"
    inner = render(e[1], rng)
    if e[1][0] in ("seq", "alt", "rep"):
        inner = "(" + render(e[1], rng, top=True) + ")"
    lo, hi = e[2], e[3]
    quant = {(0, None): "*", (1, None): "+", (0, 1): "?"}.get((lo, hi))
    return inner + (quant or ("{%d,}" % lo if hi is None else "{%d,%d}" % (lo, hi)))


def recognise(rules: dict[str, tuple], s: str) -> bool:
    """Does ``rules`` derive ``s`` from root? A least fixpoint of (rule, start) -> ends.

    A worklist: an entry is computed again only when an entry it read has grown (``deps``), and
    while one entry is computed the ends of each sub-expression at each start are computed once
    (``memo``): nested repetitions of ambiguous grammars (``(root{2,}){2,}``) otherwise recompute
    the same ends exponentially often."""
    from collections import deque
    n = len(s)
    table: dict[tuple[str, int], frozenset] = {(r, i): frozenset() for r in rules for i in range(n + 1)}
    deps: dict[tuple[str, int], set] = {key: set() for key in table}
    memo: dict[tuple[int, int], frozenset] = {}
    reading: list = [None]

    def ends(e: tuple, i: int) -> frozenset:
        key = (id(e), i)
        hit = memo.get(key)
        if hit is None:
            hit = memo[key] = frozenset(_ends(e, i))
        return hit

    def _ends(e: tuple, i: int) -> set[int]:
        kind = e[0]
        if kind == "lit":
            return {i + len(e[1])} if s.startswith(e[1], i) else set()
        if kind == "cls":
            return {i + 1} if i < n and any(lo <= ord(s[i]) <= hi for lo, hi in e[1]) != e[2] else set()
        if kind == "any":
            return {i + 1} if i < n else set()
        if kind == "ref":
            deps[(e[1], i)].add(reading[0])
            return set(table[(e[1], i)])
        if kind == "alt":
            return set().union(*(ends(x, i) for x in e[1]))
        if kind == "seq":
            cur = {i}
            for x in e[1]:
                cur = set().union(*(ends(x, j) for j in cur)) if cur else set()
            return cur
        x, lo, hi = e[1], e[2], e[3]
        cur, out, count = {i}, set(), 0
        while cur and (hi is None or count <= hi):
            if count >= lo:
                if hi is None and cur <= out:
                    break
                out |= cur
            cur = set().union(*(ends(x, j) for j in cur))
            count += 1
        return out

    work = deque(table)
    queued = set(table)
    while work:
        key = work.popleft()
        queued.discard(key)
        reading[0] = key
        memo.clear()
        new = table[key] | ends(rules[key[0]], key[1])
        if new != table[key]:
            table[key] = new
            for d in deps[key]:
                if d not in queued:
                    queued.add(d)
                    work.append(d)
    return n in table[("root", 0)]


def _vocab(rng: random.Random, texts: list[bytes]):
    from halter import Vocabulary
    pieces = [bytes([b]) for b in range(256)]
    for _ in range(rng.randint(50, 200)):
        if texts and rng.random() < 0.6:
            t = rng.choice(texts)
            i = rng.randrange(len(t) + 1)
            piece = t[i:i + rng.randint(2, 8)]            # may split a UTF-8 character
        else:
            piece = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(2, 5))).encode()
        if len(piece) > 1:
            pieces.append(piece)
    pieces += [b"</s>", b"<s>"]
    return Vocabulary.from_token_bytes(pieces, eog_ids=[len(pieces) - 2], special_ids=[len(pieces) - 1])


class _Timeout(Exception):
    pass


_PHASE = ["halter's parse and drawing"]     # what was running when the time limit struck


def _alarm(*_: object) -> None:
    raise _Timeout


def check_grammar(rules: dict[str, tuple], text: str, rng: random.Random, counts: dict[str, int]) -> list[str]:
    """Every check on one grammar; the findings as lines."""
    from halter import Grammar, allocate_bitmask
    from halter.grammar.random_text import random_text
    g = Grammar.from_gbnf(text)
    found = []
    drawn = [random_text(dict(g.rules), "root", rng, max_depth=4) for _ in range(4)]
    strings = drawn + ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 5))) for _ in range(12)]
    for s in strings:
        counts["strings"] += 1
        _PHASE[0] = "halter's matches"
        got = g.matches(s)
        _PHASE[0] = "the fuzz's own recogniser"
        if got != recognise(rules, s):
            found.append(f"matches({s!r}) = {got} under {text!r}")
    _PHASE[0] = "halter's compile and masks"
    vocab = _vocab(rng, [s.encode() for s in drawn])
    cg = g.compile(vocab, cache=False, progress=False)
    special, eog = vocab.size - 1, vocab.size - 2
    bitmask = allocate_bitmask(1, vocab.size)
    for _walk in range(3):
        tm, cm, masks, accepted = cg.matcher(), g.matcher(), [], 0
        for _step in range(rng.randint(3, 20)):
            mask = tm.allowed_mask()
            expected = np.array([cm.copy().accept_bytes(b) if b and t < eog else False
                                 for t, b in enumerate(vocab.token_bytes)])
            expected[eog] = cm.is_accepting()
            counts["states"] += 1
            counts["tokens"] += vocab.size
            if not (mask == expected).all() or mask[special]:
                bad = np.flatnonzero(mask != expected)[:5].tolist()
                found.append(f"mask differs at tokens {bad} after {len(masks)} steps under {text!r}")
                break
            tm.fill_bitmask(bitmask, 0)
            if not (np.unpackbits(bitmask[0].view(np.uint8), bitorder="little")[:vocab.size] == mask).all():
                found.append(f"fill_bitmask differs from allowed_mask under {text!r}")
            masks.append(mask)
            choices = np.flatnonzero(mask[:eog])
            if not len(choices):
                break
            t = int(rng.choice(choices.tolist()))
            assert tm.accept_token(t) and cm.accept_bytes(vocab.token_bytes[t])
            accepted += 1
        if accepted:                                    # masks[i]: the mask after i tokens
            k = rng.randint(1, accepted)
            tm.rollback(k)
            if not (tm.allowed_mask() == masks[accepted - k]).all():
                found.append(f"mask after rollback({k}) differs under {text!r}")
    return found


def run(n_grammars: int, seed: int, time_limit: int = 20) -> tuple[dict[str, int], list[str]]:
    """Counts, and one line per finding, for ``n_grammars`` random grammars."""
    from halter.errors import GrammarError
    rng = random.Random(seed)
    counts = {"grammars": 0, "refused": 0, "strings": 0, "states": 0, "tokens": 0, "findings": 0}
    found: list[str] = []
    signal.signal(signal.SIGALRM, _alarm)
    for _ in range(n_grammars):
        rules = random_rules(rng)
        text = "\n".join(f"{name} ::= {render(body, rng, top=True)}" for name, body in rules.items())
        counts["grammars"] += 1
        signal.alarm(time_limit)
        _PHASE[0] = "halter's parse and drawing"
        try:
            lines = check_grammar(rules, text, random.Random(rng.random()), counts)
        except GrammarError:
            counts["refused"] += 1
            lines = []
        except _Timeout:
            lines = [f"over {time_limit} s (in {_PHASE[0]}): {text!r}"]
        except Exception as e:  # noqa: BLE001 - a crash is a finding
            lines = [f"{type(e).__name__}: {str(e)[:100]} under {text!r}"]
        finally:
            signal.alarm(0)
        counts["findings"] += len(lines)
        found.extend(lines)
    return counts, found


def main(argv: Any = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grammars", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--time-limit", type=int, default=20)
    args = ap.parse_args(argv)
    os.environ["HALTER_CACHE_DIR"] = tempfile.mkdtemp(prefix="halter-mask-fuzz-")
    counts, found = run(args.grammars, args.seed, args.time_limit)
    print(json.dumps(counts))
    for line in found[:20]:
        print(line)


if __name__ == "__main__":
    main()
