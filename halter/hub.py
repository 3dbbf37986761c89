"""Downloads from the Hugging Face Hub through ``huggingface_hub`` (``pip install halter[hub]``).

``hf_download(repo, filename)`` runs ``huggingface_hub.hf_hub_download`` into halter's model
cache (the hub's own cache layout under ``models_dir() / "hf"``): a progress bar on stderr,
downloads resumed from the partial file an interrupted run left, and files found in the cache
used without a new download when the hub cannot be reached. halter then checks the file's sha256
against the hash the hub published for it (the ETag of an LFS file, the name of its blob in the
cache); a mismatch deletes the file and raises ``FetchError``. The endpoint is ``HF_ENDPOINT``
read at call time (a mirror, or a local server in tests).
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from halter.errors import FetchError

_SHA256 = re.compile(r"[0-9a-f]{64}")
_VERIFIED = ".halter-sha256-ok"      # marker beside a blob whose hash was checked once


def _quiet_tqdm() -> Any:
    from tqdm.auto import tqdm

    class Quiet(tqdm):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs["disable"] = True
            super().__init__(*args, **kwargs)
    return Quiet


def hf_download(repo: str, filename: str, *, revision: str | None = None, progress: bool = True,
                cache_dir: str | os.PathLike[str]) -> Path:
    """Local path of ``filename`` in Hub repo ``repo``, downloaded (or resumed) and sha256-checked."""
    try:
        import huggingface_hub
        from huggingface_hub import errors as hf_errors
    except ImportError as exc:
        raise FetchError("downloading from the Hugging Face Hub needs huggingface_hub: "
                         "pip install 'halter[hub]'") from exc
    kwargs: dict[str, Any] = {"repo_id": repo, "filename": filename, "revision": revision,
                              "cache_dir": os.fspath(cache_dir),
                              "endpoint": os.environ.get("HF_ENDPOINT") or None}
    if not progress:
        kwargs["tqdm_class"] = _quiet_tqdm()
    where = f"{repo}/{filename}" + (f"@{revision}" if revision else "")
    try:
        path = Path(huggingface_hub.hf_hub_download(**kwargs))
    except hf_errors.LocalEntryNotFoundError as exc:     # (a subclass of EntryNotFoundError)
        raise FetchError(f"hf://{where}: the Hub could not be reached and the file is not in "
                         f"the cache ({exc})", network=True) from exc
    except hf_errors.EntryNotFoundError as exc:
        raise FetchError(f"hf://{where}: no such file in the repository") from exc
    except hf_errors.RevisionNotFoundError as exc:
        raise FetchError(f"hf://{where}: no such revision") from exc
    except hf_errors.RepositoryNotFoundError as exc:
        raise FetchError(f"hf://{where}: no such repository (or it is private/gated: "
                         "log in with `hf auth login`)") from exc
    except hf_errors.HfHubHTTPError as exc:
        raise FetchError(f"hf://{where}: download failed ({exc})") from exc
    except OSError as exc:   # connection errors and disk errors
        raise FetchError(f"hf://{where}: download failed ({type(exc).__name__}: {exc})",
                         network=not isinstance(exc, (FileNotFoundError, PermissionError))) from exc
    _verify(path, where)
    return path


def _verify(path: Path, where: str) -> None:
    """Check the blob's sha256 against its name (the hub's LFS sha256) once; delete it if wrong."""
    from halter.fetch import sha256_file

    blob = path.resolve()
    expected = blob.name
    if not _SHA256.fullmatch(expected):      # a small non-LFS file: its ETag is a git hash
        return
    marker = blob.with_name(blob.name + _VERIFIED)
    if marker.exists() and marker.stat().st_mtime_ns >= blob.stat().st_mtime_ns:
        return
    actual = sha256_file(blob)
    if actual != expected:
        for p in (path, blob):
            try:
                p.unlink()
            except OSError:
                pass
        raise FetchError(f"hf://{where}: downloaded file has sha256 {actual}, the hub published "
                         f"{expected}; the file was deleted, try again")
    marker.touch()
