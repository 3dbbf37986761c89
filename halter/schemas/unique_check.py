"""``uniqueItems`` checked beside the grammar: a JSON reader that refuses a duplicate item.

No context-free grammar can say "the items of this array differ" when items range over an open
set (strings, numbers, objects), so a JSON-Schema grammar carries this check (a ``TextCheck``, see
``halter.grammar.text_check``). The matchers feed it every byte the grammar accepted; it follows
the JSON structure, knows for each array opened whether the schema requires its items unique (an
``InstanceSchemas`` formula of the array's place in the instance), keeps the items written so far
in canonical form (``1`` equals ``1.0``, object keys unordered, ``true`` is not ``1``) and refuses
the byte that completes a duplicate: a string's closing quote, a container's closing bracket, a
literal's last letter, or the delimiter after a number. It only ever rejects instances the schema
rejects (the formula never claims more than the schema).

Where the check cannot decide (an ``anyOf`` whose branches disagree and could both apply, a
keyword the formula leaves out) the array is not checked, so the grammar plus the check can still
accept an invalid instance there; ``check_is_exact`` tells, from the schema alone, whether that can
happen. A number item can be refused only at its delimiter: if no other digits fit, generation
meets a dead end (the engine reports it as ``NoValidTokenError``).
"""
from __future__ import annotations

import json
import re
from decimal import Decimal
from typing import Any

from halter.errors import SchemaError
from halter.schemas.instance_schemas import TRUE, InstanceSchemas, python_regex, schema_types
from halter.schemas.refs import DEFAULT_BASE, RefIndex

# reader modes
_VALUE, _AFTER, _KEY, _COLON, _STR, _STR_ESC, _KEY_STR, _KEY_ESC, _NUM, _LIT, _END = range(11)
_WS = frozenset(b" \t\n\r")
_NUM_BYTES = frozenset(b"0123456789+-.eE")
_LIT_LEN = {ord("t"): 3, ord("f"): 4, ord("n"): 3}
_IN_STRING = (_STR, _STR_ESC, _KEY_STR, _KEY_ESC)
_ANY_END = b'"]},el \t\n\r'


_NUMBER = re.compile(r"-?(\d+)(?:\.(\d+))?(?:[eE]([+-]?\d+))?")


class _Number(tuple):
    """A JSON number exactly, whatever its exponent: ``(sign, digits, exponent)`` with no leading
    or trailing zeros in ``digits`` (zero is ``(0, "", 0)``), so equal numbers are equal tuples
    (``1``, ``1.0`` and ``10e-1``; ``-0`` and ``0``). ``Decimal`` cannot hold every exponent JSON
    allows (``1E-99999999999999999999`` raises ``InvalidOperation``)."""

    @classmethod
    def parse(cls, text: str) -> "_Number":
        m = _NUMBER.fullmatch(text)
        if m is None:
            raise ValueError(f"not a JSON number: {text[:40]!r}")
        whole, frac, exp = m.group(1), m.group(2) or "", m.group(3)
        digits = (whole + frac).lstrip("0")
        exponent = (int(exp) if exp else 0) - len(frac)
        stripped = digits.rstrip("0")
        exponent += len(digits) - len(stripped)
        if not stripped:
            return cls((0, "", 0))
        return cls((-1 if text.startswith("-") else 1, stripped, exponent))

    def spelled(self) -> str:
        """The plain spelling: integers written out (below 10**30), else ``Decimal``'s normal form."""
        sign, digits, exp = self
        if sign == 0:
            return "0"
        minus = "-" if sign < 0 else ""
        adjusted = exp + len(digits) - 1
        if exp >= 0 and adjusted < 30:
            return minus + digits + "0" * exp
        if exp <= 0 and adjusted >= -6:
            point = len(digits) + exp
            return minus + (digits[:point] + "." + digits[point:] if point > 0 else "0." + "0" * -point + digits)
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{minus}{mantissa}e{'+' if adjusted >= 0 else '-'}{abs(adjusted)}"


