"""Digit texts as grammar pieces: ``cat`` (a sequence with literals merged), digit classes, the
strings of fixed width between two values, and for long bounds (hundreds of digits: 1e-300,
10**250 + 1) the same built flat, with runs of one digit as counted repeats, instead of a level of
nesting per digit, which would take every walk of the expression past Python's recursion limit.
"""
from __future__ import annotations

import functools

from halter.grammar.ast import CharClass, Expr, Literal, Repeat, Seq, alt, merge_ranges


def cat(*items: Expr) -> Expr:
    """A sequence like ``ast.seq``, with adjacent literals merged (``"0" "0"`` -> ``"00"``)."""
    flat: list[Expr] = []
    for it in items:
        for x in (it.items if isinstance(it, Seq) else (it,)):
            if isinstance(x, Literal):
                if x.text == "":
                    continue
                if flat and isinstance(flat[-1], Literal):
                    flat[-1] = Literal(flat[-1].text + x.text)
                    continue
            flat.append(x)
    if not flat:
        return Literal("")
    return flat[0] if len(flat) == 1 else Seq(tuple(flat))


HEX = CharClass(((0x30, 0x39), (0x41, 0x46), (0x61, 0x66)))
DIGIT = CharClass(((0x30, 0x39),))
NONZERO = CharClass(((0x31, 0x39),))


@functools.lru_cache(maxsize=1024)
def digit_class(lo: int, hi: int, base: int) -> Expr:
    """Digits with values lo..hi in ``base`` (hex letters in both cases)."""
    ranges = []
    for v in range(lo, hi + 1):
        if v < 10:
            ranges.append((0x30 + v, 0x30 + v))
        else:
            ranges.append((0x41 + v - 10, 0x41 + v - 10))
            ranges.append((0x61 + v - 10, 0x61 + v - 10))
    merged = tuple(merge_ranges(ranges))
    if len(merged) == 1 and merged[0][0] == merged[0][1]:
        return Literal(chr(merged[0][0]))
    return CharClass(merged)


FLAT_WIDTH = 40
"""Decimal ranges wider than this are built flat (``flat_range``): nesting a level per digit
would take Python past its recursion limit in every walk of the expression (~150 digits)."""


@functools.lru_cache(maxsize=8192)
def fixed_width_range(lo: int, hi: int, width: int, base: int = 10) -> Expr:
    """Exactly-``width``-digit strings (leading zeros allowed) whose value is in lo..hi (the
    expressions are immutable: calls with the same bounds share one, within and across schemas)."""
    if width == 0:
        return Literal("")
    if width > FLAT_WIDTH and base == 10:
        return flat_range(lo, hi, width)
    p = base ** (width - 1)
    top_lo, top_hi = lo // p, hi // p
    rest_lo, rest_hi = lo % p, hi % p
    if top_lo == top_hi:
        return cat(digit_class(top_lo, top_lo, base), fixed_width_range(rest_lo, rest_hi, width - 1, base))
    parts = []
    first, last = top_lo, top_hi
    if rest_lo != 0:
        parts.append(cat(digit_class(top_lo, top_lo, base), fixed_width_range(rest_lo, p - 1, width - 1, base)))
        first += 1
    tail = None
    if rest_hi != p - 1:
        tail = cat(digit_class(top_hi, top_hi, base), fixed_width_range(0, rest_hi, width - 1, base))
        last -= 1
    if first <= last:
        any_digit = digit_class(0, base - 1, base)
        rest = Repeat(any_digit, width - 1, width - 1) if width > 2 else (any_digit if width == 2 else Literal(""))
        parts.append(cat(digit_class(first, last, base), rest))
    if tail is not None:
        parts.append(tail)
    return alt(*parts)


def _runs(digits: str, start: int = 0):
    """(start, end) of each run of one digit in ``digits[start:]``."""
    i = start
    while i < len(digits):
        j = i
        while j < len(digits) and digits[j] == digits[i]:
            j += 1
        yield i, j
        i = j


def digit_string(digits: str) -> Expr:
    """``digits`` literally, with runs of 8 or more of one digit as counted repeats (bounds like
    5e-324 are hundreds of zeros long)."""
    return cat(*(Repeat(Literal(digits[i]), j - i, j - i) if j - i >= 8 else Literal(digits[i:j])
                 for i, j in _runs(digits)))


