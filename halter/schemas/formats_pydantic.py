"""String formats as Pydantic (v2) parses them, for grammars whose output Pydantic validates.

Pydantic writes formats of its own into the schemas it makes (``ipvanyaddress``, ``ipv4network``,
``base64``, ...), which JSON Schema treats as annotations, and it parses dates and times into
Python's ``datetime``, which holds neither year 0 nor leap seconds. ``PYDANTIC_FORMATS`` is
``FORMATS`` with those dates and times, plus a regex for each of Pydantic's own formats. Each is a
subset of what Pydantic accepts (every string it matches validates), as wide as a short regex
allows: IPv4 networks are exact in CIDR form (host bits zero), IPv6 networks only in the
``group:...::/prefix`` form whose written groups cover the prefix, URLs only with a host (see
``_urls``).
"""
from __future__ import annotations

from halter.schemas.format_datetime import PY_DATE, PY_DATE_TIME, PY_TIME, PY_TIME_NAIVE
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


def _url_after_scheme() -> str:
    """``://`` and the rest of a URL with a host that the WHATWG URL parser (Pydantic's) takes.

    The host is a name, an IPv4 address or a bracketed IPv6 address. Names keep to labels of
    ``[A-Za-z0-9_-]`` that do not start with ``xn--`` (the parser decodes those as punycode and
    refuses most), the last one starting with a letter (a last label that looks like a number
    makes the parser read the host as an IPv4 address); ports are 0-65535. RFC 3986 URIs without
    an authority (``mailto:``, ``urn:``) are left out: after ``http:`` the parser wants a host.
    """
    part = uri_parts()
    lc = "[A-Za-z0-9_-]"
    not_xn = [f"[Xx](?:[A-MO-Za-mo-z0-9_-]{lc}*)?", f"[Xx][Nn](?:[A-Za-z0-9_]{lc}*)?",
              f"[Xx][Nn]-(?:[A-Za-z0-9_]{lc}*)?"]
    label = "(?:" + "|".join([f"[A-WYZa-wyz0-9]{lc}*", *not_xn]) + ")"
    last = "(?:" + "|".join([f"[A-WYZa-wyz]{lc}*", *not_xn]) + ")"
    host = rf"(?:{IPV4}|\[{IPV6}\]|(?:{label}\.)*{last})"
    port = "(?:6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3}|0)"
    rest = f"://(?:{part['userinfo']})?{host}(?::{port})?{part['abempty']}{part['query']}{part['fragment']}"
    return rest


_URL_REST = _url_after_scheme()
_IPV4_INTERFACE = rf"{IPV4}(?:/{_number_alternatives(range(33))})?"
_IPV6_INTERFACE = rf"{IPV6}(?:/{_number_alternatives(range(129))})?"
_IPV4_NETWORK = _ipv4_network()
_IPV6_NETWORK = _ipv6_network()
_B64 = "[A-Za-z0-9+/]"

PYDANTIC_FORMATS: dict[str, str] = {
    **FORMATS,
    "date": PY_DATE, "time": PY_TIME, "date-time": PY_DATE_TIME, "uri": uri_parts()["scheme"] + _URL_REST,
    # formats of halter's own, written by pytypes.py where Pydantic's JSON Schema loses the type
    "x-halter-http-url": "[Hh][Tt][Tt][Pp][Ss]?" + _URL_REST, "x-halter-https-url": "[Hh][Tt][Tt][Pp][Ss]" + _URL_REST,
    "x-halter-naive-date-time": PY_DATE + "[Tt]" + PY_TIME_NAIVE,
    "ipvanyaddress": f"(?:{IPV4}|{IPV6})",
    "ipv4interface": _IPV4_INTERFACE, "ipv6interface": _IPV6_INTERFACE,
    "ipvanyinterface": f"(?:{_IPV4_INTERFACE}|{_IPV6_INTERFACE})",
    "ipv4network": _IPV4_NETWORK, "ipv6network": _IPV6_NETWORK,
    "ipvanynetwork": f"(?:{_IPV4_NETWORK}|{_IPV6_NETWORK})",
    "base64": rf"(?:{_B64}{{4}})*(?:{_B64}{{2}}==|{_B64}{{3}}=)?",
}
"""Format name -> anchored ECMAScript regex, for grammars built with ``target="pydantic"``."""
