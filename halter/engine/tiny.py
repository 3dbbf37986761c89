"""Build tiny random-weight GGUF models: for tests, benchmarks and the no-download demo.

``build_tiny_gguf`` writes a llama, qwen2, qwen3, gemma2, gemma3 or phi3 model with seeded random
weights and a small byte-level BPE vocabulary (the 256 GPT-2 byte symbols, a few dozen merges of
common English and JSON pairs, and BOS/EOS control tokens), in the layout llama.cpp's converter produces: llama Q/K
rows permuted for the NORM rope, qwen2 with Q/K/V biases and tied output embeddings, qwen3 and
gemma3 with Q/K head norms, gemma with post-attention/FFN norms, a sliding window (``sliding_window``,
small by default so that it matters in short tests), gemma2's soft-capping values, and phi3's fused
Q/K/V (``attn_qkv``) and gate/up (``ffn_up``) with optional LongRoPE factor tensors. Quantized
types use ``gguf.quants.quantize`` where it can (Q4_0..Q8_0, BF16) and halter's own Q4_K encoder.
"""
from __future__ import annotations

import os

import numpy as np

# Merges of the tiny vocabulary, as pairs of existing tokens (GPT-2 byte symbols; "Ġ" is a space).
TINY_MERGES: tuple[tuple[str, str], ...] = (
    ("t", "h"), ("h", "e"), ("i", "n"), ("e", "r"), ("a", "n"), ("Ġ", "t"), ("Ġ", "a"),
    ("Ġt", "h"), ("th", "e"), ("Ġth", "e"), ("o", "n"), ("r", "e"), ("a", "t"), ("e", "n"),
    ("n", "d"), ("i", "s"), ("Ġ", "i"), ("Ġ", "s"), ("o", "r"), ("e", "s"), ("Ġ", "o"),
    ("Ġ", "w"), ("Ġa", "nd"), ("in", "g"), ("o", "u"), ("Ġ", "c"), ("Ġ", "b"), ("e", "d"),
    ("Ġ", "f"), ("Ġo", "f"), ("\"", ":"), ("\"", ","), ("{", "\""), ("\"", "}"), ("Ġ", "\""),
    ("Ġ", "{"), ("Ġ", "["), ("Ċ", "Ġ"), ("ĊĠ", "Ġ"), ("n", "a"), ("na", "m"), ("nam", "e"),
    ("t", "r"), ("tr", "u"), ("tru", "e"), ("f", "a"), ("fa", "l"), ("fal", "s"),
    ("fals", "e"), ("n", "u"), ("nu", "l"), ("nul", "l"),
)
BOS_TOKEN, EOS_TOKEN = "<|begin_of_text|>", "<|end_of_text|>"
TINY_ARCHS = ("llama", "qwen2", "qwen3", "gemma2", "gemma3", "phi3")


def gpt2_byte_symbols() -> list[str]:
    """The 256 printable symbols GPT-2's byte-level BPE uses for bytes 0..255, in byte order."""
    direct = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
              *range(ord("®"), ord("ÿ") + 1)]
    symbols, extra = {}, 0
    for b in range(256):
        if b in direct:
            symbols[b] = chr(b)
        else:
            symbols[b] = chr(256 + extra)
            extra += 1
    return [symbols[b] for b in range(256)]


def tiny_vocab() -> tuple[list[str], list[int], list[str]]:
    """(tokens, token types, merges) of the tiny byte-level BPE vocabulary."""
    tokens = gpt2_byte_symbols()
    known = set(tokens)
    merges = []
    for a, b in TINY_MERGES:
        if a not in known or b not in known:
            raise AssertionError(f"merge {a!r} {b!r} uses an unknown token")
        merges.append(f"{a} {b}")
        if a + b not in known:
            tokens.append(a + b)
            known.add(a + b)
    types = [1] * len(tokens) + [3, 3]
    return tokens + [BOS_TOKEN, EOS_TOKEN], types, merges