def canonical(value: Any) -> tuple:
    """A hashable form of a JSON value under JSON Schema's equality (numbers exactly: ``_Number``)."""
    if isinstance(value, bool):
        return (1, value)
    if value is None:
        return (0,)
    if isinstance(value, _Number):
        return (2, value)
    if isinstance(value, Decimal):
        return (2, _Number.parse(str(value)) if value.is_finite() else value)
    if isinstance(value, str):
        return (3, value)
    if isinstance(value, list):
        return (4, tuple(canonical(v) for v in value))
    return (5, frozenset((k, canonical(v)) for k, v in value.items()))


def _spelled(item: tuple) -> bytes | None:
    """The plain JSON spelling of a canonical scalar item (None for arrays and objects)."""
    kind = item[0]
    if kind == 3:
        return json.dumps(item[1], ensure_ascii=False).encode("utf-8", "surrogatepass")
    if kind == 2:
        return item[1].spelled().encode() if isinstance(item[1], _Number) else None
    if kind == 1:
        return b"true" if item[1] else b"false"
    return b"null" if kind == 0 else None


def _canonical_text(raw: bytes) -> tuple | None:
    try:
        return canonical(json.loads(raw, parse_float=_Number.parse, parse_int=_Number.parse))
    except (ValueError, RecursionError):
        return None


class UniqueItemsCheck:
    """The check for one schema: builds trackers that share the schema's formulas."""

    def __init__(self, schema: Any, draft: str) -> None:
        self.schemas = InstanceSchemas(schema, draft)

    def tracker(self) -> "UniqueItemsTracker":
        return UniqueItemsTracker(self.schemas)


