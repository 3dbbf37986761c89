"""Fuzz halter's inputs: GBNF text, JSON Schemas, token walks, GGUF files, the command line.

    python bench/fuzz.py --all --cases 1000             # every campaign, 1000 cases each
    python bench/fuzz.py --campaign gguf --cases 200 --seed 3 --out fuzz-failures
    python bench/fuzz.py --all --cases 100000 --seconds 300   # stop each campaign after 300 s
    python bench/fuzz.py --all --cases 100000 --jobs 2 --state fuzz.json   # two at once, totals kept
    python bench/fuzz.py --all --cases 100000 --jobs 2 --state fuzz.json --resume   # go on after a stop

Each campaign generates cases from a seed (the same seed, the same cases) and runs them in a
worker subprocess under ``resource`` limits: address space (``--memory-mb``) and CPU time per
case (``--cpu-s``, through ``RLIMIT_CPU``; torch runs one thread, ``OMP_NUM_THREADS=1``, so that CPU
time is the case's work and not threads spinning at barriers beside other busy workers), plus a
wall-clock timeout (``--timeout-s``; past it a worker that has not used its CPU time yet, starved
by a loaded machine, is given up to ten times as long). One worker runs case after case; a worker that dies or hangs is replaced and the case
counted. Verdicts:

- ``ok``: the input was accepted, or refused with a ``HalterError`` (the promise);
- ``crash``: any other exception escaped (the exception type and message are recorded);
- ``hang``: the case ran past its CPU or wall-clock limit;
- ``memory``: ``MemoryError`` or the worker died under the memory limit;
- ``wrong``: a check on the result failed (token walks: an empty mask before the end, a prefix
  the character matcher refuses, a final text that does not validate; GBNF: printed text that
  does not parse back).

A token walk whose final text the schema refuses only because an object repeats a key is counted
as a documented departure (halter's object grammars do not prevent duplicate extra keys), not as
wrong; a walk whose text jsonschema cannot judge (it recursed past Python's limit on the schema) is
counted as unchecked. Both are written to ``--out`` too.

Failing cases are written to ``--out`` (one JSON file each; GGUF cases also as ``.gguf``) for
triage, and the totals are printed (``--json`` for machine-readable totals).
"""
from __future__ import annotations

import argparse
import base64
import json
import os
import random
import resource
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


from fuzz_cases import CAMPAIGNS, GENERATORS  # noqa: E402  (bench/ is on sys.path)


# -- case runners (worker side) ----------------------------------------------------------------------

class Wrong(Exception):
    """A check on an accepted input's result failed."""


class Departure(Exception):
    """A result that differs from the specification in a way docs/json_schema.md documents."""


class Unchecked(Exception):
    """The check itself could not run on this case (jsonschema recursed past Python's limit)."""


def run_gbnf(case: dict, ctx: dict) -> None:
    from halter.errors import HalterError
    from halter.grammar import Grammar
    g = Grammar.from_gbnf(case["text"])
    try:
        again = Grammar.from_gbnf(str(g))
    except HalterError as err:
        raise Wrong(f"the printed grammar does not parse back: {err}") from None
    for probe in ("", "a", "ab", "yes", "0.5", "z"):
        if g.matches(probe) != again.matches(probe):
            raise Wrong(f"the printed grammar matches {probe!r} differently")


def run_schema(case: dict, ctx: dict) -> None:
    import warnings

    from halter.grammar import Grammar
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g = Grammar.from_json_schema(case["schema"])
    for probe in ("1", '"a"', "{}", "[]", "null", '{"a":1}'):
        g.matches(probe)


