"""Session fixtures for the server tests: the real app on uvicorn, on free loopback ports.

One tiny random model (built once) is served with 16 sequences; a second app over the same
backend requires an API key, and a third backend with one sequence and no queue answers 429.
Skips cleanly when the ``serve`` extra (starlette, uvicorn) or the ``openai`` client is missing.
"""
from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Iterator

import pytest

API_KEY = "sk-test-halter"


@dataclass
class Served:
    url: str            # http://127.0.0.1:PORT
    backend: Any


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(app: Any) -> tuple[str, Any, threading.Thread]:
    import uvicorn

    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                           lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 30
    while not server.started:
        if time.time() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    return f"http://127.0.0.1:{port}", server, thread


@pytest.fixture(scope="session")
def server_model_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    from halter.engine import build_tiny_gguf
    return build_tiny_gguf(tmp_path_factory.mktemp("server") / "tiny-server.gguf", seed=11)


@pytest.fixture(scope="session")
def servers(server_model_path: str) -> Iterator[dict[str, Served]]:
    """{"open": 16 sequences, "keyed": same backend with API_KEY, "tight": 1 sequence, no queue}."""
    pytest.importorskip("starlette")
    pytest.importorskip("uvicorn")
    from halter.server.app import create_app
    from halter.server.run import build_backend

    main = build_backend(server_model_path, ctx_size=16 * 1024, parallel=16, batch_size=64)
    tight = build_backend(server_model_path, ctx_size=2048, parallel=1, max_queue=0)
    running = []
    out = {}
    for name, backend, key in (("open", main, None), ("keyed", main, API_KEY), ("tight", tight, None)):
        url, server, thread = _start(create_app(backend, api_key=key))
        running.append((server, thread))
        out[name] = Served(url, backend)
    yield out
    for server, thread in running:
        server.should_exit = True
        thread.join(timeout=10)
    main.close()
    tight.close()


@pytest.fixture(scope="session")
def client(servers: dict[str, Served]) -> Any:
    openai = pytest.importorskip("openai")
    return openai.OpenAI(base_url=servers["open"].url + "/v1", api_key="unused", max_retries=0, timeout=120)
