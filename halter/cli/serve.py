"""``halter serve``: an OpenAI-compatible HTTP server for a GGUF model, with llama-server's flags.

Endpoints: POST /v1/chat/completions, /v1/completions, /completion; GET /v1/models, /health.
Needs the ``serve`` extra (``pip install 'halter[serve]'``). See docs/server.md.
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from halter.errors import HalterError


def add_parser(sub: Any) -> None:
    p = sub.add_parser("serve", help="serve a GGUF model over HTTP (OpenAI-compatible, continuous batching)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-m", "--model", required=True, help="GGUF model file")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="port to listen on (default 8080)")
    p.add_argument("-c", "--ctx-size", type=int, default=0,
                   help="context size in all, split over the --parallel sequences "
                        "(default 0: the model's training context, at most 4096, per sequence)")
    p.add_argument("-np", "--parallel", type=int, default=4,
                   help="sequences decoded at once (continuous batching slots; default 4)")
    p.add_argument("-b", "--batch-size", type=int, default=512,
                   help="prompt tokens evaluated per step (default 512)")
    p.add_argument("-n", "--n-predict", "--predict", dest="n_predict", type=int, default=-1,
                   help="default max tokens per request (-1: until the context is full)")
    p.add_argument("--api-key", default=None, help="require 'Authorization: Bearer KEY'")
    p.add_argument("--api-key-file", default=None, help="read the API key from a file")
    p.add_argument("-a", "--alias", default=None, help="model name reported by the API (default: file name)")
    p.add_argument("--chat-template", default=None,
                   help="Jinja chat template text, or 'chatml' (default: the GGUF file's, else ChatML)")
    p.add_argument("--chat-template-file", default=None, help="read the Jinja chat template from a file")
    p.add_argument("--max-queue", type=int, default=64,
                   help="requests that may wait for a free sequence; beyond, 429 (default 64)")
    p.add_argument("-t", "--threads", type=int, default=None, help="CPU threads for PyTorch")
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:1 ... (default: cuda if available)")
    p.add_argument("--dtype", default=None, help="f32, f16 or bf16")
    p.add_argument("--log-level", default="info", choices=("critical", "error", "warning", "info", "debug"))
    p.set_defaults(func=run)


def _read(path: str, what: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8").strip() if what == "API key" else \
            Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise HalterError(f"cannot read {what} {path!r}: {err.strerror or err}") from None


def run(args: argparse.Namespace) -> int:
    from halter.server.backend import CHATML
    from halter.server.run import serve

    if not os.path.isfile(args.model):
        raise HalterError(f"model file not found: {args.model}")
    api_key = _read(args.api_key_file, "API key") if args.api_key_file else args.api_key
    template = _read(args.chat_template_file, "chat template") if args.chat_template_file else args.chat_template
    if template is not None and template.strip().lower() == "chatml":
        template = CHATML
    if args.threads:
        import torch
        torch.set_num_threads(args.threads)
    try:
        serve(args.model, host=args.host, port=args.port, api_key=api_key, log_level=args.log_level,
              ctx_size=args.ctx_size, parallel=args.parallel, batch_size=args.batch_size,
              n_predict=args.n_predict, alias=args.alias, chat_template=template, max_queue=args.max_queue,
              device=args.device, dtype=args.dtype, progress=True)
    except ValueError as err:
        raise HalterError(str(err)) from None
    return 0
