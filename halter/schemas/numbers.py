"""Numeric bounds as grammars: exact digit-range grammars for integers and decimal numbers.

``integer_range(lo, hi)`` matches exactly the JSON integers in ``lo..hi`` (either end open), also
spelled with a zero fraction (``3.0``) and ``-0``. ``number_range`` matches exactly the numbers
between two decimal bounds, inclusive or exclusive, written as decimals (``0.00001``) or in the
exponent notation serializers write, one nonzero digit before the point (``1e-05``, ``2.5E+16``,
``0e0`` for zero): that form puts a number's order of magnitude in its exponent, so a bound is an
exponent range plus digit comparisons at the bound's own exponent. Other exponent spellings
(``12.5e-3``, ``0.5e1``) of bounded numbers are refused (documented departure), except when the
only bound is zero (``minimum: 0``, ``exclusiveMaximum: 0``...: the sign alone decides).
"""
from __future__ import annotations

import math
from decimal import Decimal

from halter.grammar.ast import CharClass, Expr, Literal, Repeat, alt
from halter.schemas.digits import (DIGIT, FLAT_WIDTH, NONZERO, cat, digit_class, fixed_width_range,
                                   flat_fraction)
from halter.schemas.json_text import finite_magnitude

ZERO_FRACTION = Repeat(cat(Literal("."), Repeat(Literal("0"), 1, None)), 0, 1)
_FRACTION = Repeat(cat(Literal("."), Repeat(DIGIT, 1, None)), 0, 1)
_MANTISSA = cat(alt(Literal("0"), cat(NONZERO, Repeat(DIGIT, 0, None))), _FRACTION)
_NONZERO_MANTISSA = alt(cat(Literal("0."), Repeat(Literal("0"), 0, None), NONZERO, Repeat(DIGIT, 0, None)),
                        cat(NONZERO, Repeat(DIGIT, 0, None), _FRACTION))
E_MARK = CharClass(((0x45, 0x45), (0x65, 0x65)))                 # e or E
EXPONENT = cat(E_MARK, Repeat(CharClass(((0x2B, 0x2B), (0x2D, 0x2D))), 0, 1),
               Repeat(DIGIT, 1, None))


def uint_range(lo: int, hi: int | None) -> Expr | None:
    """Unsigned decimal integers without leading zeros whose value is in lo..hi (hi None: open)."""
    lo = max(lo, 0)
    if hi is not None and hi < lo:
        return None
    parts = []
    w_lo = len(str(lo))
    w_hi = len(str(hi)) if hi is not None else w_lo
    for w in sorted({w_lo, w_hi}):
        a = max(lo, 10 ** (w - 1) if w > 1 else 0)
        b = 10 ** w - 1 if hi is None else min(hi, 10 ** w - 1)
        if a <= b:
            parts.append(fixed_width_range(a, b, w))
    if w_hi - w_lo > 1:    # every number of a width in between
        parts.append(cat(NONZERO, Repeat(DIGIT, w_lo, w_hi - 2)))
    if hi is None:     # any longer number
        parts.append(cat(NONZERO, Repeat(DIGIT, w_lo, None)))
    return alt(*parts)


def integer_range(lo: int | None, hi: int | None, fraction: bool = True) -> Expr | None:
    """JSON texts of integers in lo..hi (None = unbounded); None if the range is empty.

    ``fraction=False`` leaves out the zero-fraction spellings (``3.0``)."""
    if lo is not None and hi is not None and lo > hi:
        return None
    parts = []
    if hi is None or hi >= 0:
        pos = uint_range(max(lo or 0, 0), hi)
        if pos is not None:
            parts.append(pos)
    if lo is None or lo < 0:   # negative values: "-" then the magnitude in max(1,-hi)..-lo
        mag_lo = 1 if hi is None or hi >= 0 else -hi
        neg = uint_range(mag_lo, None if lo is None else -lo)
        if neg is not None:
            parts.append(cat(Literal("-"), neg))
    if (lo is None or lo <= 0) and (hi is None or hi >= 0):
        parts.append(Literal("-0"))
    if not parts:
        return None
    return cat(alt(*parts), ZERO_FRACTION) if fraction else alt(*parts)


