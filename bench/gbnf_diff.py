"""halter's GBNF against llama.cpp's own parser and matcher, on the same grammars and strings.

    python bench/gbnf_diff.py --vocab ../shared/vocab/ggml-vocab-gpt-2.gguf \\
        --llama-python /work/venvs/llama/bin/python --random 3000 --mutations 3000

llama.cpp runs in a worker process (``bench/gbnf_llama_worker.py``, in the interpreter that has
llama-cpp-python: the ``diff`` extra, never needed by the tests or CI); halter runs here. For
each grammar (the shipped ones, every GBNF text in halter's tests, ``gbnf_corpus.EDGE_CASES``,
``--random`` random grammars and ``--mutations`` mutated ones) it compares the parse verdict,
then for each string, fed one code point at a time, the accepted prefix and at every accepted
prefix whether the grammar may end there, and, fed as the vocabulary tokenizes it, the tokens
accepted and completeness. Every disagreement is printed. Deliberate departures, each warned
about by halter (``GrammarWarning``) and listed in docs/grammar.md, are counted apart:

* ``left-recursion``: llama.cpp refuses the grammar, halter parses it (and warns);
* ``dead-end``: halter never lets text into a rule that can never finish (or a class that
  matches nothing), llama.cpp does: halter's accepted prefix is shorter, never its verdicts;
* ``root-never-ends``: the root can never finish: llama.cpp accepts the grammar (no string ever
  completes), halter refuses it;
* ``token-text``: a ``<text>`` token reference that is not one token of the vocabulary: llama.cpp
  refuses the grammar, halter refuses it when it is compiled for that vocabulary;
* ``empty-text``: llama.cpp reads an empty grammar text as "no grammar"; halter refuses it;
* ``too-complex``: a rule whose automaton passes halter's 50,000-state limit (a documented
  limit), which llama.cpp's stack machine has not;
* ``llama-fails``: llama.cpp hangs or crashes (reversed bounds ``{3,1}``, hidden left recursion).

``--freeze PATH`` writes the edge cases, the shipped grammars and a sample of the rest with
llama.cpp's answers, for ``tests/test_gbnf_llamacpp_cases.py``.
"""
from __future__ import annotations

import argparse
import json
import random
import select
import signal
import subprocess
import sys
import time
import warnings
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import gbnf_corpus  # noqa: E402

from halter import Grammar, GrammarError, GrammarWarning, HalterError  # noqa: E402


class Llama:
    """The worker process; restarted after a crash or a time-out."""

    def __init__(self, python: str, vocab: str, timeout: float) -> None:
        self.python, self.vocab, self.timeout = python, vocab, timeout
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen([self.python, str(HERE / "gbnf_llama_worker.py"), self.vocab],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        first = self.proc.stdout.readline()
        if not first or "ready" not in json.loads(first):
            raise SystemExit(f"llama.cpp worker did not start: {first!r}")

    def ask(self, grammar: str, strings: list[str]) -> dict:
        if self.proc is None or self.proc.poll() is not None:
            self.start()
        self.proc.stdin.write(json.dumps({"g": grammar, "s": strings}) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], self.timeout)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            status = "hang" if self.proc.poll() is None else "crash"
            self.close()
            return {"fails": status}
        return json.loads(line)

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


class _Timeout(Exception):
    pass


def _alarm(_sig, _frame):
    raise _Timeout()


def halter_parse(text: str, budget: float):
    """(grammar or None, error message or None, warning kinds)."""
    signal.signal(signal.SIGPROF, _alarm)
    signal.setitimer(signal.ITIMER_PROF, budget)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            g = Grammar.from_gbnf(text)
        kinds = {w.message.kind for w in caught if isinstance(w.message, GrammarWarning)}
        return g, None, kinds
    except _Timeout:
        return None, "TIMEOUT", set()
    except HalterError as err:
        return None, str(err).splitlines()[0], set()
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)


def compile_refuses(g: Grammar, vocab) -> bool:
    """Does compiling for the vocabulary refuse the grammar (a ``<text>`` that is not one token)?
    llama.cpp checks token texts while parsing, halter when it compiles for a vocabulary."""
    try:
        g.compile(vocab, cache=False, progress=False)
        return False
    except GrammarError:
        return True


def halter_strings(g: Grammar, strings: list[str], answers: list[dict]) -> list[dict]:
    out = []
    for s, ans in zip(strings, answers):
        m = g.matcher()
        flags, k = [m.is_accepting()], 0
        for ch in s:
            if not m.accept_text(ch):
                break
            k += 1
            flags.append(m.is_accepting())
        m = g.matcher()
        pieces = [bytes.fromhex(p) for p in ans["whole"][0]]
        done = 0
        for p in pieces:
            if not m.accept_bytes(p):
                break
            done += 1
        out.append({"chars": [k, flags], "whole": [ans["whole"][0], done,
                                                    m.is_accepting() if done == len(pieces) else None]})
    return out


