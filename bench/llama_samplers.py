"""llama.cpp's samplers through llama-cpp-python's ctypes API, for ``bench/sampler_diff.py``.

``LlamaSamplers(venv, vocab_gguf)`` loads ``llama_cpp`` from a virtual environment (appended to
``sys.path``, so this interpreter's numpy stays in charge), a vocabulary-only model, and builds
samplers by the names ``make_sampler`` uses. ``apply(smpl, ids, logits, p, sorted)`` runs one
``llama_sampler_apply`` on a ``llama_token_data_array`` built from numpy and returns what the
sampler left: ids, logits, probabilities (float32), ``selected`` and ``sorted``.
"""
from __future__ import annotations

import ctypes
import glob
import os
import re
import sys
import types
from typing import Any

import numpy as np

TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])


def import_llama_cpp(venv: str):
    """llama-cpp-python's low-level ctypes module (``llama_cpp.llama_cpp``) from ``venv``.

    ``venv`` is a virtual environment with llama-cpp-python installed, or a directory holding the
    ``llama_cpp`` package itself (a source tree; point ``LLAMA_CPP_LIB_PATH`` at the built
    libraries then). Only the ctypes layer is imported, not the high-level package (which needs
    jinja2, diskcache...), so this interpreter's own numpy stays in charge.
    """
    cands = glob.glob(os.path.join(venv, "lib", "python3*", "site-packages")) + [venv]
    root = next((c for c in cands if os.path.isfile(os.path.join(c, "llama_cpp", "llama_cpp.py"))), None)
    if root is None:
        raise SystemExit(f"no llama_cpp package under {venv}: install llama-cpp-python there first")
    pkg_dir = os.path.join(root, "llama_cpp")
    if "llama_cpp" not in sys.modules:
        pkg = types.ModuleType("llama_cpp")
        pkg.__path__ = [pkg_dir]
        init = open(os.path.join(pkg_dir, "__init__.py")).read()
        m = re.search(r'__version__\s*=\s*"([^"]+)"', init)
        pkg.__version__ = m.group(1) if m else "?"
        sys.modules["llama_cpp"] = pkg
    import llama_cpp.llama_cpp as low  # noqa: PLC0415
    low.__version__ = sys.modules["llama_cpp"].__version__
    return low