# ---------------------------------------------------------------------------------------------
# decimals

def _frac(lower, upper) -> tuple[bool, Expr | None]:
    """Fraction digit strings F with ``0.F`` between the bounds.

    ``lower``/``upper`` are ``None`` (no bound) or ``(digits, strict)``. Returns whether the empty
    fraction qualifies and an expression for the non-empty ones (None: no non-empty one).
    """
    if lower is not None and lower[0] == "" and not lower[1]:
        lower = None
    # special cases that would otherwise recurse forever
    if lower is None and upper is None:
        return True, Repeat(DIGIT, 1, None)
    if upper is not None and upper[0] == "":
        if upper[1] or lower is not None:   # < 0 impossible; > 0 and <= 0 impossible
            return (False, None)
        return True, Repeat(Literal("0"), 1, None)
    if upper is None and lower == ("", True):
        return False, cat(Repeat(Literal("0"), 0, None), CharClass(((0x31, 0x39),)), Repeat(DIGIT, 0, None))
    empty_ok = _empty_ok(lower, upper)
    if max(len(b[0]) for b in (lower, upper) if b is not None) > FLAT_WIDTH:
        return empty_ok, flat_fraction(lower, upper)
    groups: dict = {}
    for d in range(10):
        nl = _step(lower, d, is_lower=True)
        nu = _step(upper, d, is_lower=False)
        if nl is False or nu is False:
            continue
        groups.setdefault((nl, nu), []).append(d)
    options = []
    for (nl, nu), digits in groups.items():
        rest_empty, rest = _frac(nl, nu)
        head = _digits(digits)
        tail = []
        if rest_empty:
            tail.append(Literal(""))
        if rest is not None:
            tail.append(rest)
        if tail:
            options.append(cat(head, alt(*tail)) if len(tail) > 1 else cat(head, tail[0]))
    return empty_ok, (alt(*options) if options else None)


def _digits(ds: list[int]) -> Expr:
    if ds == list(range(ds[0], ds[-1] + 1)):
        return digit_class(ds[0], ds[-1], 10)
    return alt(*(digit_class(d, d, 10) for d in ds))


def _empty_ok(lower, upper) -> bool:
    """Does the empty fraction (value 0) satisfy the bounds?"""
    if lower is not None:
        digits, strict = lower
        if digits.strip("0") or strict:
            return False
    if upper is not None:
        digits, strict = upper
        if strict and not digits.strip("0"):
            return False
    return True


def _step(bound, d: int, is_lower: bool):
    """The bound on the rest after first digit ``d``: None (satisfied), False (violated), or a bound."""
    if bound is None:
        return None
    digits, strict = bound
    b0 = int(digits[0]) if digits else 0
    if d == b0:
        return (digits[1:], strict)
    if is_lower:
        return None if d > b0 else False
    return None if d < b0 else False


def _split(x: Decimal) -> tuple[int, str]:
    """A non-negative decimal as (integer part, fraction digits without trailing zeros)."""
    whole = int(x)
    frac = format(x - whole, "f")
    digits = frac.split(".")[1] if "." in frac else ""
    return whole, digits.rstrip("0")


def _nonneg_range(lo: Decimal | None, lo_strict: bool, hi: Decimal | None, hi_strict: bool) -> Expr | None:
    """Non-negative decimal texts ``int(.frac)?`` between the bounds (lo >= 0 or None)."""
    lo = lo if lo is not None else Decimal(0)
    li, lf = _split(lo)
    opts = []
    if hi is None:
        hi_i, hf = None, None
    else:
        hi_i, hf = _split(hi)
    if hi_i is not None and hi_i == li:
        empty, rest = _frac((lf, lo_strict), (hf, hi_strict))
        opts.append(_with_frac(Literal(str(li)), empty, rest))
    else:
        empty, rest = _frac((lf, lo_strict), None)
        opts.append(_with_frac(Literal(str(li)), empty, rest))
        middle = uint_range(li + 1, None if hi_i is None else hi_i - 1)
        if middle is not None:
            opts.append(cat(middle, Repeat(cat(Literal("."), Repeat(DIGIT, 1, None)), 0, 1)))
        if hi_i is not None:
            empty, rest = _frac(None, (hf, hi_strict))
            opts.append(_with_frac(Literal(str(hi_i)), empty, rest))
    opts = [o for o in opts if o is not None]
    return alt(*opts) if opts else None