def run_walk(case: dict, ctx: dict) -> None:
    import warnings

    import jsonschema
    import numpy as np

    from halter.errors import HalterError
    from halter.grammar import Grammar
    from halter.grammar.bitmask import allocate_bitmask
    from halter.schemas.format_check import format_checker
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            g = Grammar.from_json_schema(case["schema"], whitespace="compact")
    except HalterError:
        return
    vocab = ctx.setdefault("vocab", _walk_vocab())
    cg = g.compile(vocab, cache=False, progress=False)
    m = cg.matcher()
    rng = random.Random(case["seed"])
    text = b""
    eos = vocab.eos_id
    mask = allocate_bitmask(1, vocab.size)
    cm = g.matcher()                                   # the character matcher, fed the same bytes
    for _ in range(case["steps"]):
        m.fill_bitmask(mask)
        bits = np.unpackbits(mask.view(np.uint8), bitorder="little")[:vocab.size]
        allowed = np.flatnonzero(bits)
        if len(allowed) == 0:
            raise Wrong(f"empty mask after {text!r}")
        tok = int(rng.choice(list(allowed)))
        if tok == eos:
            break
        if not m.accept_token(tok):
            raise Wrong(f"token {tok} was in the mask but refused after {text!r}")
        text += vocab.token_bytes[tok]
        if not cm.accept_bytes(vocab.token_bytes[tok]):
            raise Wrong(f"the character matcher refuses the prefix {text!r}")
    else:
        return                                         # ran out of steps: nothing to validate
    if not g.matches(text):
        raise Wrong(f"ended with {text!r}, which the grammar does not match")
    schema = case["schema"]
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator) \
        if isinstance(schema, dict) else jsonschema.Draft202012Validator
    try:
        valid = caught or _valid(cls(schema, format_checker=format_checker(cls)), text)
    except RecursionError:
        raise Unchecked(f"jsonschema recursed past Python's limit on this schema; {text!r} was not checked") from None
    if not valid:
        if _duplicate_keys(text):
            raise Departure(f"ended with {text!r}: a duplicate key, which halter's object grammars do not "
                            "prevent for extra keys (docs/json_schema.md, additional properties)")
        raise Wrong(f"ended with {text!r}, which the schema refuses (no warning was given)")


def _valid(validator: Any, text: bytes) -> bool:
    """Whether the validator accepts the JSON ``text`` under exact arithmetic.

    Floats are not exact enough to judge a walk's numbers: ``4E-400`` reads as ``0.0`` (an integer)
    and ``1e400`` as ``inf`` (jsonschema's ``multipleOf`` then raises). So numbers with a fraction
    or an exponent are read as ``Decimal`` in a context wide enough to hold them, and integral
    decimals count as integers (draft-06 on; draft-04's integers have no fraction or exponent); the
    schema's numbers are read as decimals too (``multipleOf: 0.3`` means 3/10, as in halter). An
    exponent beyond what ``decimal`` can hold is brought to one that keeps every property a schema
    can test: far above any float bound with the same digits (divisibility by any float's
    denominator kept), or a non-zero number far below any float bound. Only if that check cannot
    run does the float reading decide."""
    import decimal

    import jsonschema
    with decimal.localcontext() as ctx:
        ctx.prec, ctx.Emax, ctx.Emin = 10_000, decimal.MAX_EMAX, decimal.MIN_EMIN
        ctx.traps[decimal.Inexact] = False
        try:
            value = json.loads(text, parse_float=_exact_number)
            cls = type(validator)
            if cls is not jsonschema.Draft4Validator and cls is not jsonschema.Draft3Validator:
                checker = cls.TYPE_CHECKER.redefine("integer", lambda c, x: jsonschema.Draft202012Validator.TYPE_CHECKER
                                                    .is_type(x, "integer") or (isinstance(x, decimal.Decimal)
                                                                               and x == x.to_integral_value()))
                cls = jsonschema.validators.extend(cls, type_checker=checker)
            schema = json.loads(json.dumps(validator.schema), parse_float=decimal.Decimal)   # 0.3 is 3/10
            return bool(cls(schema, format_checker=validator.format_checker).is_valid(value))
        except (ArithmeticError, TypeError, ValueError):
            pass
    try:
        return bool(validator.is_valid(json.loads(text)))
    except (ArithmeticError, TypeError, ValueError):
        return True                                    # neither reading can judge it: not counted wrong


def _duplicate_keys(text: bytes) -> bool:
    """Whether some object in the JSON ``text`` repeats a key."""
    found = []

    def pairs(items: list) -> dict:
        keys = [k for k, _ in items]
        if len(set(keys)) != len(keys):
            found.append(True)
        return dict(items)
    json.loads(text, object_pairs_hook=pairs)
    return bool(found)