class LlamaSamplers:
    """Owns the vocabulary model; builds, applies and frees llama.cpp samplers."""

    def __init__(self, venv: str, vocab_gguf: str) -> None:
        self.L = L = import_llama_cpp(venv)
        self.version = getattr(L, "__version__", "?")
        L.llama_backend_init()
        self._quiet = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)(lambda *a: None)
        L.llama_log_set(self._quiet, None)
        mp = L.llama_model_default_params()
        mp.vocab_only = True
        self.model = L.llama_model_load_from_file(vocab_gguf.encode(), mp)
        if not self.model:
            raise SystemExit(f"llama.cpp could not load {vocab_gguf}")
        self.vocab = L.llama_model_get_vocab(self.model)
        self.n_vocab = int(L.llama_vocab_n_tokens(self.vocab))

    # -- vocabulary helpers (for halter's DRY breakers) ---------------------------------------
    def detokenize_one(self, token: int) -> bytes:
        """``vocab.detokenize({token}, special=true)``: what DRY matches breakers against."""
        L = self.L
        toks = (L.llama_token * 1)(token)
        buf = ctypes.create_string_buffer(256)
        n = L.llama_detokenize(self.vocab, toks, 1, buf, 256, False, True)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = L.llama_detokenize(self.vocab, toks, 1, buf, -n, False, True)
        return buf.raw[:n]

    def tokenize(self, text: bytes) -> list[int]:
        """``vocab.tokenize(text, add_special=false, parse_special=false)``."""
        L = self.L
        cap = len(text) + 8
        out = (L.llama_token * cap)()
        n = L.llama_tokenize(self.vocab, text, len(text), out, cap, False, False)
        return [int(out[i]) for i in range(n)]

    # -- samplers --------------------------------------------------------------------------
    def make(self, name: str, prm: dict[str, Any]) -> Any:
        L = self.L
        if name == "greedy":
            return L.llama_sampler_init_greedy()
        if name == "dist":
            return L.llama_sampler_init_dist(prm["seed"])
        if name == "top_k":
            return L.llama_sampler_init_top_k(prm["k"])
        if name == "top_p":
            return L.llama_sampler_init_top_p(prm["p"], prm["min_keep"])
        if name == "min_p":
            return L.llama_sampler_init_min_p(prm["p"], prm["min_keep"])
        if name == "typical":
            return L.llama_sampler_init_typical(prm["p"], prm["min_keep"])
        if name == "temp":
            return L.llama_sampler_init_temp(prm["t"])
        if name == "temp_ext":
            return L.llama_sampler_init_temp_ext(prm["t"], prm["delta"], prm["exponent"])
        if name == "xtc":
            return L.llama_sampler_init_xtc(prm["p"], prm["t"], prm["min_keep"], prm["seed"])
        if name == "top_n_sigma":
            return L.llama_sampler_init_top_n_sigma(prm["n"])
        if name == "mirostat":
            return L.llama_sampler_init_mirostat(prm["n_vocab"], prm["seed"], prm["tau"], prm["eta"], prm["m"])
        if name == "mirostat_v2":
            return L.llama_sampler_init_mirostat_v2(prm["seed"], prm["tau"], prm["eta"])
        if name == "penalties":
            return L.llama_sampler_init_penalties(self.n_vocab, prm["penalty_last_n"], prm["penalty_repeat"],
                                                  prm["penalty_freq"], prm["penalty_present"])
        if name == "dry":
            brk = [b.encode() if isinstance(b, str) else b for b in prm["seq_breakers"]]
            arr = (ctypes.c_char_p * max(len(brk), 1))(*brk)
            return L.llama_sampler_init_dry(self.vocab, prm["multiplier"], prm["base"], prm["allowed_length"],
                                            prm["penalty_last_n"], arr, len(brk))
        if name == "logit_bias":
            pairs = prm["biases"]
            arr = (L.llama_logit_bias * max(len(pairs), 1))()
            for i, (t, b) in enumerate(pairs):
                arr[i].token = t
                arr[i].bias = b
            return L.llama_sampler_init_logit_bias(prm["n_vocab"], len(pairs), arr)
        if name == "grammar":
            smpl = L.llama_sampler_init_grammar(self.vocab, prm["gbnf"].encode(), b"root")
            if not smpl:
                raise ValueError("llama.cpp refused the grammar")
            return smpl
        raise ValueError(f"unknown sampler {name}")

    def chain(self, parts: list[tuple[str, dict]]) -> Any:
        L = self.L
        ch = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
        for name, prm in parts:
            L.llama_sampler_chain_add(ch, self.make(name, prm))
        return ch

    def apply(self, smpl: Any, ids: np.ndarray, logits: np.ndarray, p: np.ndarray, sorted_: bool) -> dict:
        L = self.L
        n = ids.shape[0]
        buf = np.zeros(n, dtype=TOKEN_DATA)
        buf["id"], buf["logit"], buf["p"] = ids, logits, p
        base = buf.ctypes.data
        arr = L.llama_token_data_array(
            data=ctypes.cast(base, L.llama_token_data_p), size=n, selected=-1, sorted=sorted_)
        L.llama_sampler_apply(smpl, ctypes.byref(arr))
        start = (ctypes.cast(arr.data, ctypes.c_void_p).value - base) // TOKEN_DATA.itemsize
        out = buf[start:start + arr.size]
        return {"ids": out["id"].copy(), "logits": out["logit"].copy(), "p": out["p"].copy(),
                "selected": int(arr.selected), "sorted": bool(arr.sorted)}

    def accept(self, smpl: Any, token: int) -> None:
        self.L.llama_sampler_accept(smpl, int(token))

    def free(self, smpl: Any) -> None:
        self.L.llama_sampler_free(smpl)
