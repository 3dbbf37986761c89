"""Packed token bitmasks: allocate them, convert them, and apply them to logits in place.

Layout (the one XGrammar uses): a row of ``ceil(V / 32)`` int32 words; bit ``i`` of word ``j``
is set when token ``32 * j + i`` is allowed. ``-1`` (all bits set) allows everything.
``apply_bitmask`` works on numpy arrays and on torch tensors on any device; on an accelerator the
bits are unpacked on the device with shifts and ands, so the logits never visit the host.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

__all__ = ["allocate_bitmask", "bitmask_to_bool", "bool_to_bitmask", "apply_bitmask",
           "apply_token_bitmask_inplace", "bitmask_words"]


def bitmask_words(vocab_size: int) -> int:
    """Number of int32 words one bitmask row needs for ``vocab_size`` tokens."""
    return (int(vocab_size) + 31) // 32


def allocate_bitmask(batch_size: int | None, vocab_size: int) -> np.ndarray:
    """An int32 bitmask filled with ``-1`` (every token allowed).

    Shape ``[batch_size, ceil(vocab_size / 32)]``, or 1-D ``[ceil(vocab_size / 32)]`` when
    ``batch_size`` is ``None``.
    """
    if not isinstance(vocab_size, (int, np.integer)) or vocab_size <= 0:
        raise ValueError(f"allocate_bitmask: vocab_size must be a positive int, got {vocab_size!r}")
    if batch_size is None:
        return np.full(bitmask_words(vocab_size), -1, dtype=np.int32)
    if not isinstance(batch_size, (int, np.integer)) or batch_size <= 0:
        raise ValueError(f"allocate_bitmask: batch_size must be a positive int or None, got {batch_size!r}")
    return np.full((int(batch_size), bitmask_words(vocab_size)), -1, dtype=np.int32)


def _check_numpy_bitmask(bitmask: np.ndarray, where: str) -> np.ndarray:
    if not isinstance(bitmask, np.ndarray):
        raise TypeError(f"{where}: bitmask must be a numpy int32 array, got {type(bitmask).__name__}")
    if bitmask.dtype != np.int32 and bitmask.dtype != np.uint32:
        raise TypeError(f"{where}: bitmask dtype must be int32, got {bitmask.dtype}")
    if bitmask.ndim not in (1, 2):
        raise ValueError(f"{where}: bitmask must be 1-D or 2-D, got shape {bitmask.shape}")
    return np.ascontiguousarray(bitmask, dtype="<i4")


def _unpack(bitmask: np.ndarray, invert: bool = False) -> np.ndarray:
    """Bits of a contiguous little-endian int32 bitmask as uint8 0/1, ``[..., 32 * W]``."""
    words = ~bitmask if invert else bitmask
    return np.unpackbits(words.view(np.uint8), axis=-1, bitorder="little")


def bitmask_to_bool(bitmask: np.ndarray, vocab_size: int) -> np.ndarray:
    """The boolean allowed-mask ``[..., vocab_size]`` a packed bitmask stands for."""
    bm = _check_numpy_bitmask(bitmask, "bitmask_to_bool")
    if vocab_size > bm.shape[-1] * 32 or vocab_size < 0:
        raise ValueError(f"bitmask_to_bool: vocab_size {vocab_size} does not fit a bitmask of "
                         f"{bm.shape[-1]} words ({bm.shape[-1] * 32} tokens)")
    return _unpack(bm)[..., :vocab_size].view(np.bool_)


def bool_to_bitmask(mask: Any) -> np.ndarray:
    """Pack a boolean allowed-mask ``[..., V]`` into int32 words ``[..., ceil(V / 32)]``."""
    m = np.asarray(mask)
    if m.dtype != np.bool_:
        raise TypeError(f"bool_to_bitmask: mask must be boolean, got dtype {m.dtype}")
    if m.ndim not in (1, 2):
        raise ValueError(f"bool_to_bitmask: mask must be 1-D or 2-D, got shape {m.shape}")
    words = bitmask_words(m.shape[-1])
    packed = np.packbits(m, axis=-1, bitorder="little")
    pad = words * 4 - packed.shape[-1]
    if pad:
        widths = [(0, 0)] * (packed.ndim - 1) + [(0, pad)]
        packed = np.pad(packed, widths)
    return np.ascontiguousarray(packed).view("<i4").astype(np.int32, copy=False)


def _rows(indices: Sequence[int] | None, n_rows: int, where: str) -> list[int] | None:
    if indices is None:
        return None
    rows = [int(i) for i in indices]
    for i in rows:
        if not -n_rows <= i < n_rows:
            raise IndexError(f"{where}: index {i} is out of range for a batch of {n_rows} rows")
    return rows


def apply_bitmask(logits: Any, bitmask: Any, *, vocab_size: int | None = None,
                  indices: Sequence[int] | None = None) -> None:
    """Set every logit whose token the bitmask disallows to ``-inf``, in place.

    Parameters
    ----------
    logits:
        numpy float array or torch float tensor (any device), ``[V]`` or ``[B, V]``.
    bitmask:
        int32 bitmask (numpy array or torch tensor), ``[W]`` or ``[B, W]`` with the same number
        of rows as ``logits``. A numpy bitmask is moved to the tensor's device (a few KiB).
    vocab_size:
        the tokenizer's vocabulary size; default ``min(logits.shape[-1], 32 * W)``.
    indices:
        batch rows to mask (rows of ``logits`` and of ``bitmask`` alike); default all rows.

    Notes
    -----
    Semantics, for every selected row ``r``::

        for t in range(logits.shape[-1]):
            if t >= vocab_size or not (bitmask[r, t // 32] >> (t % 32)) & 1:
                logits[r, t] = -inf

    Columns beyond ``vocab_size`` (a model's padded vocabulary) are disallowed too, so a token the
    tokenizer does not have can never be sampled.

    Raises
    ------
    TypeError
        wrong dtype (bitmask not int32, logits not floating point) or mixed array libraries.
    ValueError
        shapes that do not match.
    """
    if _is_torch(logits):
        _apply_torch(logits, bitmask, vocab_size, indices)
        return
    if not isinstance(logits, np.ndarray):
        raise TypeError(f"apply_bitmask: logits must be a numpy array or torch tensor, got {type(logits).__name__}")
    if _is_torch(bitmask):
        raise TypeError("apply_bitmask: numpy logits need a numpy bitmask (got a torch tensor)")
    if not np.issubdtype(logits.dtype, np.floating):
        raise TypeError(f"apply_bitmask: logits must be floating point, got dtype {logits.dtype}")
    bm = _check_numpy_bitmask(bitmask, "apply_bitmask")
    width, vocab = _check_shapes(logits.shape, bm.shape, vocab_size)
    disallowed = _unpack(bm, invert=True)[..., :vocab]
    if logits.ndim == 1:
        _fill_neg_inf(logits[:vocab], disallowed)
        logits[vocab:] = -np.inf
        return
    rows = _rows(indices, logits.shape[0], "apply_bitmask")
    for r in (range(logits.shape[0]) if rows is None else rows):
        _fill_neg_inf(logits[r, :vocab], disallowed[r])
        logits[r, vocab:] = -np.inf


_INT_OF_FLOAT = {np.dtype(np.float16): np.int16, np.dtype(np.float32): np.int32,
                 np.dtype(np.float64): np.int64}


def _fill_neg_inf(row: np.ndarray, disallowed: np.ndarray) -> None:
    """``row[disallowed] = -inf`` without a boolean scatter (slow on random masks).

    Works on the float bits as integers: with ``m`` all ones where disallowed and zero elsewhere,
    ``x ^= (x ^ NEG_INF) & m`` turns exactly the disallowed entries into ``-inf``.
    """
    itype = _INT_OF_FLOAT.get(row.dtype)
    if itype is None:
        np.copyto(row, -np.inf, where=disallowed.view(np.bool_))
        return
    neg_inf = np.array(-np.inf, dtype=row.dtype).view(itype)
    m = np.negative(disallowed.view(np.int8)).astype(itype)
    bits = row.view(itype)
    diff = np.bitwise_xor(bits, neg_inf)
    np.bitwise_and(diff, m, out=diff)
    np.bitwise_xor(bits, diff, out=bits)


apply_token_bitmask_inplace = apply_bitmask


def _check_shapes(logits_shape: tuple, bm_shape: tuple, vocab_size: int | None) -> tuple[int, int]:
    if len(logits_shape) not in (1, 2):
        raise ValueError(f"apply_bitmask: logits must be 1-D [V] or 2-D [B, V], got shape {tuple(logits_shape)}")
    if len(bm_shape) != len(logits_shape):
        raise ValueError(f"apply_bitmask: logits shape {tuple(logits_shape)} and bitmask shape "
                         f"{tuple(bm_shape)} must both be 1-D or both be 2-D")
    if len(logits_shape) == 2 and logits_shape[0] != bm_shape[0]:
        raise ValueError(f"apply_bitmask: logits have {logits_shape[0]} rows but the bitmask has {bm_shape[0]}")
    width = int(logits_shape[-1])
    capacity = int(bm_shape[-1]) * 32
    vocab = min(width, capacity) if vocab_size is None else int(vocab_size)
    if vocab < 0 or vocab > capacity:
        raise ValueError(f"apply_bitmask: vocab_size {vocab} does not fit a bitmask of "
                         f"{bm_shape[-1]} words ({capacity} tokens)")
    if vocab > width:
        raise ValueError(f"apply_bitmask: vocab_size {vocab} is wider than the logits ({width} columns)")
    return width, vocab


def _is_torch(x: Any) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "masked_fill_")


_SHIFTS: dict = {}


def _apply_torch(logits: Any, bitmask: Any, vocab_size: int | None, indices: Sequence[int] | None) -> None:
    import torch

    if not logits.is_floating_point():
        raise TypeError(f"apply_bitmask: logits must be floating point, got dtype {logits.dtype}")
    if isinstance(bitmask, np.ndarray):
        bitmask = torch.from_numpy(_check_numpy_bitmask(bitmask, "apply_bitmask").view(np.int32))
    elif not _is_torch(bitmask):
        raise TypeError(f"apply_bitmask: bitmask must be an int32 array or tensor, got {type(bitmask).__name__}")
    if bitmask.dtype != torch.int32:
        raise TypeError(f"apply_bitmask: bitmask dtype must be torch.int32, got {bitmask.dtype}")
    _, vocab = _check_shapes(tuple(logits.shape), tuple(bitmask.shape), vocab_size)
    device = logits.device
    if bitmask.device != device:
        bitmask = bitmask.to(device, non_blocking=True)
    shifts = _SHIFTS.get(device)
    if shifts is None:
        shifts = _SHIFTS[device] = torch.arange(32, dtype=torch.int32, device=device)
    rows = _rows(indices, logits.shape[0], "apply_bitmask") if logits.dim() == 2 else None
    if rows is not None:
        rows_t = torch.tensor(rows, dtype=torch.long, device=device)
        bitmask = bitmask.index_select(0, rows_t)
    bits = (bitmask.unsqueeze(-1) >> shifts) & 1
    disallowed = bits.flatten(-2)[..., :vocab] == 0
    if rows is None:
        logits[..., :vocab].masked_fill_(disallowed, float("-inf"))
        logits[..., vocab:] = float("-inf")
    else:
        sub = logits.index_select(0, rows_t)
        sub[:, :vocab].masked_fill_(disallowed, float("-inf"))
        sub[:, vocab:] = float("-inf")
        logits.index_copy_(0, rows_t, sub)


def pack_bits(mask: np.ndarray) -> np.ndarray:
    """Bool mask -> uint32 words, bit i of word j = element 32*j + i."""
    n_words = (len(mask) + 31) // 32
    padded = np.zeros(n_words * 32, dtype=bool)
    padded[:len(mask)] = mask
    return np.packbits(padded, bitorder="little").view("<u4").astype(np.uint32)


def unpack_bits(words: np.ndarray, n: int) -> np.ndarray:
    """uint32 words -> bool mask of length ``n``."""
    as_bytes = np.ascontiguousarray(words, dtype="<u4").view(np.uint8)
    return np.unpackbits(as_bytes, bitorder="little")[:n].astype(bool)
