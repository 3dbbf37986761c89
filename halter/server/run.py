"""Load a GGUF file and serve it on uvicorn: what ``halter serve`` runs."""
from __future__ import annotations

import sys
from typing import Any

__all__ = ["build_backend", "serve"]


def build_backend(model_path: str, *, ctx_size: int = 0, parallel: int = 4, batch_size: int = 512,
                  n_predict: int = -1, alias: str | None = None, chat_template: str | None = None,
                  max_queue: int = 64, device: str | None = None, dtype: str | None = None,
                  progress: bool = False) -> Any:
    """The ``Backend`` for ``model_path``: ``parallel`` cache sequences, each ``ctx_size // parallel``
    tokens long (``ctx_size=0``: the model's training context, at most 4096, per sequence)."""
    from halter.api import Model
    from halter.server.backend import Backend

    if parallel < 1:
        raise ValueError(f"--parallel must be >= 1, got {parallel}")
    if ctx_size < 0:
        raise ValueError(f"--ctx-size must be >= 0, got {ctx_size}")
    per_seq = None if ctx_size == 0 else ctx_size // parallel
    if per_seq is not None and per_seq < 16:
        raise ValueError(f"--ctx-size {ctx_size} split over --parallel {parallel} leaves {per_seq} tokens "
                         "per sequence; raise --ctx-size")
    model = Model.load(model_path, device=device, dtype=dtype, n_ctx=per_seq, n_batch=batch_size,
                       n_seq_max=parallel, progress=progress)
    return Backend(model, n_parallel=parallel, max_queue=max_queue, name=alias,
                   chat_template=chat_template, n_predict=n_predict)


def serve(model_path: str, *, host: str = "127.0.0.1", port: int = 8080, api_key: str | None = None,
          log_level: str = "info", **backend_options: Any) -> None:
    """Serve ``model_path`` until interrupted (see ``build_backend`` for the options)."""
    try:
        import uvicorn

        from halter.server.app import create_app
    except ImportError as err:
        raise ImportError(f"halter serve needs the 'serve' extra: pip install 'halter[serve]' ({err})") from None
    backend = build_backend(model_path, **backend_options)
    m = backend.model
    print(f"halter serve: {backend.name} ({m.config.arch}, n_ctx {m.n_ctx} x {backend.scheduler.n_parallel} "
          f"sequences, {m.device}) on http://{host}:{port}", file=sys.stderr, flush=True)
    try:
        uvicorn.run(create_app(backend, api_key=api_key), host=host, port=port, log_level=log_level)
    finally:
        backend.close()
