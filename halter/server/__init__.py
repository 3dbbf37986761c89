"""``halter serve``: an OpenAI-compatible HTTP server with continuous batching (optional ``serve`` extra).

``create_app`` builds the ASGI app (Starlette) for a ``Backend`` (a model and its scheduler);
``serve`` loads a GGUF file and runs the app on uvicorn. See docs/server.md.
"""
from __future__ import annotations

from typing import Any

__all__ = ["Backend", "create_app", "serve"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from halter.server.app import create_app
        return create_app
    if name == "Backend":
        from halter.server.backend import Backend
        return Backend
    if name == "serve":
        from halter.server.run import serve
        return serve
    raise AttributeError(f"module 'halter.server' has no attribute {name!r}")
