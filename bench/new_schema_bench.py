"""What a schema never seen before costs: compile + first pass, per engine, each in a fresh process.

Workloads: real schemas from JSONSchemaBench (``../shared/schema/jsonschemabench_dev.jsonl``, every
third row, so all ten subsets come in; the document is the row's first valid instance, dumped with
``json.dumps`` and tokenized by the vocabulary's own tokenizer, ``halter.engine.tokenizer``; where
that tokenization does not spell the exact text, as SentencePiece's leading space, a greedy
longest match of the exact bytes), a fixed
12-property schema (length-bounded strings, a nested object, an array of objects; a ~1 KB document)
and ``../shared/grammars/c.gbnf`` with a small C program. Vocabularies: llama-spm (32k), gpt-2 (50k),
deepseek-llm (102k) from ``../shared/vocab``.

Every (workload, vocabulary, engine) runs in its own child process with an empty ``HALTER_CACHE_DIR``
(no grammar, trie or table cache): the engine's per-process and per-vocabulary setup (halter: its
imports, one tiny schema converted, which also builds the automata of the JSON helper rules every
schema shares and that a process keeps, as a server has after its first schema; the token trie
built and the compiled trie walk loaded;
llguidance/XGrammar: their imports and tokenizer objects) is done first and timed apart, ending with one
full garbage collection (what the set-up left, which a long-running server has collected long before a
new schema comes, would otherwise be collected inside the first masks); then, timed in CPU
seconds of the process: the compile (from the schema or GBNF text to a matcher ready for the first
token), the first pass over the document (the mask fill before each token, timed alone, then the
token's accept, timed apart), and a second pass on a reset matcher (the steady state). Every
document token the mask leaves out is counted as wrongly rejected (the document is valid); an
engine that refuses the schema or whose accept fails is counted as such. Peak RSS is the child's
``ru_maxrss``. Engines run one after another per workload, in rotating order.

Peers (the ``bench`` extra: ``pip install xgrammar llguidance``): XGrammar with ``any_whitespace``,
``strict_mode=False`` (halter's default schema semantics), no compile cache, 2 threads; llguidance
with flexible whitespace, lenient. An engine that does not import is left out.

Run: ``python bench/new_schema_bench.py [--vocabs llama-spm,gpt-2,deepseek-llm] [--schemas 100]
[--engines halter,llguidance,xgrammar] [--no-extra] [--only W1,W2] [--timeout 120] [--out results.jsonl]
[--plot docs/img/new_schema.png]``; ``--summarize results.jsonl`` prints the tables again.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
VOCABS = {"llama-spm": "32k", "gpt-2": "50k", "deepseek-llm": "102k"}
ENGINES = ["halter", "llguidance", "xgrammar"]

FIXED_SCHEMA = {
    "type": "object",
    "required": ["id", "name", "email", "status", "address", "items", "notes"],
    "properties": {
        "id": {"type": "string", "minLength": 8, "maxLength": 36},
        "name": {"type": "string", "minLength": 1, "maxLength": 64},
        "email": {"type": "string", "maxLength": 120},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "status": {"enum": ["active", "inactive", "pending"]},
        "score": {"type": "number"},
        "verified": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 20}, "maxItems": 8},
        "address": {"type": "object", "required": ["street", "city"],
                    "properties": {"street": {"type": "string", "maxLength": 80},
                                   "city": {"type": "string", "maxLength": 40},
                                   "zip": {"type": "string", "maxLength": 10}}},
        "items": {"type": "array", "maxItems": 10,
                  "items": {"type": "object", "required": ["sku", "qty"],
                            "properties": {"sku": {"type": "string", "maxLength": 16},
                                           "qty": {"type": "integer", "minimum": 1},
                                           "price": {"type": "number"}}}},
        "notes": {"type": "string", "maxLength": 300},
        "created": {"type": "string", "maxLength": 30},
    },
}
FIXED_DOC = {
    "id": "c0ffee00-1234-4abc-9def-000000000042", "name": "Ana Lúcia Ferreira", "email": "ana.ferreira@example.org",
    "age": 41, "status": "active", "score": 87.25, "verified": True,
    "tags": ["priority", "wholesale", "north", "returning"],
    "address": {"street": "Rua das Flores 123, 4º andar", "city": "Porto", "zip": "4050-262"},
    "items": [{"sku": "AB-1001", "qty": 2, "price": 19.99}, {"sku": "CD-2002", "qty": 1, "price": 249.0},
              {"sku": "EF-3003", "qty": 12, "price": 0.5}, {"sku": "GH-4004", "qty": 3}],
    "notes": ("Customer asked for delivery after 18:00 on weekdays; the gate code is 4417. Prefers email over "
              "phone. Previous order was delayed by two days, offer free shipping if this one slips too."),
    "created": "2026-11-27T06:55:55Z",
}
C_PROGRAM = ("int fib(int n){if(n<=1){return n;}int a = fib(n-1);int b = fib(n-2);return a+b;}"
             "int main(){int i = 0;int total = 0;for(i = 0; i<10; i = i+1){total = total+fib(i);}"
             "// print the total\nwhile(total>100){total = total-100;}/* done */return total;}"
             "float half(float x){return x/2;}")   # c.gbnf: no space around operators, none between declarations


# -- child: one workload, one vocabulary, one engine --------------------------------------------

def _workload(name: str) -> tuple[str, str, str]:
    """(kind 'schema'|'gbnf', grammar text, document text)."""
    if name == "fixed12":
        return "schema", json.dumps(FIXED_SCHEMA), json.dumps(FIXED_DOC, ensure_ascii=False)
    if name == "c.gbnf":
        return "gbnf", (SHARED / "grammars" / "c.gbnf").read_text(), C_PROGRAM
    idx = int(name.split(":")[1])
    row = json.loads((SHARED / "schema" / "jsonschemabench_dev.jsonl").read_text().splitlines()[idx])
    valid = [t["data"] for t in row["tests"] if t["valid"]]
    return "schema", json.dumps(row["schema"]), json.dumps(valid[0])


def _cpu() -> float:
    return time.process_time()


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


class _Halter:
    def __init__(self, vocab) -> None:
        from halter.grammar import Grammar
        from halter.grammar.bitmask import allocate_bitmask
        self.Grammar, self.vocab = Grammar, vocab
        import halter.schemas  # noqa: F401 - per process: the converter imports jsonschema (~1-2 s)
        Grammar.from_json_schema({"type": "object", "properties": {"a": {"type": "string"}}})  # first-call set-up
        Grammar.from_gbnf('root ::= "x"').compile(vocab, cache=False)     # builds the token trie, loads the kernel
        self.bm = allocate_bitmask(1, vocab.size)

    def compile(self, kind: str, text: str):
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            g = self.Grammar.from_json_schema(text) if kind == "schema" else self.Grammar.from_gbnf(text)
        return g.compile(self.vocab, cache=False)

    def matcher(self, compiled):
        return compiled.matcher()

    def fill(self, m):
        m.fill_bitmask(self.bm)
        return self.bm[0]

    def accept(self, m, tid: int) -> bool:
        return m.accept_token(tid)

    def reset(self, m):
        m.reset()


class _LLG:
    def __init__(self, vocab) -> None:
        sys.path.insert(0, str(ROOT / "bench"))
        from peers_masks import LLGuidancePeer
        self.peer = LLGuidancePeer(vocab)
        self.llg = self.peer.llg

    def compile(self, kind: str, text: str):
        if kind == "schema":
            return self.peer.compile(text)
        from llguidance.gbnf_to_lark import gbnf_to_lark
        m = self.llg.LLMatcher(self.peer.tokenizer, self.llg.LLMatcher.grammar_from_lark(gbnf_to_lark(text)))
        if m.is_error():
            raise RuntimeError(m.get_error()[:100])
        return m

    def matcher(self, compiled):
        return compiled

    def fill(self, m):
        self.peer._fill(m, self.peer.bitmask, 0)
        return self.peer.bitmask[0]

    def accept(self, m, tid: int) -> bool:
        return m.consume_token(tid)

    def reset(self, m):
        m.reset()


class _XGR:
    def __init__(self, vocab) -> None:
        sys.path.insert(0, str(ROOT / "bench"))
        from peers_masks import XGrammarPeer
        self.peer = XGrammarPeer(vocab)
        self.xgr = self.peer.xgr

    def compile(self, kind: str, text: str):
        if kind == "schema":
            return self.peer.compile(text)
        return self.xgr.GrammarMatcher(self.peer.compiler.compile_grammar(text))

    def matcher(self, compiled):
        return compiled

    def fill(self, m):
        m.fill_next_token_bitmask(self.peer.bitmask)
        return self.peer.bitmask[0].numpy()

    def accept(self, m, tid: int) -> bool:
        return m.accept_token(tid)

    def reset(self, m):
        m.reset()


def document_tokens(vocab_name: str, workload: str) -> list[int]:
    """The workload's document, tokenized by the vocabulary's own tokenizer (in the parent: the
    tokenizer imports the engine, which imports torch)."""
    from halter.engine.tokenizer import Tokenizer
    tok = _TOKENIZERS.get(vocab_name)
    if tok is None:
        tok = _TOKENIZERS[vocab_name] = Tokenizer.from_gguf(SHARED / "vocab" / f"ggml-vocab-{vocab_name}.gguf")
    doc = _workload(workload)[2].encode()
    ids = tok.encode(doc.decode(), add_bos=False)
    vocab = tok.vocab if hasattr(tok, "vocab") else None
    if vocab is None:
        from halter.grammar import Vocabulary
        vocab = _VOCABS.get(vocab_name)
        if vocab is None:
            vocab = _VOCABS[vocab_name] = Vocabulary.from_gguf(SHARED / "vocab" / f"ggml-vocab-{vocab_name}.gguf")
    if b"".join(vocab.token_bytes[t] for t in ids) == doc:
        return ids
    # SentencePiece puts a space before the text: a greedy longest match of the exact bytes instead
    index: dict[bytes, int] = {}
    for i, b in enumerate(vocab.token_bytes):
        if b and i not in vocab.special_ids and i not in vocab.eog_ids:
            index.setdefault(b, i)
    longest = max(map(len, index))
    out, pos = [], 0
    while pos < len(doc):
        for n in range(min(longest, len(doc) - pos), 0, -1):
            if doc[pos:pos + n] in index:
                out.append(index[doc[pos:pos + n]])
                pos += n
                break
        else:
            raise ValueError(f"no token spells byte {doc[pos]} of the document")
    return out


_TOKENIZERS: dict = {}
_VOCABS: dict = {}


def child(engine: str, vocab_name: str, workload: str, tokens_json: str) -> dict:
    sys.path.insert(0, str(ROOT))
    from halter.grammar import Vocabulary
    path = SHARED / "vocab" / f"ggml-vocab-{vocab_name}.gguf"
    kind, text, doc = _workload(workload)
    vocab = Vocabulary.from_gguf(path)
    tokens = json.loads(tokens_json)
    out = {"engine": engine, "vocab": vocab_name, "workload": workload, "n_tokens": len(tokens)}
    if b"".join(vocab.token_bytes[t] for t in tokens) != doc.encode():
        out["error"] = "tokenization does not spell the document"
        return out
    t0 = _cpu()
    eng = {"halter": _Halter, "llguidance": _LLG, "xgrammar": _XGR}[engine](vocab)
    gc.collect()          # the set-up's garbage (imports, tokenizers) collected with it, as a server has
    out["setup_ms"] = (_cpu() - t0) * 1e3
    out["rss_setup_mb"] = _rss_mb()
    t0 = _cpu()
    try:
        compiled = eng.compile(kind, text)
        m = eng.matcher(compiled)
    except Exception as e:  # noqa: BLE001 - a refusal is a result
        out["error"] = f"refused: {type(e).__name__}: {str(e)[:120]}"
        return out
    out["compile_ms"] = (_cpu() - t0) * 1e3
    clock = time.thread_time
    for pass_ in ("first", "second"):
        masks, accepts, rejected = [], [], 0
        if pass_ == "second":
            eng.reset(m)
        for tid in tokens:
            t0 = clock()
            words = eng.fill(m)
            t1 = clock()
            if not (int(words[tid >> 5]) >> (tid & 31)) & 1:
                rejected += 1
            t2 = clock()
            ok = eng.accept(m, tid)
            t3 = clock()
            masks.append((t1 - t0) * 1e6)
            accepts.append((t3 - t2) * 1e6)
            if not ok:
                out["error"] = f"accept failed at token {len(masks) - 1} ({pass_} pass)"
                break
        out[f"{pass_}_mask_us"] = masks
        out[f"{pass_}_accept_us"] = accepts
        out[f"{pass_}_rejected"] = rejected
        if "error" in out:
            break
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


# -- parent ---------------------------------------------------------------------------------------

def workloads(n_schemas: int, extra: bool) -> list[str]:
    rows = (SHARED / "schema" / "jsonschemabench_dev.jsonl").read_text().splitlines()
    out = []
    for i in range(0, len(rows), 3):
        if len(out) >= n_schemas:
            break
        if any(t["valid"] for t in json.loads(rows[i])["tests"]):
            out.append(f"schema:{i}")
    return out + (["fixed12", "c.gbnf"] if extra else [])


def run_child(engine: str, vocab: str, workload: str, timeout: float, tokens: list[int]) -> dict:
    with tempfile.TemporaryDirectory(prefix="halter-cold-") as cache:
        env = dict(os.environ, HALTER_CACHE_DIR=cache, PYTHONPATH=str(ROOT))
        cmd = [sys.executable, __file__, "--child", engine, vocab, workload, json.dumps(tokens)]
        try:
            p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"engine": engine, "vocab": vocab, "workload": workload, "error": f"timeout {timeout:.0f}s"}
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or not lines:
        return {"engine": engine, "vocab": vocab, "workload": workload,
                "error": f"crashed rc={p.returncode}: {p.stderr.strip().splitlines()[-1:]}"}
    return json.loads(lines[-1])


def _q(xs, q):
    import numpy as np
    return float(np.percentile(xs, q)) if len(xs) else float("nan")


def summarize(results: list[dict], plot: str | None = None) -> str:
    import numpy as np
    lines = []
    by = {}
    for r in results:
        by.setdefault((r["vocab"], r["workload"]), {})[r["engine"]] = r
    ok = (lambda r: r is not None and "error" not in r and "second_mask_us" in r)
    for vocab in VOCABS:
        keys = [k for k in by if k[0] == vocab]
        if not keys:
            continue
        engines = [e for e in ENGINES if any(e in by[k] for k in keys)]
        schema_keys = [k for k in keys if k[1].startswith("schema:")]
        lines.append(f"\n### {vocab} ({VOCABS[vocab]}), {len(schema_keys)} JSONSchemaBench schemas\n")
        lines.append("| engine | done | refused / failed | compile ms p50 / p99 / max | first-pass mask µs/token p50 / p99 / max "
                     "| compile + first pass ms p50 / p90 | second-pass mask µs p50 | peak RSS MB p50 / max | doc tokens wrongly rejected |")
        lines.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for e in engines:
            rs = [by[k].get(e) for k in schema_keys if e in by[k]]
            good = [r for r in rs if ok(r)]
            bad = len(rs) - len(good)
            if not good:
                lines.append(f"| {e} | 0 | {bad} | | | | | | |")
                continue
            comp = [r["compile_ms"] for r in good]
            first = np.concatenate([r["first_mask_us"] for r in good])
            second = np.concatenate([r["second_mask_us"] for r in good])
            total = [r["compile_ms"] + (sum(r["first_mask_us"]) + sum(r["first_accept_us"])) / 1e3 for r in good]
            rss = [r["peak_rss_mb"] for r in good]
            rej = sum(r["first_rejected"] for r in good)
            lines.append(f"| {e} | {len(good)} | {bad} | {_q(comp, 50):.1f} / {_q(comp, 99):.0f} / {max(comp):.0f} "
                         f"| {_q(first, 50):.0f} / {_q(first, 99):.0f} / {first.max():.0f} "
                         f"| {_q(total, 50):.1f} / {_q(total, 90):.0f} | {_q(second, 50):.1f} "
                         f"| {_q(rss, 50):.0f} / {max(rss):.0f} | {rej} |")
        # ratios on schemas both completed
        for peer in [p for p in engines if p != "halter"]:
            both = [k for k in schema_keys if ok(by[k].get("halter")) and ok(by[k].get(peer))]
            if not both:
                continue
            h, p = [by[k]["halter"] for k in both], [by[k][peer] for k in both]

            def tot(r):
                return r["compile_ms"] + (sum(r["first_mask_us"]) + sum(r["first_accept_us"])) / 1e3
            rc = _q([r["compile_ms"] for r in h], 50) / _q([r["compile_ms"] for r in p], 50)
            rt = _q([tot(a) / tot(b) for a, b in zip(h, p)], 50)
            rf = _q(np.concatenate([r["first_mask_us"] for r in h]), 99) / _q(np.concatenate([r["first_mask_us"] for r in p]), 99)
            rs2 = _q(np.concatenate([r["second_mask_us"] for r in h]), 50) / _q(np.concatenate([r["second_mask_us"] for r in p]), 50)
            lines.append(f"\nhalter / {peer} on the {len(both)} schemas both completed: compile p50 {rc:.2f}x, "
                         f"compile + first pass (median of per-schema ratios) {rt:.2f}x, first-pass mask p99 {rf:.2f}x, "
                         f"second-pass mask p50 {rs2:.2f}x")
        extra = [k for k in keys if not k[1].startswith("schema:")]
        if extra:
            lines.append("\n| workload | engine | compile ms | first-pass mask µs p50 / p99 / max | second-pass p50 µs | peak RSS MB | rejected |")
            lines.append("|---|---|---:|---:|---:|---:|---:|")
            for k in sorted(extra, key=lambda k: k[1]):
                for e in engines:
                    r = by[k].get(e)
                    if r is None:
                        continue
                    if not ok(r):
                        lines.append(f"| {k[1]} | {e} | {r.get('error', '')[:60]} | | | | |")
                        continue
                    f = r["first_mask_us"]
                    lines.append(f"| {k[1]} | {e} | {r['compile_ms']:.1f} | {_q(f, 50):.0f} / {_q(f, 99):.0f} / {max(f):.0f} "
                                 f"| {_q(r['second_mask_us'], 50):.1f} | {r['peak_rss_mb']:.0f} | {r['first_rejected']} |")
    if plot:
        _plot(results, plot)
    return "\n".join(lines)


def _plot(results: list[dict], path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    by = {}
    for r in results:
        if "error" not in r and "second_mask_us" in r and r["workload"].startswith("schema:"):
            by.setdefault((r["vocab"], r["workload"]), {})[r["engine"]] = (
                r["compile_ms"] + (sum(r["first_mask_us"]) + sum(r["first_accept_us"])) / 1e3)
    fig, ax = plt.subplots(figsize=(6.4, 4.8))
    for vocab, color in zip(VOCABS, ["tab:blue", "tab:orange", "tab:green"]):
        for peer, marker in (("llguidance", "o"), ("xgrammar", "x")):
            pts = [(v[peer], v["halter"]) for (vb, _), v in by.items() if vb == vocab and peer in v and "halter" in v]
            if pts:
                xs, ys = zip(*pts)
                ax.scatter(xs, ys, s=14, c=color, marker=marker, label=f"{peer}, {vocab}")
    lim = [0.5, 1e5]
    ax.plot(lim, lim, "k:", lw=0.8)
    ax.plot(lim, [2 * x for x in lim], "k--", lw=0.6)
    ax.set(xscale="log", yscale="log", xlim=lim, ylim=lim, xlabel="peer: compile + first pass, CPU ms",
           ylabel="halter: compile + first pass, CPU ms", title="A new schema, cold: halter vs peers (per schema)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--child", nargs=4, metavar=("ENGINE", "VOCAB", "WORKLOAD", "TOKENS"), help=argparse.SUPPRESS)
    ap.add_argument("--vocabs", default=",".join(VOCABS))
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--schemas", type=int, default=100, help="how many JSONSchemaBench schemas (default 100)")
    ap.add_argument("--no-extra", action="store_true", help="leave out the fixed 12-property schema and c.gbnf")
    ap.add_argument("--only", default=None, metavar="W1,W2", help="just these workloads (schema:N, fixed12, c.gbnf)")
    ap.add_argument("--timeout", type=float, default=120, help="seconds per child process")
    ap.add_argument("--out", default=None, help="append each result as a JSON line here")
    ap.add_argument("--plot", default=None, help="write a PNG plot here")
    ap.add_argument("--summarize", default=None, metavar="RESULTS.jsonl", help="only print the tables of a past run")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(*args.child)))
        return
    if args.summarize:
        results = [json.loads(ln) for ln in Path(args.summarize).read_text().splitlines() if ln.strip()]
        print(summarize(results, args.plot))
        return
    engines = [e for e in args.engines.split(",") if e]
    results = []
    wl = args.only.split(",") if args.only else workloads(args.schemas, not args.no_extra)
    t_start = time.time()
    for vocab in args.vocabs.split(","):
        for i, w in enumerate(wl):
            tokens = document_tokens(vocab, w)
            order = engines[i % len(engines):] + engines[:i % len(engines)]
            for e in order:
                r = run_child(e, vocab, w, args.timeout, tokens)
                results.append(r)
                if args.out:
                    with open(args.out, "a") as f:
                        f.write(json.dumps(r) + "\n")
                status = r.get("error") or (f"compile {r['compile_ms']:.1f} ms, first mask p50 "
                                            f"{_q(r['first_mask_us'], 50):.0f} µs max {max(r['first_mask_us'] or [0]):.0f} µs")
                print(f"[{time.time() - t_start:6.0f}s] {vocab} {w} {e}: {status}", flush=True)
    print(summarize(results, args.plot))


if __name__ == "__main__":
    main()