class UniqueItemsTracker:
    """Follows one JSON text byte by byte. Frames on the stack are tuples, replaced when they change:

    object: ``("o", formula, key)``; array: ``("a", formula, unique, seen, item_start, index)``.
    """

    __slots__ = ("_schemas", "_buf", "_mode", "_stack", "_lit", "_mark", "_n_checked")

    def __init__(self, schemas: InstanceSchemas) -> None:
        self._schemas = schemas
        self._buf = bytearray()
        self._mode = _VALUE
        self._stack: list[tuple] = []
        self._lit = 0            # letters of a literal still to come
        self._mark = 0           # where the current key string starts
        self._n_checked = 0      # arrays on the stack that are checked and hold an item

    # -- the TextCheck tracker protocol ---------------------------------------------------------
    def snapshot(self) -> tuple:
        return (len(self._buf), self._mode, tuple(self._stack), self._lit, self._mark, self._n_checked)

    def restore(self, snap: tuple) -> None:
        n, self._mode, stack, self._lit, self._mark, self._n_checked = snap
        del self._buf[n:]
        self._stack = list(stack)

    def copy(self) -> "UniqueItemsTracker":
        t = UniqueItemsTracker(self._schemas)
        t._buf = bytearray(self._buf)
        t.restore(self.snapshot())
        return t

    def trigger_bytes(self) -> bytes | None:
        """Bytes one of which any rejected input must contain; None while nothing can be rejected."""
        if not self._n_checked:
            return None
        mode = self._mode
        if mode in _IN_STRING:
            if mode == _STR and self._n_checked == 1 and not self._may_repeat_string():
                return None
            return b'"'
        if mode == _NUM:
            return b",]} \t\n\r"
        if mode == _LIT:
            return b"el"
        return _ANY_END

    def _may_repeat_string(self) -> bool:
        """Inside a string item of the one checked array: could closing it repeat an item?"""
        top = self._stack[-1]
        if top[0] != "a" or not top[3]:
            return True                   # the checked array is further out
        try:
            partial = json.loads(self._buf[top[4]:] + b'"')
        except ValueError:
            return True                   # in the middle of an escape or a UTF-8 character
        return any(item[0] == 3 and item[1].startswith(partial) for item in top[3])

    def risky_prefixes(self) -> list[bytes]:
        """Texts whose beginnings, written now, keep the current scalar item a beginning of an earlier
        item (in its plain JSON spelling): when the grammar then allows no other ending, the item
        cannot be completed (``["US", "US`` under ``^[A-Z]{2}$``; ``[5, 5`` under ``maximum: 9``)."""
        if not self._n_checked:
            return []
        top = self._stack[-1]
        if top[0] != "a" or not top[3]:
            return []
        mode = self._mode
        if mode == _VALUE:
            partial = b""
        elif mode in (_STR, _NUM, _LIT):
            partial = bytes(self._buf[top[4]:])
        else:
            return []
        out = []
        for item in top[3]:
            spelled = _spelled(item)
            if spelled is not None and len(spelled) > len(partial) and spelled.startswith(partial):
                rest = spelled[len(partial):]
                out.extend((rest, b" " + rest) if mode == _VALUE else (rest,))
        return out

    def mark(self) -> tuple:
        """Where the current item stands: ``settled(mark)`` is True once it is complete."""
        return (len(self._stack) - 1, self._stack[-1][5] if self._stack else 0)

    def way_out_bytes(self) -> bytes:
        """Closing a string is the usual way to finish an item."""
        return b'"'

    def settled(self, mark: tuple) -> bool:
        depth, index = mark
        return len(self._stack) <= depth or self._stack[depth][-1] != index

    def feed(self, data: bytes) -> bool:
        """Read ``data``; False (and nothing changed) if it completes a duplicate item."""
        snap = self.snapshot()
        buf = self._buf
        for b in data:
            buf.append(b)
            if not self._step(b, len(buf) - 1):
                self.restore(snap)
                return False
        return True

    # -- the reader -----------------------------------------------------------------------------
    def _step(self, b: int, pos: int) -> bool:
        mode = self._mode
        if mode == _STR:
            if b == 0x22:
                return self._end_value(pos + 1)
            if b == 0x5C:
                self._mode = _STR_ESC
            return True
        if mode == _STR_ESC:
            self._mode = _STR
            return True
        if mode == _KEY_STR:
            if b == 0x22:
                self._set_key(pos + 1)
            elif b == 0x5C:
                self._mode = _KEY_ESC
            return True
        if mode == _KEY_ESC:
            self._mode = _KEY_STR
            return True
        if mode == _NUM:
            if b in _NUM_BYTES:
                return True
            if not self._end_value(pos):
                return False
            mode = self._mode
        if mode == _LIT:
            self._lit -= 1
            return self._end_value(pos + 1) if self._lit == 0 else True
        if b in _WS:
            return True
        if b == 0x5D or b == 0x7D:                           # ] }
            frame = self._stack.pop()
            if frame[0] == "a" and frame[2] and frame[3]:
                self._n_checked -= 1
            return self._end_value(pos + 1)
        if b == 0x2C:                                        # ,
            self._mode = _VALUE if self._stack[-1][0] == "a" else _KEY
            return True
        if mode == _KEY:
            if b == 0x22:
                self._mode, self._mark = _KEY_STR, pos
            return True
        if mode == _COLON:
            if b == 0x3A:
                self._mode = _VALUE
            return True
        if mode == _VALUE:
            self._begin_value(b, pos)
        return True

    def _begin_value(self, b: int, pos: int) -> None:
        stack = self._stack
        top = stack[-1] if stack else None
        if top is not None and top[0] == "a" and top[2]:
            stack[-1] = top[:4] + (pos,) + top[5:]
        if b == 0x22:
            self._mode = _STR
        elif b in _LIT_LEN:
            self._mode, self._lit = _LIT, _LIT_LEN[b]
        elif b == 0x7B or b == 0x5B:                         # { [
            sch = self._schemas
            if top is None:
                f = sch.root
            elif top[0] == "o":
                f = sch.child(top[1], top[2]) if isinstance(top[2], str) else TRUE
            else:
                f = sch.child(top[1], top[5])
            if b == 0x7B:
                stack.append(("o", sch.expand(f, "object"), None))
                self._mode = _KEY
            else:
                f = sch.expand(f, "array")
                stack.append(("a", f, sch.requires(f, "uniqueItems"), frozenset(), -1, 0))
                self._mode = _VALUE
        else:
            self._mode = _NUM

    def _set_key(self, end: int) -> None:
        try:
            key = json.loads(bytes(self._buf[self._mark:end]))
        except ValueError:
            key = None
        top = self._stack[-1]
        self._stack[-1] = (top[0], top[1], key)
        self._mode = _COLON

    def _end_value(self, end: int) -> bool:
        stack = self._stack
        if not stack:
            self._mode = _END
            return True
        self._mode = _AFTER
        top = stack[-1]
        if top[0] == "o":
            return True
        kind, f, unique, seen, start, index = top
        if unique:
            item = _canonical_text(bytes(self._buf[start:end]))
            if item is not None:
                if item in seen:
                    return False
                if not seen:
                    self._n_checked += 1
                seen = seen | {item}
        stack[-1] = (kind, f, unique, seen, -1, index + 1)
        return True


