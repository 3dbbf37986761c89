"""llama.cpp's side of ``bench/gbnf_diff.py``: its grammar parser and matcher, driven by ctypes.

Runs in the interpreter that has llama-cpp-python (``pip install -e ".[diff]"`` or a venv of its
own), as a worker: one JSON request per stdin line, one JSON answer per stdout line. A grammar is
parsed by ``llama_sampler_init_grammar`` (NULL: refused); a string is fed through the grammar
sampler exactly as generation does, ``llama_sampler_apply`` on one candidate (is this token
allowed?) then ``llama_sampler_accept``:

* ``chars``: one code point at a time (its own token when the vocabulary has one, else its UTF-8
  bytes as byte tokens); the answer is how many code points were accepted and, at each accepted
  prefix, whether an end-of-generation token was allowed (the grammar may end there), and whether
  the code point it stopped on was fed as several byte tokens;
* ``whole``: the string as the vocabulary tokenizes it, token after token.

Nothing llama.cpp prints reaches the terminal (stderr goes to /dev/null); memory is capped so a
grammar that makes llama.cpp loop (reversed bounds ``{3,1}``, hidden left recursion) ends the
worker instead of the machine, and the parent starts a new one.
"""
from __future__ import annotations

import ctypes
import json
import math
import os
import resource
import sys


def main() -> None:
    vocab_path = sys.argv[1]
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
    out = os.fdopen(os.dup(1), "w")
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    os.dup2(devnull, 1)
    import llama_cpp as L

    L.llama_backend_init()
    params = L.llama_model_default_params()
    params.vocab_only = True
    model = L.llama_model_load_from_file(vocab_path.encode(), params)
    if not model:
        out.write(json.dumps({"error": f"cannot load {vocab_path}"}) + "\n")
        out.flush()
        return
    vocab = L.llama_model_get_vocab(model)
    eos = L.llama_vocab_eos(vocab)
    buf = ctypes.create_string_buffer(256)
    piece_of: dict[bytes, int] = {}
    for tok in range(L.llama_vocab_n_tokens(vocab)):
        if L.llama_vocab_is_eog(vocab, tok) or L.llama_vocab_is_control(vocab, tok):
            continue
        n = L.llama_token_to_piece(vocab, tok, buf, 256, 0, False)
        if 0 < n <= 4:
            piece_of.setdefault(buf.raw[:n], tok)
    byte_tok = {b: piece_of[bytes([b])] for b in range(1, 256) if bytes([b]) in piece_of}
    data = (L.llama_token_data * 1)()
    arr = L.llama_token_data_array(data, 1, -1, False)

    def allowed(smpl, tok: int) -> bool:
        data[0].id, data[0].logit, data[0].p = tok, 0.0, 0.0
        arr.data, arr.size, arr.selected, arr.sorted = data, 1, -1, False
        L.llama_sampler_apply(smpl, ctypes.byref(arr))
        return not math.isinf(data[0].logit)

    def tokens_of(ch: str) -> list[int] | None:
        b = ch.encode("utf-8")
        if b in piece_of:
            return [piece_of[b]]
        if all(x in byte_tok for x in b):
            return [byte_tok[x] for x in b]
        return None

    toks = (L.llama_token * 4096)()
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    for line in sys.stdin:
        req = json.loads(line)
        smpl = L.llama_sampler_init_grammar(vocab, req["g"].encode("utf-8", "surrogatepass"), b"root")
        if not smpl:
            out.write(json.dumps({"ok": False}) + "\n")
            out.flush()
            continue
        results = []
        for s in req.get("s", []):
            L.llama_sampler_reset(smpl)
            flags, k, split = [allowed(smpl, eos)], 0, False
            for ch in s:
                ts = tokens_of(ch)
                if ts is None or not all(allowed(smpl, t) and (L.llama_sampler_accept(smpl, t) or True) for t in ts):
                    split = ts is not None and len(ts) > 1     # stopped on a character fed byte by byte
                    break
                k += 1
                flags.append(allowed(smpl, eos))
            L.llama_sampler_reset(smpl)
            raw = s.encode("utf-8")
            n = L.llama_tokenize(vocab, raw, len(raw), toks, 4096, False, False)
            pieces, done = [], 0
            for i in range(max(n, 0)):
                m = L.llama_token_to_piece(vocab, toks[i], buf, 256, 0, False)
                pieces.append(buf.raw[:m].hex())
            for i in range(max(n, 0)):
                if not allowed(smpl, toks[i]):
                    break
                L.llama_sampler_accept(smpl, toks[i])
                done += 1
            complete = allowed(smpl, eos) if done == len(pieces) else None
            results.append({"chars": [k, flags], "split": split, "whole": [pieces, done, complete]})
        L.llama_sampler_free(smpl)
        out.write(json.dumps({"ok": True, "r": results}) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