def _with_frac(whole: Expr, empty: bool, rest: Expr | None) -> Expr | None:
    if rest is None:
        return whole if empty else None
    frac = cat(Literal("."), rest)
    return cat(whole, Repeat(frac, 0, 1)) if empty else cat(whole, frac)


def _normal(x: Decimal) -> tuple[str, int]:
    """A positive decimal as ``(S, P)``, ``x = 0.S * 10**P``: S its significant digits, no leading
    or trailing zero."""
    _, digits, exp = x.as_tuple()                 # (not ``normalize``: it rounds to the context's 28 digits)
    text = "".join(map(str, digits)).lstrip("0")
    return text.rstrip("0"), len(text) + exp


def _significand(lower, upper) -> Expr | None:
    """Texts ``d`` or ``d.F`` (``d`` 1-9) whose digits S = dF have 0.S between the bounds
    (``(digits, strict)`` or None, as in ``_frac``)."""
    groups: dict = {}
    for d in range(1, 10):
        nl, nu = _step(lower, d, is_lower=True), _step(upper, d, is_lower=False)
        if nl is not False and nu is not False:
            groups.setdefault((nl, nu), []).append(d)
    options = []
    for (nl, nu), ds in groups.items():
        empty, rest = _frac(nl, nu)
        option = _with_frac(_digits(ds), empty, rest)
        if option is not None:
            options.append(option)
    return alt(*options) if options else None


def _exponent(x_lo: int | None, x_hi: int | None) -> Expr | None:
    """``e``/``E``, then the exponents in x_lo..x_hi (None = unbounded) with any sign and leading zeros."""
    if x_lo is not None and x_hi is not None and x_lo > x_hi:
        return None
    zeros = Repeat(Literal("0"), 0, None)
    parts = []
    if x_hi is None or x_hi >= 0:
        parts.append(cat(Repeat(Literal("+"), 0, 1), zeros, uint_range(max(x_lo or 0, 0), x_hi)))
    if x_lo is None or x_lo < 0:
        mag = uint_range(1 if x_hi is None or x_hi >= 0 else -x_hi, None if x_lo is None else -x_lo)
        parts.append(cat(Literal("-"), zeros, mag))
    if (x_lo is None or x_lo <= 0) and (x_hi is None or x_hi >= 0):
        parts.append(cat(Literal("-"), Repeat(Literal("0"), 1, None)))       # -0, -00: zero
    return cat(E_MARK, alt(*parts))


def _scientific(lo: Decimal | None, lo_strict: bool, hi: Decimal | None, hi_strict: bool) -> Expr | None:
    """Positive numbers between the bounds (lo >= 0 or None; hi None: open) in normalized exponent
    notation, ``d(.F)?e[+-]?X``: the value is 0.S * 10**(X + 1) with S = dF, so it is below a bound
    0.B * 10**P when X + 1 < P, above it when X + 1 > P, and at X + 1 == P the digits decide."""
    if hi is not None and hi <= 0:
        return None
    low = _normal(lo) if lo is not None and lo > 0 else None
    high = _normal(hi) if hi is not None else None
    if low is not None and high is not None and low[1] == high[1]:      # one order of magnitude
        sig = _significand((low[0], lo_strict), (high[0], hi_strict))
        exp = _exponent(low[1] - 1, low[1] - 1)
        return cat(sig, exp) if sig is not None else None
    parts = []
    inner = _exponent(None if low is None else low[1], None if high is None else high[1] - 2)
    if inner is not None:
        parts.append(cat(_significand(None, None), inner))
    for bound, strict, is_lower in ((low, lo_strict, True), (high, hi_strict, False)):
        if bound is not None:
            digits = (bound[0], strict)
            sig = _significand(digits, None) if is_lower else _significand(None, digits)
            if sig is not None:
                parts.append(cat(sig, _exponent(bound[1] - 1, bound[1] - 1)))
    return alt(*parts) if parts else None