def quantize_q4_k(x: np.ndarray) -> np.ndarray:
    """Encode float32 rows (length a multiple of 256) as Q4_K blocks: uint8 ``[rows, 144 * n/256]``.

    A straightforward min/max encoder (llama.cpp searches for better scales); the point is a
    valid Q4_K file, decoded by any reader to the same values.
    """
    rows = x.shape[0]
    sub = x.astype(np.float32).reshape(-1, 8, 32)                        # blocks of 8 sub-blocks
    lo = np.minimum(sub.min(axis=2), 0.0)
    scale = (sub.max(axis=2) - lo) / 15.0
    d = (scale.max(axis=1) / 63.0).astype(np.float16)
    dmin = ((-lo).max(axis=1) / 63.0).astype(np.float16)
    safe = lambda v: np.where(v == 0, 1.0, v.astype(np.float32))[:, None]  # noqa: E731
    sc = np.clip(np.rint(scale / safe(d)), 0, 63).astype(np.uint8)
    mn = np.clip(np.rint(-lo / safe(dmin)), 0, 63).astype(np.uint8)
    step = (d.astype(np.float32)[:, None] * sc)[:, :, None]
    offset = (dmin.astype(np.float32)[:, None] * mn)[:, :, None]
    q = np.clip(np.rint((sub + offset) / np.where(step == 0, 1.0, step)), 0, 15).astype(np.uint8)
    packed_scales = np.concatenate([
        (sc[:, :4] & 63) | ((sc[:, 4:] >> 4) << 6),
        (mn[:, :4] & 63) | ((mn[:, 4:] >> 4) << 6),
        (sc[:, 4:] & 0x0F) | ((mn[:, 4:] & 0x0F) << 4)], axis=1)
    qs = (q[:, 0::2] | (q[:, 1::2] << 4)).reshape(-1, 128)               # pairs of sub-blocks
    blocks = np.concatenate([d.view(np.uint8).reshape(-1, 2), dmin.view(np.uint8).reshape(-1, 2),
                             packed_scales, qs], axis=1)
    return blocks.reshape(rows, -1)


_BLOCK = {"Q4_0": 32, "Q4_1": 32, "Q5_0": 32, "Q5_1": 32, "Q8_0": 32, "Q4_K": 256}


def _encode(w: np.ndarray, dtype: str) -> tuple[np.ndarray, object]:
    """(data, raw ggml type) for ``GGUFWriter.add_tensor``; rows too short fall back to Q8_0/F32."""
    import gguf
    from gguf import GGMLQuantizationType as T

    if w.ndim == 1 or dtype == "F32":
        return w.astype(np.float32), None
    if dtype == "F16":
        return w.astype(np.float16), None
    if dtype in _BLOCK and w.shape[-1] % _BLOCK[dtype]:
        dtype = "Q8_0" if w.shape[-1] % 32 == 0 else "F32"   # as llama.cpp's quantizer falls back
        return _encode(w, dtype)
    if dtype == "Q4_K":
        return quantize_q4_k(w), T.Q4_K
    if dtype in ("BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"):
        qtype = T[dtype]
        return gguf.quants.quantize(w.astype(np.float32), qtype), qtype
    raise ValueError(f"unsupported dtype {dtype!r} for the tiny builder "
                     "(F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K)")