def _ends_inside_a_character(data: bytes) -> bool:
    try:
        data.decode("utf-8")
        return False
    except UnicodeDecodeError as err:
        return err.reason == "unexpected end of data"


def partial_utf8_departure(mine: dict, theirs: dict) -> bool:
    """llama.cpp stopped on a token that ends inside a UTF-8 character, where halter went on.

    llama.cpp checks such a token against every code point the character could still become
    (``llama_grammar_match_partial_char``): under a negated class, one excluded code point in that
    range refuses the token (``[^\u2028]`` refuses the first byte of every U+2000-U+2FFF
    character); halter allows it when some completion is allowed. Departure listed in docs/grammar.md.
    """
    (kh, fh), (kl, fl) = mine["chars"], theirs["chars"]
    pieces, dh, dl = theirs["whole"][0], mine["whole"][1], theirs["whole"][1]
    chars_ok = (kh, fh) == (kl, fl) or (theirs.get("split") and kh > kl and fh[:kl + 1] == fl[:kl + 1])
    whole_ok = (dh, mine["whole"][2]) == (dl, theirs["whole"][2]) or (
        dh > dl and _ends_inside_a_character(b"".join(bytes.fromhex(p) for p in pieces[:dl + 1])))
    return bool(chars_ok and whole_ok and ((kh, fh) != (kl, fl) or dh != dl))


def compare_strings(mine: dict, theirs: dict, kinds: set[str]) -> str | None:
    """None when they agree, "dead-end" for the documented departure, else a description."""
    (kh, fh), (kl, fl) = mine["chars"], theirs["chars"]
    (_, dh, ch), (_, dl, cl) = mine["whole"], theirs["whole"]
    if (kh, fh) == (kl, fl) and (dh, ch) == (dl, cl):
        return None
    common = min(kh, kl)
    if partial_utf8_departure(mine, theirs):
        return "partial-utf8"
    if ("dead-end" in kinds and kh <= kl and fh[:common + 1] == fl[:common + 1] and not any(fl[kh + 1:])
            and dh <= dl and (cl is not True or dh == dl)):
        return "dead-end"
    return f"chars: halter {kh} {fh} vs llama.cpp {kl} {fl}; tokens: halter {dh} {ch} vs llama.cpp {dl} {cl}"


def verdict_departure(text: str, err: str | None, kinds: set[str], llama: dict,
                      token_text: bool | None = None) -> str | None:
    if "fails" in llama:
        return "llama-fails"
    if llama["ok"] and err is None:
        return None
    if not llama["ok"] and err is None and "left-recursion" in kinds:
        return "left-recursion"
    if not llama["ok"] and err is None and token_text is not None:
        return "token-text" if token_text else "DISAGREE"
    if llama["ok"] and err and "can never match" in err:
        return "root-never-ends"
    if llama["ok"] and err and "too complex" in err:
        return "too-complex"
    if llama["ok"] and text == "" and err and "empty grammar" in err:
        return "empty-text"
    if not llama["ok"] and err:
        return None
    return "DISAGREE"


