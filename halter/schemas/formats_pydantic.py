"""String formats as Pydantic (v2) parses them, for grammars whose output Pydantic validates.

Pydantic writes formats of its own into the schemas it makes (``ipvanyaddress``, ``ipv4network``,
``base64``, ...), which JSON Schema treats as annotations, and it parses dates and times into
Python's ``datetime``, which holds neither year 0 nor leap seconds. ``PYDANTIC_FORMATS`` is
``FORMATS`` with those dates and times and ``timedelta``'s durations (a sign, years of 365 days
in any combination, a fraction of a second), plus a regex for each of Pydantic's own formats and
for what halter's schema generator writes where the schema loses the type (``x-halter-*``: plain
``datetime``/``time`` with or without an offset, naive ones, http URLs). Each is a
subset of what Pydantic accepts (every string it matches validates), as wide as a short regex
allows: IPv4 networks are exact in CIDR form (host bits zero), IPv6 networks only in the
``group:...::/prefix`` form whose written groups cover the prefix, URLs only with a host
(``_url_after_scheme``), e-mail addresses in ASCII within ``email-validator``'s rules (``_email``).
"""
from __future__ import annotations

from halter.schemas.format_datetime import (PY_DATE, PY_DATE_TIME, PY_DATE_TIME_ANY, PY_DURATION, PY_TIME,
                                            PY_TIME_ANY, PY_TIME_NAIVE)
from halter.schemas.formats import FORMATS, IPV4, IPV6, uri_parts

_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"


def _number_alternatives(values) -> str:
    """A regex matching exactly the decimal spellings (no leading zeros) of ``values``."""
    return "(?:" + "|".join(str(v) for v in sorted(set(values), reverse=True)) + ")"


def _ipv4_network() -> str:
    """``a.b.c.d/p`` with the host bits (the last 32 - p) all zero, or a bare address (= /32)."""
    forms = [IPV4]
    for p in range(33):
        whole, part = divmod(p, 8)
        octets = [_OCTET] * whole
        if whole < 4:
            step = 1 << (8 - part)
            octets.append(_number_alternatives(range(0, 256, step)) if part else "0")
            octets += ["0"] * (3 - whole)
        forms.append(r"\.".join(octets) + f"/{p}")
    return "(?:" + "|".join(forms) + ")"


def _ipv6_network() -> str:
    """A bare address (= /128), ``addr/128``, ``::/p`` and ``g1:...:gk::/p`` for 16k <= p <= 128."""
    h16 = "[0-9A-Fa-f]{1,4}"
    forms = [rf"{IPV6}(?:/128)?", "::/" + _number_alternatives(range(129))]
    for k in range(1, 8):
        forms.append(rf"(?:{h16}:){{{k}}}:/" + _number_alternatives(range(16 * k, 129)))
    return "(?:" + "|".join(forms) + ")"


def _url_after_scheme(bounded: bool = False) -> str:
    """``://`` and the rest of a URL with a host that the WHATWG URL parser (Pydantic's) takes.

    The host is a name, an IPv4 address or a bracketed IPv6 address. Names keep to labels of
    ``[A-Za-z0-9_-]`` that do not start with ``xn--`` (the parser decodes those as punycode and
    refuses most), the last one starting with a letter (a last label that looks like a number
    makes the parser read the host as an IPv4 address); ports are 0-65535. RFC 3986 URIs without
    an authority (``mailto:``, ``urn:``) are left out: after ``http:`` the parser wants a host.
    ``bounded`` caps every part (8 labels of 63, 10 path segments of 30, query 100, fragment
    50; escapes count 3) so that a whole URL fits ``HttpUrl``'s 2,083, and leaves out ``user@``
    (rare in http URLs, and its cap alone would cost a third of the automaton's ~1,200 states).
    """
    part = uri_parts()

    def upto(n: int) -> str:
        return f"{{0,{n}}}" if bounded else "*"
    lc = "[A-Za-z0-9_-]"
    not_xn = [f"[Xx](?:[A-MO-Za-mo-z0-9_-]{lc}{upto(61)})?", f"[Xx][Nn](?:[A-Za-z0-9_]{lc}{upto(60)})?",
              f"[Xx][Nn]-(?:[A-Za-z0-9_]{lc}{upto(59)})?"]
    label = "(?:" + "|".join([f"[A-WYZa-wyz0-9]{lc}{upto(62)}", *not_xn]) + ")"
    last = "(?:" + "|".join([f"[A-WYZa-wyz]{lc}{upto(62)}", *not_xn]) + ")"
    host = rf"(?:{IPV4}|\[{IPV6}\]|(?:{label}\.){upto(7)}{last})"
    port = "(?:6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3}|0)"
    pchar, qchar = part["pchar"], f"(?:{part['pchar']}|[/?])"
    user = "" if bounded else f"(?:{part['userchar']}*@)?"
    path = f"(?:/{pchar}{upto(30)}){upto(10)}"
    return f"://{user}{host}(?::{port})?{path}(?:\\?{qchar}{upto(100)})?(?:#{qchar}{upto(50)})?"