def number_range(lo: Decimal | None, lo_strict: bool, hi: Decimal | None, hi_strict: bool,
                 finite: bool = False, exponents: bool = True) -> Expr | None:
    """JSON number texts between two decimal bounds (None = unbounded); None if empty.

    ``exponents``: also the normalized exponent spellings (``1e-05``; see the module docstring).

    ``finite``: bounds as Pydantic checks them (``JsonText.finite_numbers``; not with
    ``multipleOf``, whose automata read short decimal texts and would grow past their limit):
    texts whose double meets the bounds (``_double_bounds``), below 10^308 in magnitude, and
    with a lone zero bound the exponent spellings of ``finite_magnitude`` (a strict one keeps
    out what rounds to zero)."""
    if lo is not None and hi is not None and (lo > hi or (lo == hi and (lo_strict or hi_strict))):
        return None
    if finite and ((hi is None and lo == 0) or (lo is None and hi == 0)):
        zero = cat(Literal("-0" if lo == 0 else "0"), ZERO_FRACTION, Repeat(EXPONENT, 0, 1))
        if lo == 0:
            return finite_magnitude(True) if lo_strict else alt(finite_magnitude(), zero)
        negative = cat(Literal("-"), finite_magnitude(hi_strict))
        return negative if hi_strict else alt(negative, zero)
    if finite:
        cap = Decimal(10) ** 308
        if hi is None or hi >= cap:
            hi, hi_strict = cap, True
        if lo is None or lo <= -cap:
            lo, lo_strict = -cap, True
        if lo > hi or (lo == hi and (lo_strict or hi_strict)):
            return None
        lo, lo_strict, hi, hi_strict = _double_bounds(lo, lo_strict, hi, hi_strict)
        if lo > hi:
            return None
    if (hi is None and lo == 0) or (lo is None and hi == 0):     # sign-only bound: exponents are safe
        if lo == 0:
            mantissa = _NONZERO_MANTISSA if lo_strict else alt(_MANTISSA, cat(Literal("-0"), ZERO_FRACTION))
        else:
            negative = cat(Literal("-"), _NONZERO_MANTISSA if hi_strict else _MANTISSA)
            mantissa = negative if hi_strict else alt(negative, cat(Literal("0"), ZERO_FRACTION))
        return cat(mantissa, Repeat(EXPONENT, 0, 1))
    parts = []
    if hi is None or hi > 0 or (hi == 0 and not hi_strict):
        p_lo, p_strict = (lo, lo_strict) if lo is not None and lo >= 0 else (None, False)
        pos = _nonneg_range(p_lo, p_strict, hi, hi_strict)
        if pos is not None:
            parts.append(pos)
        sci = _scientific(p_lo, p_strict, hi, hi_strict) if exponents else None
        if sci is not None:
            parts.append(sci)
    zero_in = ((lo is None or lo < 0 or (lo == 0 and not lo_strict))
               and (hi is None or hi > 0 or (hi == 0 and not hi_strict)))
    if lo is None or lo < 0:
        # "-" y with y in [max(0, -hi), -lo]; y = 0 ("-0") only when 0 is in range
        if hi is None or hi > 0 or (hi == 0 and not hi_strict):
            n_lo, n_strict = Decimal(0), False
        else:
            n_lo, n_strict = -hi, hi_strict
        neg = _nonneg_range(n_lo, n_strict, None if lo is None else -lo, lo_strict)
        if neg is not None:
            parts.append(cat(Literal("-"), neg))
        sci = _scientific(n_lo, n_strict, None if lo is None else -lo, lo_strict) if exponents else None
        if sci is not None:
            parts.append(cat(Literal("-"), sci))
    elif lo == 0 and not lo_strict:
        parts.append(cat(Literal("-0"), ZERO_FRACTION))     # -0 is 0
    if exponents and zero_in:
        parts.append(cat(alt(Literal("0"), Literal("-0")), ZERO_FRACTION, EXPONENT))    # 0e0, -0.0E+5
    return alt(*parts) if parts else None