def corpus(args, rng: random.Random) -> list[tuple[str, str]]:
    items = [("edge", t) for t in gbnf_corpus.EDGE_CASES]
    items += [(f"shipped:{n}", t) for n, t in gbnf_corpus.shipped_grammars(args.grammars)]
    items += [("tests", t) for t in gbnf_corpus.test_grammars()]
    base = [t for _, t in items]
    for _ in range(args.random):
        items.append(("random", gbnf_corpus.random_grammar(rng)))
    base += [t for s, t in items if s == "random"]
    for _ in range(args.mutations):
        items.append(("mutated", gbnf_corpus.mutate(rng.choice(base), rng)))
    return items


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    repo = HERE.parent
    ap.add_argument("--vocab", default=str(repo.parent / "shared/vocab/ggml-vocab-gpt-2.gguf"))
    ap.add_argument("--llama-python", default=sys.executable,
                    help="an interpreter with llama-cpp-python (default: this one)")
    ap.add_argument("--grammars", nargs="*", type=Path, default=[repo.parent / "shared/grammars"])
    ap.add_argument("--random", type=int, default=3000)
    ap.add_argument("--mutations", type=int, default=3000)
    ap.add_argument("--strings", type=int, default=10, help="strings per grammar")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=30.0,
                    help="seconds per grammar, each side: halter's CPU time (a loaded machine does not trip it), "
                         "llama.cpp's wall time")
    ap.add_argument("--freeze", type=Path, help="write frozen cases (JSON) for the test suite")
    ap.add_argument("--freeze-sample", type=int, default=300)
    ap.add_argument("--show-departures", action="store_true")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    items = corpus(args, rng)
    loaded = []

    def vocab():
        if not loaded:
            from halter import Vocabulary
            loaded.append(Vocabulary.from_gguf(args.vocab))
        return loaded[0]
    llama = Llama(args.llama_python, args.vocab, args.timeout)
    stats, departures, disagreements = Counter(), Counter(), 0
    frozen = []
    t0 = time.time()
    try:
        for i, (source, text) in enumerate(items):
            g, err, kinds = halter_parse(text, args.timeout)
            if err == "TIMEOUT":
                disagreements += 1
                print(f"[{source}] HALTER TIME-OUT parsing {text[:300]!r}")
                continue
            rules = g.rules if g is not None else None
            matchable = g is not None and not g._has_token_refs
            strings = gbnf_corpus.strings_for(text, rules if matchable else None, rng, args.strings)
            ans = llama.ask(text, strings if matchable else [])
            stats["grammars"] += 1
            token_text = None
            if g is not None and not ans.get("ok", True) and g._has_token_refs:
                token_text = compile_refuses(g, vocab())
            dep = verdict_departure(text, err, kinds, ans, token_text)
            if dep and args.show_departures:
                print(f"[{source}] departure {dep}: halter {err or 'accepts'} {sorted(kinds)}: {text[:200]!r}")
            stats["llama accepts" if ans.get("ok") else "llama refuses" if "fails" not in ans else "llama fails"] += 1
            record = {"grammar": text, "llama": ("fails" if "fails" in ans else "accepts" if ans["ok"] else "refuses"),
                      "departure": dep, "strings": []}
            if dep == "DISAGREE":
                disagreements += 1
                print(f"[{source}] VERDICT llama.cpp {'accepts' if ans['ok'] else 'refuses'}, "
                      f"halter {'accepts' if err is None else 'refuses: ' + err}: {text[:300]!r}")
                continue
            if dep:
                departures[dep] += 1
            if ans.get("ok") and g is not None and matchable:
                try:
                    signal.signal(signal.SIGPROF, _alarm)
                    signal.setitimer(signal.ITIMER_PROF, args.timeout)
                    mine = halter_strings(g, strings, ans["r"])
                except _Timeout:
                    disagreements += 1
                    print(f"[{source}] HALTER TIME-OUT matching {text[:300]!r}")
                    continue
                finally:
                    signal.setitimer(signal.ITIMER_PROF, 0)
                for s, h, l in zip(strings, mine, ans["r"]):
                    stats["strings"] += 1
                    diff = compare_strings(h, l, kinds)
                    if diff in ("dead-end", "partial-utf8"):
                        departures[f"{diff} (strings)"] += 1
                    elif diff:
                        disagreements += 1
                        print(f"[{source}] STRING {s!r} of {text[:300]!r}: {diff}")
                    if len(s) <= 40 and diff != "partial-utf8":
                        record["strings"].append([s, l["chars"][0], l["chars"][1]])
            if source in ("edge",) or source.startswith("shipped") or dep or len(frozen) < args.freeze_sample \
                    and rng.random() < 0.08:
                frozen.append(record)
            if (i + 1) % 500 == 0:
                print(f"... {i + 1}/{len(items)} grammars, {disagreements} disagreements, "
                      f"{time.time() - t0:.0f} s", file=sys.stderr)
    finally:
        llama.close()
    by_source = Counter(s.split(":")[0] for s, _ in items)
    print(f"\ngrammars: {stats['grammars']} ({', '.join(f'{k} {v}' for k, v in by_source.items())}); "
          f"llama.cpp accepts {stats['llama accepts']}, refuses {stats['llama refuses']}, "
          f"fails {stats['llama fails']}; strings compared: {stats['strings']} (each whole and by code point)")
    print(f"documented departures: {dict(departures) or 'none'}")
    print(f"disagreements: {disagreements}   ({time.time() - t0:.0f} s)")
    if args.freeze:
        args.freeze.write_text(json.dumps(frozen, indent=0) + "\n", encoding="utf-8")   # (\u escapes: lone surrogates too)
        print(f"froze {len(frozen)} grammars in {args.freeze}")
    sys.exit(1 if disagreements else 0)


if __name__ == "__main__":
    main()