def _letters_except(words: list[str], lo: int, hi: int) -> str:
    """ASCII letters, ``lo`` to ``hi`` of them, spelling none of ``words`` (any case), as a regex."""
    def rest(n_min: int, n_max: int) -> str:
        return f"[A-Za-z]{{{max(n_min, 0)},{n_max}}}" if n_max > 0 else ""

    def below(prefix: str, depth: int) -> str:
        nexts = sorted({w[depth] for w in words if w.startswith(prefix) and len(w) > depth})
        alts = [""] if depth >= lo and prefix not in words else []
        if depth < hi:
            others = "".join(c for c in "abcdefghijklmnopqrstuvwxyz" if c not in nexts)
            if others:
                alts.append(f"[{others}{others.upper()}]" + rest(lo - depth - 1, hi - depth - 1))
            alts += [f"[{c}{c.upper()}]" + below(prefix + c, depth + 1) for c in nexts]
        return "(?:" + "|".join(alts) + ")"
    return below("", 0)


_ATEXT = "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]"
"""A character of an e-mail atom (RFC 5322 ``atext``, ASCII)."""


def _email() -> str:
    """Addresses the ``email-validator`` package (``EmailStr``) takes, in ASCII: a dot-atom local
    part of at most two atoms (up to 40 characters); then 1-4 labels of up to 39 letters and
    digits with single inner hyphens (so never ``xn--``) and a last label of 2-40 letters that is
    not a special-use name (``.local``, ``.test``...): the whole stays under 254 characters."""
    local = f"{_ATEXT}{{1,20}}(?:\\.{_ATEXT}{{1,19}})?"
    label = "[A-Za-z0-9](?:-?[A-Za-z0-9]){0,19}"          # no "--": so never an xn-- label
    top = _letters_except(["arpa", "invalid", "local", "localhost", "onion", "test"], 2, 40)
    return f"{local}@(?:{label}\\.){{1,4}}{top}"


_URL_REST = _url_after_scheme()
_HTTP_URL_REST = _url_after_scheme(bounded=True)
_EMAIL = _email()
_IPV4_INTERFACE = rf"{IPV4}(?:/{_number_alternatives(range(33))})?"
_IPV6_INTERFACE = rf"{IPV6}(?:/{_number_alternatives(range(129))})?"
_IPV4_NETWORK = _ipv4_network()
_IPV6_NETWORK = _ipv6_network()
_B64 = "[A-Za-z0-9+/]"

PYDANTIC_FORMATS: dict[str, str] = {
    **FORMATS,
    "date": PY_DATE, "time": PY_TIME, "date-time": PY_DATE_TIME, "duration": PY_DURATION,
    "uri": uri_parts()["scheme"] + _URL_REST,
    # formats of halter's own, written by pytypes.py where Pydantic's JSON Schema loses the type
    "x-halter-http-url": "[Hh][Tt][Tt][Pp][Ss]?" + _HTTP_URL_REST,
    "x-halter-https-url": "[Hh][Tt][Tt][Pp][Ss]" + _HTTP_URL_REST,
    "x-halter-naive-date-time": PY_DATE + "[Tt]" + PY_TIME_NAIVE,
    "x-halter-date-time": PY_DATE_TIME_ANY,              # a plain datetime: offset or not
    "x-halter-time": PY_TIME_ANY, "x-halter-naive-time": PY_TIME_NAIVE,
    "ipvanyaddress": f"(?:{IPV4}|{IPV6})",
    "ipv4interface": _IPV4_INTERFACE, "ipv6interface": _IPV6_INTERFACE,
    "ipvanyinterface": f"(?:{_IPV4_INTERFACE}|{_IPV6_INTERFACE})",
    "ipv4network": _IPV4_NETWORK, "ipv6network": _IPV6_NETWORK,
    "ipvanynetwork": f"(?:{_IPV4_NETWORK}|{_IPV6_NETWORK})",
    "base64": rf"(?:{_B64}{{4}})*(?:{_B64}{{2}}==|{_B64}{{3}}=)?",
    "email": _EMAIL,
    # NameEmail: an address, or a display name (atoms and spaces, no dots) then <address>
    "name-email": f"(?:{_ATEXT}{{1,20}}(?: {_ATEXT}{{1,20}}){{0,3}} <{_EMAIL}>|{_EMAIL})",
}
"""Format name -> anchored ECMAScript regex, for grammars built with ``target="pydantic"``."""