def flat_range(lo: int, hi: int, width: int) -> Expr:
    """``fixed_width_range`` in base 10 as one alternation of (literal prefix, digit class, free
    digits): after the common prefix, the strings from ``lo`` up (a larger digit at some place),
    the ones between, and those up to ``hi`` (a smaller digit at some place)."""
    a, b = str(lo).zfill(width), str(hi).zfill(width)
    k = next((i for i in range(width) if a[i] != b[i]), width)
    if k == width:
        return digit_string(a)

    def free(n: int) -> Expr:
        return Repeat(DIGIT, n, n) if n else Literal("")

    def chain(prefix: str, tail: str, up: bool) -> list[Expr]:
        """``prefix`` then the tails at least (``up``) or at most ``tail``, as long as it."""
        last = next((i for i in range(len(tail) - 1, -1, -1) if tail[i] != ("0" if up else "9")), -1)
        parts = []
        for i in range(last + 1):
            d = int(tail[i])
            lo_d, hi_d = (d + 1, 9) if up else (0, d - 1)
            if lo_d <= hi_d:
                parts.append(cat(digit_string(prefix + tail[:i]), digit_class(lo_d, hi_d, 10), free(len(tail) - i - 1)))
        parts.append(cat(digit_string(prefix + tail[:last + 1]), free(len(tail) - last - 1)))
        return parts
    parts = chain(a[:k + 1], a[k + 1:], up=True)
    if int(a[k]) + 1 <= int(b[k]) - 1:
        parts.append(cat(digit_string(a[:k]), digit_class(int(a[k]) + 1, int(b[k]) - 1, 10), free(width - k - 1)))
    parts += chain(b[:k + 1], b[k + 1:], up=False)
    return alt(*parts)


def flat_fraction(lower, upper) -> Expr | None:
    """The non-empty fractions of ``_frac`` for long bounds, flat (one alternation of literal
    prefix, digit class, free digits) rather than a level per digit, as ``flat_range``; the
    places of a run of one digit (the zeros of 1e-300) share one alternative."""
    free, zeros = Repeat(DIGIT, 0, None), Repeat(Literal("0"), 0, None)

    def at_some_place(digits: str, up: bool) -> list[Expr]:
        """Fractions equal to ``digits`` up to some place and larger (``up``) or smaller there."""
        parts = []
        for i, j in _runs(digits):
            d = int(digits[i])
            lo_d, hi_d = (d + 1, 9) if up else (0, d - 1)
            if lo_d <= hi_d:
                parts.append(cat(digit_string(digits[:i]), up_to(digits[i], j - i - 1),
                                 digit_class(lo_d, hi_d, 10), free))
        return parts

    def above(low: str, strict: bool) -> Expr:
        """Tails F (maybe empty) with 0.F above 0.low (``low`` without trailing zeros)."""
        if not low:
            return cat(free, NONZERO, free) if strict else free
        return alt(*at_some_place(low, True),
                   cat(digit_string(low), free, NONZERO, free) if strict else cat(digit_string(low), free))

    def below(high: str, strict: bool, whole: bool = False) -> Expr | None:
        """Tails F with 0.F below 0.high (``high`` without trailing zeros); empty unless ``whole``."""
        if not high:
            return None if strict else zeros
        parts = at_some_place(high, False)
        parts.append(Repeat(Literal("0"), 1 if whole else 0, None))           # shorter: smaller
        parts += [cat(digit_string(high[:i]), up_to(high[i], j - i - 1), zeros)
                  for i, j in _runs(high, 1)]                                # high[:i], i >= 1
        if not strict:
            parts.append(cat(digit_string(high), zeros))
        return alt(*parts)

    if upper is None:                        # (empty bounds are cases of _frac's own)
        return above(lower[0], lower[1])
    if lower is None:
        return below(upper[0], upper[1], whole=True)
    (lo, lo_strict), (hi, hi_strict) = lower, upper
    n = max(len(lo), len(hi))
    a, b = lo.ljust(n, "0"), hi.ljust(n, "0")
    k = next((i for i in range(n) if a[i] != b[i]), n)
    if k == n:                               # the same value: only it, when both ends take it
        return None if lo_strict or hi_strict or not lo else cat(digit_string(lo), zeros)
    parts = []
    if lo and not lo_strict and len(lo) <= k:    # the lower bound itself, written short
        parts.append(cat(digit_string(lo), Repeat(Literal("0"), 0, k - len(lo))))
    elif not lo and not lo_strict and k:
        parts.append(Repeat(Literal("0"), 1, k))
    tail = above(a[k + 1:].rstrip("0"), lo_strict)
    parts.append(cat(digit_string(a[:k + 1]), tail))
    if int(a[k]) + 1 <= int(b[k]) - 1:
        parts.append(cat(digit_string(a[:k]), digit_class(int(a[k]) + 1, int(b[k]) - 1, 10), free))
    tail = below(b[k + 1:].rstrip("0"), hi_strict)
    if tail is not None:
        parts.append(cat(digit_string(b[:k + 1]), tail))
    return alt(*parts)


def up_to(digit: str, n: int) -> Expr:
    """``digit`` 0 to ``n`` times."""
    return Repeat(Literal(digit), 0, n) if n else Literal("")