def _double_bounds(lo: Decimal, lo_strict: bool, hi: Decimal, hi_strict: bool) -> tuple[Decimal, bool, Decimal, bool]:
    """Bounds on a number's text that keep the double it parses to within the given bounds.

    A text near a bound can round onto it (``0.99999999999999999`` is 1.0, not below 1). The
    doubles allowed run from the least one meeting the lower bound to the greatest meeting the upper
    one; texts between their shortest spellings (``repr``) parse into that run, as parsing rounds
    monotonically. So every ``repr`` of an allowed double is accepted, and only longer spellings
    within half a step of an end are refused."""
    def nearest_double(x: Decimal, up: bool, strict: bool) -> Decimal:
        f = float(x)
        d = Decimal(f)
        if up and (d < x or (strict and d == x)):
            f = math.nextafter(f, math.inf)
        elif not up and (d > x or (strict and d == x)):
            f = math.nextafter(f, -math.inf)
        return Decimal(repr(f))
    return nearest_double(lo, True, lo_strict), False, nearest_double(hi, False, hi_strict), False


def integer_bounds(schema: dict) -> tuple[int | None, int | None]:
    """The integer interval allowed by minimum/maximum/exclusive* (draft 4 booleans included)."""
    lo, hi = None, None
    mn, mx = schema.get("minimum"), schema.get("maximum")
    emn, emx = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
    if _num(mn):
        lo = math.floor(mn) + 1 if emn is True and float(mn).is_integer() else math.ceil(mn)
    if _num(mx):
        hi = math.ceil(mx) - 1 if emx is True and float(mx).is_integer() else math.floor(mx)
    if _num(emn):
        v = math.floor(emn) + 1
        lo = v if lo is None else max(lo, v)
    if _num(emx):
        v = math.ceil(emx) - 1
        hi = v if hi is None else min(hi, v)
    return lo, hi


def decimal_bounds(schema: dict, exact: bool = False) -> tuple[Decimal | None, bool, Decimal | None, bool]:
    """(lo, lo_strict, hi, hi_strict) for a number schema, tightest bound winning.

    A bound means the decimal number its JSON text spells (``0.1`` is one tenth), or with ``exact``
    the double Pydantic compares with (it holds bounds as floats): 0.1000000000000000055... for
    ``gt=0.1``, and 1e30 as a double (1000000000000000019884624838656) for ``le=10**30``."""
    lo, ls, hi, hs = None, False, None, False
    def tighten_lo(v, strict):
        nonlocal lo, ls
        v = _bound_value(v, exact)
        if lo is None or v > lo or (v == lo and strict):
            lo, ls = v, strict
    def tighten_hi(v, strict):
        nonlocal hi, hs
        v = _bound_value(v, exact)
        if hi is None or v < hi or (v == hi and strict):
            hi, hs = v, strict
    if _num(schema.get("minimum")):
        tighten_lo(schema["minimum"], schema.get("exclusiveMinimum") is True)
    if _num(schema.get("maximum")):
        tighten_hi(schema["maximum"], schema.get("exclusiveMaximum") is True)
    if _num(schema.get("exclusiveMinimum")):
        tighten_lo(schema["exclusiveMinimum"], True)
    if _num(schema.get("exclusiveMaximum")):
        tighten_hi(schema["exclusiveMaximum"], True)
    return lo, ls, hi, hs


def _bound_value(v: int | float, exact: bool) -> Decimal:
    if not exact:
        return Decimal(str(v))
    try:
        return Decimal(float(v))
    except OverflowError:            # an int past any double: kept whole, beyond every number
        return Decimal(v)


def _num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and (isinstance(v, int) or math.isfinite(v))