def _exact_number(s: str) -> Any:
    """A JSON number with a fraction or exponent as a ``Decimal`` (see ``_valid``)."""
    from decimal import Decimal
    mantissa, _, exp = s.lower().partition("e")
    whole, _, frac = mantissa.lstrip("-").partition(".")
    digits = int(whole + frac)
    e = int(exp or 0) - len(frac)
    if digits == 0:
        return Decimal(0)
    e = min(e, 2000) if e > 0 else max(e, -2000 - len(str(digits)))
    return Decimal(f"{'-' if mantissa.startswith('-') else ''}{digits}E{e}")


def _walk_vocab():
    from halter.vocab.vocabulary import Vocabulary
    pieces = [bytes([b]) for b in range(32, 127)] + [b"\n", "é".encode(), b'{"', b'":', b'",', b"true", b"false",
                                                     b"null", b"12", b"-0", b"e5", b".5", b'"a"', b"[]", b"{}", b""]
    return Vocabulary.from_token_bytes(pieces, eog_ids=[len(pieces) - 1], eos_id=len(pieces) - 1)


def run_gguf(case: dict, ctx: dict) -> None:
    sys.path.insert(0, str(HERE))
    import gguf_corrupt

    from halter import Model
    from halter.vocab.vocabulary import Vocabulary
    base = ctx.get("tiny")
    if base is None:
        from halter.engine import build_tiny_gguf
        base = ctx["tiny"] = Path(build_tiny_gguf(Path(ctx["tmp"]) / "tiny.gguf", seed=1)).read_bytes()
    data = gguf_corrupt.corrupt(base, case["named"]) if "named" in case else \
        gguf_corrupt.random_corruption(base, random.Random(case["seed"]))
    path = Path(ctx["tmp"]) / "case.gguf"
    path.write_bytes(data)
    ctx["last_file"] = path
    from halter.errors import HalterError
    try:
        Vocabulary.from_gguf(path)
    except HalterError:
        pass
    model = Model.load(path, device="cpu", n_ctx=16, progress=False)
    model.generate("hi", max_tokens=2, seed=0)


def run_cli(case: dict, ctx: dict) -> None:
    import contextlib
    import io

    from halter.cli import main
    files = ctx.get("cli_files")
    if files is None:
        files = ctx["cli_files"] = _cli_files(Path(ctx["tmp"]))
    argv = []
    for a in case["argv"]:
        for key, value in files.items():
            a = a.replace("{" + key + "}", value)
        argv.append(a)
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        code = main(argv)
    if code not in (0, 1, 2, 3):
        raise Wrong(f"exit code {code!r}")
    if "Traceback" in err.getvalue():
        raise Wrong(f"a traceback on stderr: {err.getvalue()[-300:]}")
    # (``validate`` answers "invalid: ..." on standard output when the text does not match: exit 1)
    said = err.getvalue().strip() or (argv[0] == "validate" and out.getvalue().startswith("invalid"))
    if code in (1, 2) and not said:
        raise Wrong("failed without a message")


def _cli_files(d: Path) -> dict[str, str]:
    from halter.engine import build_tiny_gguf
    files = {"model": build_tiny_gguf(d / "cli.gguf", seed=2), "missing": str(d / "missing.txt")}
    for name, data in {"binary": b"\xff\xfe\x00\x01", "deep": b"[" * 20000 + b"]" * 20000,
                       "grammar": b'root ::= "a" [0-9]\n', "schema": b'{"type": "integer"}', "empty": b"",
                       "bad_model": b"GGUF\x03\x00\x00\x00" + b"\xff" * 16}.items():
        (d / name).write_bytes(data)
        files[name] = str(d / name)
    return files


RUNNERS: dict[str, Callable[[dict, dict], None]] = {
    "gbnf": run_gbnf, "schema": run_schema, "walk": run_walk, "gguf": run_gguf, "cli": run_cli}


class _CpuLimit(BaseException):
    pass


