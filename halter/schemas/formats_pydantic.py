"""String formats as Pydantic (v2) parses them, for grammars whose output Pydantic validates.

Pydantic writes formats of its own into the schemas it makes (``ipvanyaddress``, ``ipv4network``,
``base64``, ...), which JSON Schema treats as annotations, and it parses dates and times into
Python's ``datetime``, which holds neither year 0 nor leap seconds. ``PYDANTIC_FORMATS`` is
``FORMATS`` with those dates and times, plus a regex for each of Pydantic's own formats. Each is a
subset of what Pydantic accepts (every string it matches validates), as wide as a short regex
allows: IPv4 networks are exact in CIDR form (host bits zero), IPv6 networks only in the
``group:...::/prefix`` form whose written groups cover the prefix.
"""
from __future__ import annotations

from halter.schemas.format_datetime import PY_DATE, PY_DATE_TIME, PY_TIME
from halter.schemas.formats import FORMATS, IPV4, IPV6

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


_IPV4_INTERFACE = rf"{IPV4}(?:/{_number_alternatives(range(33))})?"
_IPV6_INTERFACE = rf"{IPV6}(?:/{_number_alternatives(range(129))})?"
_IPV4_NETWORK = _ipv4_network()
_IPV6_NETWORK = _ipv6_network()
_B64 = "[A-Za-z0-9+/]"

PYDANTIC_FORMATS: dict[str, str] = {
    **FORMATS,
    "date": PY_DATE, "time": PY_TIME, "date-time": PY_DATE_TIME,
    "ipvanyaddress": f"(?:{IPV4}|{IPV6})",
    "ipv4interface": _IPV4_INTERFACE, "ipv6interface": _IPV6_INTERFACE,
    "ipvanyinterface": f"(?:{_IPV4_INTERFACE}|{_IPV6_INTERFACE})",
    "ipv4network": _IPV4_NETWORK, "ipv6network": _IPV6_NETWORK,
    "ipvanynetwork": f"(?:{_IPV4_NETWORK}|{_IPV6_NETWORK})",
    "base64": rf"(?:{_B64}{{4}})*(?:{_B64}{{2}}==|{_B64}{{3}}=)?",
}
"""Format name -> anchored ECMAScript regex, for grammars built with ``target="pydantic"``."""