# -- can the check miss an invalid instance? -----------------------------------------------------
_AND_KEYS = ("additionalProperties", "items", "additionalItems")
_IGNORED = ("not", "if", "then", "else", "contains", "propertyNames", "unevaluatedItems",
            "unevaluatedProperties", "dependentSchemas", "dependencies", "$dynamicRef", "$recursiveRef")


def check_is_exact(schema: Any, draft: str) -> bool:
    """True when, for every array the schema requires unique, the tracker knows it does.

    That holds when each ``uniqueItems: true`` is reached from the root only through keywords the
    formula follows, and every ``anyOf``/``oneOf`` on the way has branches of pairwise disjoint
    ``type``s (so the value's own type picks the one branch, as in ``Optional[set[str]]``).
    """
    index = RefIndex(schema, draft)
    seen: set = set()
    work = [(schema, DEFAULT_BASE, True)]
    while work:
        s, base, ok = work.pop()
        if not isinstance(s, dict):
            continue
        key = (id(s), str(base), ok)
        if key in seen:
            continue
        seen.add(key)
        if s.get("uniqueItems") is True and not ok:
            return False
        if isinstance(s.get("$id"), str) and not (draft in ("draft4", "draft6", "draft7") and "$ref" in s):
            base = index.enter_id(base, s["$id"], s)
        subs: list[tuple[Any, bool]] = []
        if isinstance(s.get("$ref"), str):
            try:
                t, tbase, _ = index.resolve(s["$ref"], base, "#")
                work.append((t, tbase, ok))
            except SchemaError:
                return False
        patterns_ok = True
        if isinstance(s.get("patternProperties"), dict):
            for p, sub in s["patternProperties"].items():
                good = python_regex(p) is not None
                patterns_ok = patterns_ok and good
                subs.append((sub, good))
        for kw in ("properties",):
            if isinstance(s.get(kw), dict):
                subs.extend((sub, True) for sub in s[kw].values())
        for kw in _AND_KEYS:
            if kw in s:
                v = s[kw]
                good = patterns_ok or kw != "additionalProperties"
                subs.extend((x, good) for x in (v if isinstance(v, list) else [v]))
        for kw in ("prefixItems", "allOf"):
            if isinstance(s.get(kw), list):
                subs.extend((x, True) for x in s[kw])
        for kw in ("anyOf", "oneOf"):
            if isinstance(s.get(kw), list):
                disjoint = _disjoint_types(s[kw], index, base)
                subs.extend((x, disjoint) for x in s[kw])
        for kw in _IGNORED:
            v = s.get(kw)
            if isinstance(v, dict):
                subs.extend((x, False) for x in (v.values() if kw in ("dependentSchemas", "dependencies")
                                                 else [v]))
        work.extend((x, base, ok and good) for x, good in subs)
    return True


def _disjoint_types(branches: list, index: RefIndex, base: str) -> bool:
    seen: set[str] = set()
    for b in branches:
        types = _branch_types(b, index, base)
        if types is None or types & seen:
            return False
        seen |= types
    return True


def _branch_types(s: Any, index: RefIndex, base: str, depth: int = 0) -> set[str] | None:
    types = schema_types(s)
    if types is not None or not isinstance(s, dict) or depth > 8:
        return types
    if isinstance(s.get("$ref"), str):
        try:
            t, tbase, _ = index.resolve(s["$ref"], base, "#")
        except SchemaError:
            return None
        return _branch_types(t, index, tbase, depth + 1)
    return None