def worker(campaign: str, cpu_s: float) -> None:
    """Read cases (JSON lines) from stdin, write verdicts (JSON lines) to stdout."""
    from halter.errors import HalterError

    def on_xcpu(*_: Any) -> None:
        raise _CpuLimit()
    signal.signal(signal.SIGXCPU, on_xcpu)
    ctx: dict = {"tmp": tempfile.mkdtemp(prefix="halter-fuzz-")}
    real_stdout = sys.stdout
    sys.stdout = sys.stderr                         # nothing a case prints can garble the protocol
    for line in sys.stdin:
        case = json.loads(line)
        used = sum(resource.getrusage(resource.RUSAGE_SELF)[:2])
        hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
        soft = int(used + cpu_s) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (soft if hard == resource.RLIM_INFINITY else min(soft, hard), hard))
        ctx.pop("last_file", None)
        verdict: dict[str, Any] = {"verdict": "ok"}
        try:
            RUNNERS[campaign](case, ctx)
        except _CpuLimit:
            verdict = {"verdict": "hang", "detail": f"more than {cpu_s} s of CPU"}
        except HalterError as err:
            verdict = {"verdict": "ok", "refused": type(err).__name__}
        except Wrong as err:
            verdict = {"verdict": "wrong", "detail": str(err)[:500]}
        except Departure as err:
            verdict = {"verdict": "ok", "departure": str(err)[:500]}
        except Unchecked as err:
            verdict = {"verdict": "ok", "unchecked": str(err)[:500]}
        except MemoryError:
            verdict = {"verdict": "memory", "detail": "MemoryError"}
        except RecursionError as err:
            verdict = {"verdict": "crash", "detail": f"RecursionError: {str(err)[:200]}"}
        except Exception as err:  # noqa: BLE001 - what the fuzzer looks for
            verdict = {"verdict": "crash", "detail": f"{type(err).__name__}: {str(err)[:300]}"}
        # no CPU-limit signal between cases (one landing outside the try would end the worker)
        resource.setrlimit(resource.RLIMIT_CPU, (hard, hard))
        left = [t.name for t in threading.enumerate() if t is not threading.main_thread() and t.is_alive()]
        if left:                                    # work the case started runs on, charged to later cases
            verdict = {"verdict": "hang", "detail": f"{verdict.get('detail', 'ok')}; threads still running "
                                                       f"after the case: {left}"}
        if verdict["verdict"] != "ok" and ctx.get("last_file"):
            verdict["file"] = base64.b64encode(Path(ctx["last_file"]).read_bytes()).decode()
        real_stdout.write(json.dumps(verdict) + "\n")
        real_stdout.flush()


# -- the driver (parent side) -------------------------------------------------------------------------

