"""``halter run``: generate from a GGUF model with llama-cli's flags, constrained by a grammar.

The generated text streams to stdout; logs and timings go to stderr. Exit codes: 0 ok, 1 bad
input (grammar/schema/model; the message names the file, line and column), 2 usage, 3 the output
is incomplete (``-n`` ran out before the grammar could end).
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any

from halter.cli.inputs import device, parse_json, positive_int, read_text
from halter.errors import GrammarError, HalterError, SchemaError

EXIT_OK, EXIT_BAD_INPUT, EXIT_INCOMPLETE = 0, 1, 3

# flag -> SamplingParams field, as llama-cli spells them
_SAMPLING_FLAGS = [
    (("--temp", "--temperature"), "temperature", float), (("--top-k",), "top_k", int),
    (("--top-p",), "top_p", float), (("--min-p",), "min_p", float),
    (("--typical", "--typical-p"), "typical_p", float), (("--top-nsigma",), "top_n_sigma", float),
    (("--repeat-penalty",), "repeat_penalty", float), (("--repeat-last-n",), "repeat_last_n", int),
    (("--presence-penalty",), "presence_penalty", float),
    (("--frequency-penalty",), "frequency_penalty", float),
    (("--dry-multiplier",), "dry_multiplier", float), (("--dry-base",), "dry_base", float),
    (("--dry-allowed-length",), "dry_allowed_length", int),
    (("--dry-penalty-last-n",), "dry_penalty_last_n", int),
    (("--xtc-probability",), "xtc_probability", float), (("--xtc-threshold",), "xtc_threshold", float),
    (("--mirostat",), "mirostat", int), (("--mirostat-lr",), "mirostat_eta", float),
    (("--mirostat-ent",), "mirostat_tau", float), (("-s", "--seed"), "seed", int),
]


def add_parser(sub: Any) -> None:
    p = sub.add_parser("run", help="generate text from a GGUF model, optionally grammar-constrained",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-m", "--model", required=True, help="GGUF model file")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("-p", "--prompt", help="prompt text")
    src.add_argument("-f", "--file", help="read the prompt from a file")
    p.add_argument("-sys", "--system-prompt", help="system message (implies --chat)")
    p.add_argument("--chat", action="store_true", help="render the prompt with the model's chat template")
    con = p.add_mutually_exclusive_group()
    con.add_argument("--grammar", help="GBNF grammar text")
    con.add_argument("--grammar-file", help="GBNF grammar file")
    con.add_argument("-j", "--json-schema", help="JSON Schema text ({} = any JSON value)")
    con.add_argument("-jf", "--json-schema-file", help="JSON Schema file")
    con.add_argument("--regex", help="regular expression the whole output must match")
    p.add_argument("--whitespace", choices=("flexible", "compact"), default=None,
                   help="whitespace a JSON schema allows between tokens (default: flexible, bounded)")
    p.add_argument("-n", "--predict", "--n-predict", dest="n_predict", type=int, default=256,
                   help="tokens to generate at most (default 256)")
    for flags, field, kind in _SAMPLING_FLAGS:
        p.add_argument(*flags, dest=field, type=kind, default=None, help=f"sampling: {field}")
    p.add_argument("--samplers", help='sampler order, e.g. "penalties;top_k;top_p;min_p;temperature"')
    p.add_argument("--sampling-seq", help="sampler order as letters, e.g. edskypmxt")
    p.add_argument("-l", "--logit-bias", action="append", default=[], metavar="ID(+|-)BIAS",
                   help="token logit bias, e.g. 15043+1 (repeatable)")
    p.add_argument("--ignore-eos", action="store_true", help="never sample an end-of-generation token")
    p.add_argument("--stop", action="append", default=[], metavar="S", help="stop string (repeatable)")
    p.add_argument("--grammar-first", action="store_true",
                   help="apply the grammar to every token before sampling (default: resample on reject)")
    p.add_argument("-c", "--ctx-size", type=positive_int, default=None, help="context size (default: the model's, max 4096)")
    p.add_argument("-b", "--batch-size", type=positive_int, default=512, help="prompt batch size")
    p.add_argument("--device", type=device, default=None, help="cpu, cuda, cuda:1 ... (default: cuda if available)")
    p.add_argument("--dtype", default=None, help="f32, f16 or bf16")
    p.add_argument("--json-output", action="store_true", help="print one JSON object with the result")
    p.set_defaults(func=run)


def _read(path: str, what: str) -> str:
    return read_text(path, what)


def _logit_bias(items: list[str]) -> dict[int, float]:
    out: dict[int, float] = {}
    for item in items:
        m = re.fullmatch(r"\s*(\d+)\s*([+-])\s*(\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|inf)\s*", item)
        if m is None:
            raise HalterError(f"--logit-bias {item!r}: expected TOKEN_ID+BIAS or TOKEN_ID-BIAS, e.g. 15043+1")
        tok = int(m.group(1))
        out[tok] = out.get(tok, 0.0) + float(m.group(2) + m.group(3))
    return out


def constraint_from_args(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    """(keyword for ``halter.generate``, where it came from for error messages)."""
    if args.grammar is not None:
        return {"grammar": args.grammar}, "--grammar"
    if args.grammar_file is not None:
        return {"grammar": _read(args.grammar_file, "grammar file")}, f"grammar file {args.grammar_file}"
    if args.json_schema is not None or args.json_schema_file is not None:
        where = "--json-schema" if args.json_schema is not None else f"schema file {args.json_schema_file}"
        text = args.json_schema if args.json_schema is not None else _read(args.json_schema_file, "schema file")
        return {"json_schema": parse_json(text, where)}, where
    if args.regex is not None:
        return {"regex": args.regex}, "--regex"
    return {}, ""


def _sampling(args: argparse.Namespace) -> Any:
    from halter.sampling import SamplingParams

    fields = {f: getattr(args, f) for _, f, _ in _SAMPLING_FLAGS if getattr(args, f) is not None}
    if args.samplers or args.sampling_seq:
        fields["samplers"] = args.samplers or args.sampling_seq
    if args.logit_bias:
        fields["logit_bias"] = _logit_bias(args.logit_bias)
    fields["ignore_eos"] = args.ignore_eos
    if fields.get("seed") == -1:
        fields["seed"] = None
    try:
        return SamplingParams(**fields)
    except (TypeError, ValueError) as err:
        raise HalterError(f"bad sampling option: {err}") from None


def run(args: argparse.Namespace) -> int:
    from halter.api import generate
    from halter.api import Model

    constraint, where = constraint_from_args(args)
    prompt: Any = args.prompt if args.prompt is not None else _read(args.file, "prompt file")
    if args.chat or args.system_prompt:
        prompt = ([{"role": "system", "content": args.system_prompt}] if args.system_prompt else []) + \
            [{"role": "user", "content": prompt}]
    sampling = _sampling(args)
    if args.n_predict < 0:
        raise HalterError(f"-n must be >= 0 (got {args.n_predict}); halter always bounds the output")
    model = Model.load(args.model, device=args.device, dtype=args.dtype, n_ctx=args.ctx_size,
                       n_batch=args.batch_size, progress=not args.json_output)
    try:
        stream = generate(model, prompt, max_tokens=args.n_predict, sampling=sampling, stop=args.stop,
                          grammar_first=args.grammar_first, stream=True,
                          schema_options={"whitespace": args.whitespace} if args.whitespace else None,
                          **constraint)
    except (GrammarError, SchemaError) as err:
        print(f"halter run: {where}: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    for piece in stream:
        if not args.json_output:
            sys.stdout.write(piece)
            sys.stdout.flush()
    c = stream.completion
    t = c.timings
    if args.json_output:
        print(json.dumps({"text": c.text, "complete": c.complete, "finish_reason": c.finish_reason,
                          "tokens": c.tokens, "seed": c.seed}))
    else:
        sys.stdout.write("\n")
        print(f"[{c.usage.completion_tokens} tokens, {c.finish_reason}; prompt {t.prompt_ms:.1f} ms, "
              f"decode {t.decode_tps:.1f} tok/s, grammar mask {t.mask_ms:.1f} ms; seed {c.seed}]",
              file=sys.stderr)
    if not c.complete:
        print(f"halter run: the output is incomplete: -n {args.n_predict} ran out before the grammar "
              "could end (raise -n)", file=sys.stderr)
        return EXIT_INCOMPLETE
    return EXIT_OK
