"""Differential fuzz of regex conversion against Node's ECMAScript ``RegExp`` (``u`` flag).

Random patterns (literals with escapes and multi-byte characters, classes with ranges, negation
and ``\\d \\w \\s`` and their negations, ``.``, every quantifier, lazy ones too, capturing and
non-capturing groups, alternation, ``^``/``$`` at the edges and inside) over an alphabet that includes
the characters where ECMAScript and Python disagree (``\\u0085``, ``\\u2028``, ``\\ufeff``, ...)
are checked two ways on strings drawn from halter's own grammar (its positives) and random
strings (mostly negatives):

* as a schema ``pattern`` (``{"type": "string", "pattern": p}``, unanchored: a match anywhere),
  the JSON text of each string, with and without ``ensure_ascii``, against ``new RegExp(p,
  "u").test(s)``;
* as a whole-output regex (``Grammar.from_regex(p)``) against ``/^(?:p)$/u``.

Node is the reference (one ``node`` process, patterns and strings as JSON lines). A pattern Node
refuses in ``u`` mode is skipped (halter reads the flagless syntax, which is looser); one halter
refuses as unsupported (``UnsupportedSchemaError``) is counted apart, and so is one Node takes
more than 5 s over (V8 backtracks: nested quantifiers can be exponential). A pattern halter finds
matches nothing (``[^\\S\\W]``: the schema "accepts no value", the regex ``NeverMatches``) must
match none of the strings in Node either. Any other exception and any verdict that differs is a
finding. Needs ``node`` on the PATH; prints a line and exits otherwise.

Run: ``python bench/regex_fuzz.py [--patterns N] [--seed S]``.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import select
import shutil
import subprocess
import tempfile
import warnings
from typing import Any

CHARS = ["a", "b", "c", "0", "1", "-", " ", "é", "漢", "😀", "\n", "_", "Z",
         "\r", "\t", "\u00a0", "\u0085", "\u2028", "\ufeff", "\u3000", "\x7f"]  # JS \s, line ends
LITERAL_ESCAPES = [r"\.", r"\-", r"\\", r"\/", r"\*", r"\(", r"\[", r"\{", r"\}", r"\|", r"\?", r"\^", r"\$",
                   r"\n", r"\t", r"\u00e9", r"\x41", r"\u{1F600}", r"\d", r"\w", r"\s", r"\D", r"\W", r"\S", "."]
CLASS_ITEMS = ["a", "b", "c", "0", "1", "é", "漢", "😀", "_", "a-c", "0-9", "b-é", "a-漢", r"\d", r"\w", r"\s", r"\-", r"\]",
               r"\\", ".", r"\S", r"\D", r"\W", "^", r"\u0000-\u0020", r"\n", r"\u2028", "é-😀", r"\t-\r"]

NODE_SCRIPT = r"""
const rl = require('readline').createInterface({input: process.stdin});
rl.on('line', (line) => {
  const job = JSON.parse(line);
  let out;
  try {
    const search = new RegExp(job.p, 'u');
    const whole = new RegExp('^(?:' + job.p + ')$', 'u');
    out = {search: job.s.map((x) => search.test(x)), whole: job.s.map((x) => whole.test(x))};
  } catch (e) {
    out = {error: String(e)};
  }
  process.stdout.write(JSON.stringify(out) + '\n');
});
"""


class _Node:
    """One ``node`` process answering patterns and strings as JSON lines. V8 backtracks, so some
    random patterns take exponential time on some strings: past ``timeout`` seconds the process is
    killed and started again, and the pattern counted apart."""

    def __init__(self, timeout: float = 5.0) -> None:
        self.timeout = timeout
        self._start()

    def _start(self) -> None:
        self.proc = subprocess.Popen(["node", "-e", NODE_SCRIPT], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, encoding="utf-8")

    def ask(self, job: dict) -> dict | None:
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], self.timeout)
        if not ready:
            self.proc.kill()
            self.proc.wait()
            self._start()
            return None
        return json.loads(self.proc.stdout.readline())

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait()


def random_pattern(rng: random.Random, depth: int = 0) -> str:
    """A random pattern in the syntax that ECMAScript's ``u`` mode and halter both read.

    Anchors at the edges, and inside too."""
    if depth == 0:
        body = _pattern(rng, 0)
        return ("^" if rng.random() < 0.3 else "") + body + ("$" if rng.random() < 0.3 else "")
    return _pattern(rng, depth)


def _pattern(rng: random.Random, depth: int) -> str:
    r = rng.random()
    if depth >= 3 or r < 0.35:
        return _atom(rng)
    if r < 0.55:
        return "".join(_pattern(rng, depth + 1) for _ in range(rng.randint(2, 3)))
    if r < 0.7:
        return "|".join(_pattern(rng, depth + 1) if rng.random() < 0.9 else "" for _ in range(rng.randint(2, 3)))
    if r < 0.9:
        inner = _pattern(rng, depth + 1)
        group = rng.choice(["(?:%s)", "(%s)"]) % inner
        return group + _quantifier(rng)
    if r < 0.96:                      # an anchor inside
        return rng.choice(["^", "$"]) + _pattern(rng, depth + 1)
    return "(?:" + _pattern(rng, depth + 1) + "|" + _pattern(rng, depth + 1) + ")"


def _atom(rng: random.Random) -> str:
    k = rng.random()
    if k < 0.45:
        atom = rng.choice(CHARS).replace("\n", r"\n")
    elif k < 0.7:
        atom = rng.choice(LITERAL_ESCAPES)
    else:
        items = "".join(rng.choice(CLASS_ITEMS) for _ in range(rng.randint(1, 3)))
        atom = "[" + ("^" if rng.random() < 0.3 else "") + items + "]"
    return atom + (_quantifier(rng) if rng.random() < 0.4 else "")


def _quantifier(rng: random.Random) -> str:
    q = rng.choice(["", "", "*", "+", "?", "{2}", "{0,2}", "{1,}", "{2,3}", "{0}", "{3,}"])
    return q + ("?" if q and rng.random() < 0.2 else "")


def _strings(rng: random.Random, grammar: Any) -> list[str]:
    """Strings the grammar draws (decoded from JSON) and random ones."""
    from halter.grammar.random_text import random_text
    out = []
    if grammar is not None:
        for _ in range(6):
            try:
                out.append(json.loads(random_text(dict(grammar.rules), grammar.root, rng, max_depth=6)))
            except (ValueError, RecursionError):
                pass
    out += ["".join(rng.choice(CHARS) for _ in range(rng.randint(0, 6))) for _ in range(10)]
    return [s for s in out if isinstance(s, str)]


EMPTY = "(the language is empty)"


def _build(make):
    """The grammar; ``EMPTY`` when halter finds that nothing matches; the error's text for any
    other failure (a finding once Node reads the pattern). Unsupported constructs propagate."""
    from halter import GrammarError, SchemaError, UnsupportedSchemaError
    from halter.errors import NeverMatches
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return make()
    except UnsupportedSchemaError:
        raise
    except NeverMatches:
        return EMPTY
    except (SchemaError, GrammarError) as e:
        if "accepts no value" in str(e):
            return EMPTY
        return f"{type(e).__name__}: {e}"
    except Exception as e:  # noqa: BLE001 - a crash is a finding
        return f"{type(e).__name__}: {e}"


def run(n_patterns: int, seed: int) -> tuple[dict[str, int], list[str]]:
    """Counts, and one line per finding, for ``n_patterns`` random patterns."""
    from halter import Grammar
    from halter import UnsupportedSchemaError
    rng = random.Random(seed)
    counts = {"patterns": 0, "node refused": 0, "node timed out": 0, "unsupported": 0, "empty": 0, "strings": 0,
              "checks": 0, "findings": 0}
    found: list[str] = []
    node = _Node()
    try:
        for _ in range(n_patterns):
            p = random_pattern(rng)
            counts["patterns"] += 1
            try:
                schema_g = _build(lambda: Grammar.from_json_schema({"type": "string", "pattern": p}))
                whole_g = _build(lambda: Grammar.from_regex(p))
            except UnsupportedSchemaError:
                counts["unsupported"] += 1
                continue
            strings = _strings(rng, schema_g if not isinstance(schema_g, str) else None)
            ref = node.ask({"p": p, "s": strings})
            if ref is None:
                counts["node timed out"] += 1
                continue
            if "error" in ref:
                counts["node refused"] += 1
                continue
            for g, verdicts, what in ((schema_g, ref["search"], "pattern"), (whole_g, ref["whole"], "whole regex")):
                if g is EMPTY:                 # halter: nothing matches; Node must match none of them
                    counts["empty"] += what == "pattern"
                    found += [f"{what} {p!r}: halter says nothing matches, Node matches {s!r}"
                              for s, v in zip(strings, verdicts) if v][:1]
                elif isinstance(g, str):
                    found.append(f"halter refused {what} {p!r} that Node reads: {g[:120]}")
            for s, search, whole in zip(strings, ref["search"], ref["whole"]):
                counts["strings"] += 1
                if not isinstance(schema_g, str):
                    for text in {json.dumps(s), json.dumps(s, ensure_ascii=False)}:
                        counts["checks"] += 1
                        if schema_g.matches(text) != search:
                            found.append(f"pattern {p!r} on {text}: halter {not search}, Node {search}")
                if not isinstance(whole_g, str):
                    counts["checks"] += 1
                    if whole_g.matches(s) != whole:
                        found.append(f"whole regex {p!r} on {s!r}: halter {not whole}, Node {whole}")
    finally:
        node.close()
    counts["findings"] = len(found)
    return counts, found


def main(argv: Any = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--patterns", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if shutil.which("node") is None:
        print("node is not on the PATH: nothing to compare against")
        return
    os.environ["HALTER_CACHE_DIR"] = tempfile.mkdtemp(prefix="halter-regex-fuzz-")
    counts, found = run(args.patterns, args.seed)
    print(json.dumps(counts))
    for line in found[:30]:
        print(line)


if __name__ == "__main__":
    main()