class Worker:
    def __init__(self, campaign: str, memory_mb: int, cpu_s: float, cache_dir: str | None = None) -> None:
        def limits() -> None:
            resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")])}
        if cache_dir:                               # the cases' compiled grammars stay out of the user's cache
            env["HALTER_CACHE_DIR"] = cache_dir
        # one torch thread: threads of a parallel op spin at its barrier while a teammate is
        # descheduled, so beside other busy workers a tiny model's 64 tokens could use 20 s of CPU
        # (a "hang" that measures the machine's contention, not the case's work)
        env.setdefault("OMP_NUM_THREADS", "1")
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--worker", campaign,
                                      "--cpu-s", str(cpu_s)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True, preexec_fn=limits, env=env)
        self.cpu_s = cpu_s

    def run(self, case: dict, timeout_s: float) -> dict:
        try:
            self.proc.stdin.write(json.dumps(case) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            return self._died()
        cpu0, start = self.cpu_seconds(), time.monotonic()
        while True:
            ready, _, _ = select.select([self.proc.stdout], [], [], timeout_s)
            if ready:
                break
            # past the wall-clock limit: a hang if the case used its CPU time, or the machine gave it
            # ten times the limit; a worker starved by a loaded machine gets the benefit of the doubt
            waited, used = time.monotonic() - start, self.cpu_seconds() - cpu0
            if used >= self.cpu_s or waited >= 10 * timeout_s:
                self.close()
                return {"verdict": "hang", "detail": f"no answer in {waited:.0f} s ({used:.1f} s of CPU)"}
        line = self.proc.stdout.readline()
        if not line:
            return self._died()
        return json.loads(line)

    def cpu_seconds(self) -> float:
        """CPU time the worker has used (Linux ``/proc``; 0 where unreadable)."""
        try:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            return 0.0

    def _died(self) -> dict:
        code = self.proc.wait()
        return {"verdict": "memory" if code in (-signal.SIGKILL, -signal.SIGSEGV, -signal.SIGABRT) else "crash",
                "detail": f"the worker died (exit {code})"}

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None


def run_campaign(campaign: str, cases: int, seed: int = 0, out: Path | None = None, memory_mb: int = 6144,
                 cpu_s: float = 20.0, timeout_s: float = 60.0, progress: bool = False,
                 seconds: float | None = None, resume: dict | None = None,
                 checkpoint: Callable[[dict], None] | None = None) -> dict:
    """Run ``cases`` cases of ``campaign`` (fewer if ``seconds`` of wall-clock time run out first:
    ``"cases"`` is then the number run); returns ``{"campaign", "cases", "seconds", verdict: count,
    "failures": [case + verdict, ...]}``.

    ``resume`` (totals an interrupted run returned or checkpointed) continues after its last case:
    the skipped cases are generated again, not run, so the same seed gives the same cases.
    ``checkpoint`` is called with the totals so far every 500 cases."""
    rng = random.Random(f"{campaign}-{seed}")
    totals: dict[str, Any] = {"campaign": campaign, "cases": cases, "done": 0, "ok": 0, "refused": 0, "crash": 0,
                              "hang": 0, "memory": 0, "wrong": 0, "departures": 0, "unchecked": 0, "failures": [],
                              "seconds": 0.0}
    if resume:
        totals.update({k: v for k, v in resume.items() if k != "cases"})
    first = totals["done"]
    for _ in range(first):
        GENERATORS[campaign](rng)
    start, before = time.perf_counter(), float(totals["seconds"])
    cache = tempfile.TemporaryDirectory(prefix="halter-fuzz-cache-")
    w = Worker(campaign, memory_mb, cpu_s, cache.name)
    try:
        for i in range(first, cases):
            if seconds is not None and time.perf_counter() - start > seconds:
                break
            case = GENERATORS[campaign](rng)
            if not w.alive:
                w = Worker(campaign, memory_mb, cpu_s, cache.name)
            verdict = w.run(case, timeout_s + (30 if i == first else 0))    # (the first case imports)
            kind = verdict["verdict"]
            totals[kind] += 1
            totals["done"] = i + 1
            if kind == "ok" and verdict.get("refused"):
                totals["refused"] += 1
            if verdict.get("departure"):              # documented: kept for triage, not a failure
                totals["departures"] = totals.get("departures", 0) + 1
            if verdict.get("unchecked"):              # the check could not run: kept for triage
                totals["unchecked"] = totals.get("unchecked", 0) + 1
            if kind != "ok" or verdict.get("departure") or verdict.get("unchecked"):
                failure = {"index": i, "case": case, **{k: v for k, v in verdict.items() if k != "file"}}
                totals["failures"].append(failure)
                if out is not None:
                    folder = out / campaign
                    folder.mkdir(parents=True, exist_ok=True)
                    (folder / f"{seed}-{i}.json").write_text(json.dumps(failure, indent=1, default=str))
                    if "file" in verdict:
                        (folder / f"{seed}-{i}.gguf").write_bytes(base64.b64decode(verdict["file"]))
            if (i + 1) % 500 == 0:
                totals["seconds"] = round(before + time.perf_counter() - start, 1)
                if checkpoint is not None:
                    checkpoint(dict(totals))
                if progress and (i + 1) % 5000 == 0:
                    print(f"  {campaign}: {i + 1}/{cases}", file=sys.stderr, flush=True)
    finally:
        w.close()
        cache.cleanup()
    totals["cases"] = totals["done"]
    totals["seconds"] = round(before + time.perf_counter() - start, 1)
    return totals


def plot(results: list[dict], path: Path) -> None:
    """A stacked bar per campaign: accepted, refused with a HalterError, and each kind of failure."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = [r["campaign"] for r in results]
    parts = [("accepted", lambda r: r["ok"] - r["refused"], "#4c9a2a"),
             ("refused (HalterError)", lambda r: r["refused"], "#8fbf6f"),
             ("wrong", lambda r: r["wrong"], "#d95f02"), ("crash", lambda r: r["crash"], "#b2182b"),
             ("hang", lambda r: r["hang"], "#7570b3"), ("memory", lambda r: r["memory"], "#444444")]
    fig, ax = plt.subplots(figsize=(7, 3.5))
    bottom = [0] * len(results)
    for label, count, color in parts:
        values = [count(r) for r in results]
        if any(values):
            ax.bar(names, values, bottom=bottom, label=label, color=color)
            bottom = [b + v for b, v in zip(bottom, values)]
    ax.set_ylabel("cases")
    ax.set_title("bench/fuzz.py: verdicts per campaign")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--campaign", choices=CAMPAIGNS, action="append", help="a campaign (repeatable)")
    ap.add_argument("--all", action="store_true", help="every campaign")
    ap.add_argument("--cases", type=int, default=200, help="cases per campaign (default 200)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("fuzz-failures"), help="folder for failing cases")
    ap.add_argument("--memory-mb", type=int, default=6144, help="address-space limit of a worker")
    ap.add_argument("--cpu-s", type=float, default=20.0, help="CPU seconds per case")
    ap.add_argument("--timeout-s", type=float, default=60.0, help="wall-clock seconds per case")
    ap.add_argument("--seconds", type=float, help="stop each campaign after this many seconds (the cases run "
                    "are reported)")
    ap.add_argument("--json", action="store_true", help="print the totals as JSON")
    ap.add_argument("--plot", type=Path, help="write a PNG of the verdicts per campaign (needs matplotlib)")
    ap.add_argument("--jobs", type=int, default=1, help="campaigns run at once, each in its own worker (default 1)")
    ap.add_argument("--state", type=Path, help="keep the totals so far in this JSON file (every 500 cases)")
    ap.add_argument("--resume", action="store_true", help="continue the run whose totals --state holds")
    ap.add_argument("--worker", choices=CAMPAIGNS, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker, args.cpu_s)
        return
    campaigns = list(CAMPAIGNS) if args.all else (args.campaign or [])
    if not campaigns:
        ap.error("name a --campaign or pass --all")
    state: dict[str, dict] = {}
    if args.state and args.resume and args.state.exists():
        state = json.loads(args.state.read_text())
        if state.get("seed", args.seed) != args.seed:
            ap.error(f"--resume: {args.state} was written with --seed {state['seed']}")
    state["seed"] = args.seed
    lock = threading.Lock()

    def save(totals: dict) -> None:
        if args.state is None:
            return
        with lock:
            state[totals["campaign"]] = totals
            tmp = args.state.with_suffix(".tmp")
            tmp.write_text(json.dumps(state, default=str))
            tmp.replace(args.state)

    def one(c: str) -> dict:
        r = run_campaign(c, args.cases, args.seed, args.out, args.memory_mb, args.cpu_s, args.timeout_s,
                         progress=not args.json, seconds=args.seconds, resume=state.get(c), checkpoint=save)
        save({**r, "cases": r["done"]})
        if not args.json:
            with lock:
                print(f"{c:7s} {r['cases']:7d} cases ({r['cases'] / max(r['seconds'], 0.1):.1f}/s)  ok {r['ok']:7d} "
                      f"(refused {r['refused']})  crash {r['crash']}  hang {r['hang']}  memory {r['memory']}  "
                      f"wrong {r['wrong']}  documented departures {r.get('departures', 0)}  unchecked {r.get('unchecked', 0)}  "
                      f"{r['seconds']:.0f} s", flush=True)
                for f in r["failures"][:5]:
                    print(f"    #{f['index']} {f['verdict']}: {f.get('detail', '')[:150]}", flush=True)
        return r

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:   # each campaign has its own worker
        results = list(pool.map(one, campaigns))
    if args.json:
        print(json.dumps([{k: v for k, v in r.items() if k != "failures"} for r in results]))
    if args.plot:
        plot(results, args.plot)
    if any(r[k] for r in results for k in ("crash", "hang", "memory", "wrong")):
        sys.exit(1)


if __name__ == "__main__":
    main()
