"""Token-mask speed: compile time and per-step mask time on real vocabularies, against XGrammar and llguidance.

Run by hand:  python bench/mask_bench.py [--vocab llama-spm gpt-2 deepseek-llm] [--no-peers]

Workloads: llama.cpp's json.gbnf, and a JSON Schema with a fixed structure (a dozen typed fields, a
nested object, an array of objects). A ~1 KB document is tokenized with each vocabulary's own
tokenizer and fed token by token; each step times the mask computation alone (``fill_bitmask``).
Peers (the ``bench`` extra) are measured in the same run on the same tokens.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from halter import Grammar, Vocabulary
from halter.engine.tokenizer import Tokenizer

SHARED = Path(__file__).resolve().parents[1].parent / "shared"

SCHEMA = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"}, "name": {"type": "string"}, "email": {"type": "string"},
        "age": {"type": "integer", "minimum": 0, "maximum": 150}, "score": {"type": "number"},
        "active": {"type": "boolean"}, "role": {"enum": ["admin", "user", "guest"]},
        "created": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}},
        "rating": {"type": "number"}, "nickname": {"type": ["string", "null"]}, "level": {"type": "integer"},
        "address": {"type": "object", "properties": {
            "street": {"type": "string"}, "city": {"type": "string"}, "zip": {"type": "string"}},
            "required": ["street", "city", "zip"], "additionalProperties": False},
        "orders": {"type": "array", "items": {"type": "object", "properties": {
            "sku": {"type": "string"}, "qty": {"type": "integer"}, "price": {"type": "number"}},
            "required": ["sku", "qty", "price"], "additionalProperties": False}},
    },
    "required": ["id", "name", "email", "age", "score", "active", "role", "created", "tags", "rating",
                 "nickname", "level", "address", "orders"],
    "additionalProperties": False,
}

DOC = {
    "id": 48213, "name": "Amélie Dupont-Ferreira", "email": "amelie.dupont@example.com", "age": 34,
    "score": 87.25, "active": True, "role": "admin", "created": "2024-03-17T09:42:11Z",
    "tags": ["early-adopter", "beta", "newsletter", "vip"], "rating": 4.75, "nickname": None, "level": 7,
    "address": {"street": "12 rue des Lilas", "city": "Lyon", "zip": "69003"},
    "orders": [{"sku": "A-1001", "qty": 2, "price": 19.99}, {"sku": "B-2044", "qty": 1, "price": 249.0},
               {"sku": "C-3310", "qty": 12, "price": 3.5}, {"sku": "D-0007", "qty": 3, "price": 12.75}],
}
# json.gbnf allows one space after ',' and ':' (json.dumps' defaults) and a closing object at the root
DOC_TEXT = json.dumps(DOC, ensure_ascii=False)


def pct(xs, q):
    return float(np.percentile(np.array(xs) * 1e6, q))


def run_halter(grammar_src, vocab, tokens, kind):
    t0 = time.perf_counter()
    g = Grammar.from_gbnf(grammar_src) if kind == "gbnf" else Grammar.from_json_schema(grammar_src)
    cg = g.compile(vocab, cache=False)
    cold = time.perf_counter() - t0
    g.compile(vocab, cache=True)                          # fill the disk cache
    t0 = time.perf_counter()
    g2 = Grammar.from_gbnf(grammar_src) if kind == "gbnf" else Grammar.from_json_schema(grammar_src)
    cached_cg = g2.compile(vocab, cache=True)
    cached = time.perf_counter() - t0
    m = cached_cg.matcher()       # a fresh process would start like this (token tables are built on need)
    buf = np.zeros((vocab.size + 31) // 32, dtype=np.int32)
    steps = []
    for t in tokens:
        s = time.perf_counter()
        m.fill_bitmask(buf)
        steps.append(time.perf_counter() - s)
        assert (buf[t >> 5] >> (t & 31)) & 1, f"halter rejected token {t}"
        assert m.accept_token(t)
    return cold, cached, steps


def run_xgrammar(grammar_src, vocab, tokens, kind):
    import xgrammar as xgr
    enc = [b if b else f"<special_{i}>".encode() for i, b in enumerate(vocab.token_bytes)]
    info = xgr.TokenizerInfo(enc, vocab_type=xgr.VocabType.RAW, vocab_size=vocab.size,
                             stop_token_ids=sorted(vocab.eog_ids))
    t0 = time.perf_counter()
    comp = xgr.GrammarCompiler(info, max_threads=2, cache_enabled=False)
    # XGrammar rejects an empty alternative (`ws ::= | " "`); spell it `""`, which means the same
    src = grammar_src.replace("::= |", "::= \"\" |") if kind == "gbnf" else None
    cg = comp.compile_grammar(src) if kind == "gbnf" else comp.compile_json_schema(json.dumps(grammar_src))
    cold = time.perf_counter() - t0
    m = xgr.GrammarMatcher(cg)
    bm = xgr.allocate_token_bitmask(1, vocab.size)
    steps = []
    for t in tokens:
        s = time.perf_counter()
        m.fill_next_token_bitmask(bm)
        steps.append(time.perf_counter() - s)
        if not m.accept_token(t):
            raise RuntimeError("xgrammar rejected a token")
    return cold, None, steps


def run_llguidance(grammar_src, vocab, tokens, kind):
    import llguidance
    import llguidance.numpy

    class _Tok:
        def __init__(self):
            self.eos_token_id = sorted(vocab.eog_ids)[0]
            self.bos_token_id = vocab.bos_id
            self.tokens = [b if b else f"<special_{i}>".encode() for i, b in enumerate(vocab.token_bytes)]
            self.special_token_ids = sorted(vocab.special_ids)

        def __call__(self, s):
            return []

    tok = llguidance.LLTokenizer(llguidance.TokenizerWrapper(_Tok()))
    t0 = time.perf_counter()
    grm = llguidance.grammar_from("gbnf" if kind == "gbnf" else "json_schema",
                                  grammar_src if kind == "gbnf" else json.dumps(grammar_src))
    m = llguidance.LLMatcher(tok, grm)
    cold = time.perf_counter() - t0
    bm = llguidance.numpy.allocate_token_bitmask(1, tok.vocab_size)
    steps = []
    for t in tokens:
        s = time.perf_counter()
        llguidance.numpy.fill_next_token_bitmask(m, bm, 0)
        steps.append(time.perf_counter() - s)
        if not m.consume_token(t):
            raise RuntimeError(f"llguidance rejected a token: {m.get_error()}")
    return cold, None, steps


def tokenize(path, vocab, text: str) -> list[int]:
    """The model's own tokenization; SentencePiece adds a leading space, so then fall back to a greedy
    longest-match tokenization of the exact text (what a grammar-constrained model must produce)."""
    tokens = Tokenizer.from_gguf(path).encode(text, add_bos=False)
    data = text.encode()
    if b"".join(vocab.token_bytes[t] for t in tokens) == data:
        return tokens
    index: dict[bytes, int] = {}
    for i, b in enumerate(vocab.token_bytes):
        if b and i not in vocab.special_ids and i not in vocab.eog_ids:
            index.setdefault(b, i)
    out, pos = [], 0
    while pos < len(data):
        n = next(n for n in range(min(32, len(data) - pos), 0, -1) if data[pos:pos + n] in index)
        out.append(index[data[pos:pos + n]])
        pos += n
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--vocab", nargs="*", default=["llama-spm", "gpt-2", "deepseek-llm"])
    ap.add_argument("--no-peers", action="store_true")
    args = ap.parse_args()
    import os
    os.environ["HALTER_CACHE_DIR"] = tempfile.mkdtemp(prefix="halter-bench-")
    print(f"# mask_bench {time.strftime('%Y-%m-%d')} {platform.machine()} python {platform.python_version()}")
    print(f"document: {len(DOC_TEXT.encode())} bytes")
    json_gbnf = (SHARED / "grammars" / "json.gbnf").read_text()
    workloads = [("json.gbnf", json_gbnf, "gbnf"), ("schema", SCHEMA, "schema")]
    engines = [("halter", run_halter)]
    if not args.no_peers:
        for name, fn, mod in (("llguidance", run_llguidance, "llguidance"), ("xgrammar", run_xgrammar, "xgrammar")):
            try:
                __import__(mod)
                engines.append((name, fn))
            except ImportError:
                print(f"({name} not installed: skipped)")
    print("| vocab | workload | engine | cold compile | cached compile | mask p50 | p99 | max | tokens |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|")
    for vname in args.vocab:
        path = SHARED / "vocab" / f"ggml-vocab-{vname}.gguf"
        vocab = Vocabulary.from_gguf(path)
        tokens = tokenize(path, vocab, DOC_TEXT)
        for wname, src, kind in workloads:
            for ename, fn in engines:
                try:
                    cold, cached, steps = fn(src, vocab, tokens, kind)
                except Exception as exc:                       # a peer failing must not stop the run
                    print(f"| {vname} ({vocab.size}) | {wname} | {ename} | failed: {str(exc)[:60]} |")
                    continue
                cached_s = f"{cached * 1000:.0f} ms" if cached is not None else "n/a"
                print(f"| {vname} ({vocab.size}) | {wname} | {ename} | {cold * 1000:.0f} ms | {cached_s} | "
                      f"{pct(steps, 50):.1f} µs | {pct(steps, 99):.0f} µs | {max(steps) * 1e6:.0f} µs | "
                      f"{len(tokens)} |", flush=True)


if __name__ == "__main__":
    main()
