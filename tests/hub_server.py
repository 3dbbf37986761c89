"""A local HTTP server that answers like the Hugging Face Hub for file downloads.

It serves ``/{repo}/resolve/{revision}/{path}`` (HEAD and GET, with ``Range``) and sends the
headers ``huggingface_hub`` reads: ``X-Repo-Commit``, ``ETag``/``X-Linked-Etag`` (the sha256 of
an LFS file) and ``X-Linked-Size``. Knobs for the tests: ``cut_first_get`` drops the first GET
of a file after half its bytes (an interrupted download), ``wrong_etag`` publishes a hash that
does not match the bytes. Every request line is logged in ``requests``.
"""
from __future__ import annotations

import hashlib
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

COMMIT = "0123456789abcdef0123456789abcdef01234567"


class HubServer:
    def __init__(self) -> None:
        self.files: dict[tuple[str, str], bytes] = {}
        self.requests: list[tuple[str, str, str | None]] = []
        self.cut_first_get: set[tuple[str, str]] = set()
        self.wrong_etag: set[tuple[str, str]] = set()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def add(self, repo: str, path: str, data: bytes) -> str:
        self.files[repo, path] = data
        return hashlib.sha256(data).hexdigest()

    def __enter__(self) -> "HubServer":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _lookup(self) -> tuple[tuple[str, str], bytes] | None:
                parts = unquote(self.path.split("?", 1)[0]).lstrip("/").split("/")
                if len(parts) < 5 or parts[2] != "resolve":
                    return None
                key = ("/".join(parts[:2]), "/".join(parts[4:]))
                data = hub.files.get(key)
                return None if data is None else (key, data)

            def _headers(self, key: tuple[str, str], data: bytes) -> None:
                sha = hashlib.sha256(data).hexdigest()
                if key in hub.wrong_etag:
                    sha = hashlib.sha256(data + b"tampered").hexdigest()
                self.send_header("X-Repo-Commit", COMMIT)
                self.send_header("ETag", f'"{sha}"')
                self.send_header("X-Linked-Etag", f'"{sha}"')
                self.send_header("X-Linked-Size", str(len(data)))
                self.send_header("Accept-Ranges", "bytes")

            def _missing(self) -> None:
                self.send_response(404)
                self.send_header("X-Error-Code", "EntryNotFound")
                self.send_header("X-Error-Message", "Entry not found")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_HEAD(self) -> None:  # noqa: N802
                hub.requests.append(("HEAD", self.path, None))
                found = self._lookup()
                if found is None:
                    return self._missing()
                key, data = found
                self.send_response(200)
                self._headers(key, data)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()

            def do_GET(self) -> None:  # noqa: N802
                rng = self.headers.get("Range")
                hub.requests.append(("GET", self.path, rng))
                found = self._lookup()
                if found is None:
                    return self._missing()
                key, data = found
                start = 0
                if rng and rng.startswith("bytes="):
                    start = int(rng[6:].split("-", 1)[0])
                body = data[start:]
                self.send_response(206 if start else 200)
                self._headers(key, data)
                if start:
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if key in hub.cut_first_get:
                    hub.cut_first_get.discard(key)
                    self.wfile.write(body[:len(body) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                self.wfile.write(body)

        return Handler