def permute_qk(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's converter permutation of Hugging Face Q/K rows (half-split -> adjacent pairs)."""
    head_dim = w.shape[0] // n_head
    return (w.reshape(n_head, 2, head_dim // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape))


def _tokenizer_fields(path: str | os.PathLike[str]) -> dict[str, tuple]:
    """The ``tokenizer.*`` fields of the GGUF file at ``path``: key -> (value, type, item type)."""
    import gguf

    try:
        reader = gguf.GGUFReader(os.fspath(path))
    except (OSError, ValueError) as exc:
        raise ValueError(f"vocab: cannot read {os.fspath(path)!r} as a GGUF file: {exc}") from exc
    fields = {}
    for key, field in reader.fields.items():
        if key.startswith("tokenizer."):
            vtype = field.types[0]
            sub_type = field.types[1] if vtype == gguf.GGUFValueType.ARRAY and len(field.types) > 1 else None
            fields[key] = (field.contents(), vtype, sub_type)
    if "tokenizer.ggml.tokens" not in fields:
        raise ValueError(f"vocab: {os.fspath(path)!r} has no tokenizer.ggml.tokens field")
    return fields


def build_tiny_gguf(path: str | os.PathLike[str], *, arch: str = "llama", n_layer: int = 2,
                    n_embd: int = 64, n_head: int = 4, n_head_kv: int = 2, n_ff: int = 128,
                    dtype: str = "F32", seed: int = 0, vocab: str | os.PathLike[str] = "bytes",
                    n_ctx_train: int = 2048,
                    rope_base: float = 10000.0, tied_output: bool | None = None,
                    add_bos: bool = True, head_dim: int | None = None, sliding_window: int = 8,
                    rope_base_swa: float | None = None, rope_freqs: "np.ndarray | None" = None,
                    rope_dim: int | None = None, rope_scaling: dict | None = None,
                    rope_factors: "tuple[np.ndarray, np.ndarray] | None" = None) -> str:
    """Write a random-weight ``arch`` model (one of ``TINY_ARCHS``) to ``path``; returns the path.

    ``dtype`` is the type of the 2-D weights (norms stay F32). ``tied_output`` defaults to
    False for llama and phi3, True for the others (no ``output.weight``: logits use the embedding).
    ``vocab`` is ``"bytes"`` (the tiny byte-level BPE vocabulary) or the path of a GGUF file whose
    ``tokenizer.*`` fields are copied as they are (a vocabulary-only file such as llama.cpp's
    ``ggml-vocab-*.gguf``): a random model with a real tokenizer, for benchmarks at real vocabulary
    sizes. ``add_bos`` applies to the tiny vocabulary only. ``head_dim`` (default
    ``n_embd // n_head``) is written as ``attention.key_length`` when it differs; gemma files get
    ``sliding_window`` and, when given, ``rope_base_swa`` (``rope.freq_base_swa``).
    ``rope_freqs`` (``head_dim // 2`` values) is written as ``rope_freqs.weight``: the per-pair
    frequency divisors by which llama.cpp's converter stores Llama 3.1's ``llama3`` rope scaling.
    ``rope_dim`` is written as ``rope.dimension_count`` (partial rotary embeddings when below the
    head size); ``rope_scaling`` maps ``rope.scaling.*`` key suffixes to values (``{"type": "yarn",
    "factor": 4.0, "original_context_length": 64}``); ``rope_factors`` = (long, short) writes
    phi3's ``rope_factors_long.weight`` and ``rope_factors_short.weight``.
    """
    import gguf

    if arch not in TINY_ARCHS:
        raise ValueError(f"arch must be one of {', '.join(TINY_ARCHS)}, not {arch!r}")
    if head_dim is None and (n_embd % n_head or (n_embd // n_head) % 2) or n_head % n_head_kv:
        raise ValueError("n_embd must split into n_head even-sized heads, n_head into n_head_kv groups")
    tied = (arch not in ("llama", "phi3")) if tied_output is None else tied_output
    gemma = arch.startswith("gemma")
    if vocab == "bytes":
        tokens, types, merges = tiny_vocab()
        tokenizer_fields = None
        n_vocab = len(tokens)
    else:
        tokenizer_fields = _tokenizer_fields(vocab)
        n_vocab = len(tokenizer_fields["tokenizer.ggml.tokens"][0])
    explicit_head_dim = head_dim is not None
    head_dim = n_embd // n_head if head_dim is None else head_dim
    rng = np.random.default_rng(seed)

    def normal(*shape: int, std: float) -> np.ndarray:
        return (rng.standard_normal(shape) * std).astype(np.float32)

    w = gguf.GGUFWriter(os.fspath(path), arch)
    w.add_name(f"halter-tiny-{arch}")
    w.add_context_length(n_ctx_train)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_rope_freq_base(rope_base)
    w.add_layer_norm_rms_eps(1e-5)
    if arch in ("llama", "phi3") or rope_dim is not None:
        w.add_rope_dimension_count(head_dim if rope_dim is None else rope_dim)
    for key, value in (rope_scaling or {}).items():
        if isinstance(value, str):
            w.add_string(f"{arch}.rope.scaling.{key}", value)
        elif isinstance(value, int):
            w.add_uint32(f"{arch}.rope.scaling.{key}", value)
        else:
            w.add_float32(f"{arch}.rope.scaling.{key}", float(value))
    if explicit_head_dim or gemma:
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    if gemma:
        w.add_sliding_window(sliding_window)
        if rope_base_swa is not None:
            w.add_rope_freq_base_swa(rope_base_swa)
    if arch == "gemma2":
        w.add_attn_logit_softcapping(50.0)
        w.add_final_logit_softcapping(30.0)
    w.add_vocab_size(n_vocab)
    w.add_file_type(0 if dtype == "F32" else 1 if dtype == "F16" else 7)
    if tokenizer_fields is None:
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("gpt-2")
        w.add_token_list(tokens)
        w.add_token_types(types)
        w.add_token_merges(merges)
        w.add_bos_token_id(n_vocab - 2)
        w.add_eos_token_id(n_vocab - 1)
        w.add_add_bos_token(add_bos)
    else:
        for key, (value, vtype, sub_type) in tokenizer_fields.items():
            w.add_key_value(key, value, vtype, sub_type)

    def put(name: str, t: np.ndarray) -> None:
        data, raw = _encode(t, dtype)
        if raw is None:
            w.add_tensor(name, data)
        else:
            w.add_tensor(name, data, raw_shape=data.shape, raw_dtype=raw)

    std = n_embd ** -0.5
    put("token_embd.weight", normal(n_vocab, n_embd, std=1.0))
    for i in range(n_layer):
        b = f"blk.{i}."
        wq, wk = normal(n_head * head_dim, n_embd, std=std), normal(n_head_kv * head_dim, n_embd, std=std)
        if arch == "llama":
            wq, wk = permute_qk(wq, n_head), permute_qk(wk, n_head_kv)
        put(b + "attn_norm.weight", 1.0 + normal(n_embd, std=0.1))
        wv = normal(n_head_kv * head_dim, n_embd, std=std)
        if arch == "phi3":
            put(b + "attn_qkv.weight", np.concatenate([wq, wk, wv]))
        else:
            put(b + "attn_q.weight", wq)
            put(b + "attn_k.weight", wk)
            put(b + "attn_v.weight", wv)
        if arch == "qwen2":
            put(b + "attn_q.bias", normal(n_head * head_dim, std=0.1))
            put(b + "attn_k.bias", normal(n_head_kv * head_dim, std=0.1))
            put(b + "attn_v.bias", normal(n_head_kv * head_dim, std=0.1))
        if arch in ("qwen3", "gemma3"):
            put(b + "attn_q_norm.weight", 1.0 + normal(head_dim, std=0.1))
            put(b + "attn_k_norm.weight", 1.0 + normal(head_dim, std=0.1))
        put(b + "attn_output.weight", normal(n_embd, n_head * head_dim, std=std))
        put(b + "ffn_norm.weight", 1.0 + normal(n_embd, std=0.1))
        if gemma:
            put(b + "post_attention_norm.weight", 1.0 + normal(n_embd, std=0.1))
            put(b + "post_ffw_norm.weight", 1.0 + normal(n_embd, std=0.1))
        gate, up = normal(n_ff, n_embd, std=std), normal(n_ff, n_embd, std=std)
        if arch == "phi3":                           # gate rows, then up rows
            put(b + "ffn_up.weight", np.concatenate([gate, up]))
        else:
            put(b + "ffn_gate.weight", gate)
            put(b + "ffn_up.weight", up)
        put(b + "ffn_down.weight", normal(n_embd, n_ff, std=n_ff ** -0.5))
    put("output_norm.weight", 1.0 + normal(n_embd, std=0.1))
    if rope_freqs is not None:
        w.add_tensor("rope_freqs.weight", np.asarray(rope_freqs, dtype=np.float32))
    if rope_factors is not None:
        w.add_tensor("rope_factors_long.weight", np.asarray(rope_factors[0], dtype=np.float32))
        w.add_tensor("rope_factors_short.weight", np.asarray(rope_factors[1], dtype=np.float32))
    if not tied:
        put("output.weight", normal(n_vocab, n_embd, std=std))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return os.fspath(path)
