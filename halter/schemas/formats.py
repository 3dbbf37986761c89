"""String ``format``s as regular expressions (RFC 3339 dates, RFC 3986 URIs, IP addresses, ...).

Each format is written as an ECMAScript regex and compiled by ``regex.py`` like any pattern.
Dates and times are in format_datetime.py, the ``regex`` format in format_regex.py. Known
departures: leap seconds only with quarter-hour offsets (format_datetime.py); hostnames are not
checked against the 253-character total or IDNA (``xn--``) rules; e-mail and URI grammars follow
the RFCs' ASCII syntax, ``idn-email`` is a superset (RFC 6531 local part @ an ``idn-hostname``).
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping

from halter.schemas.format_datetime import DATE, DATE_TIME, TIME
from halter.schemas.format_regex import REGEX

_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
IPV4 = rf"{_OCTET}(?:\.{_OCTET}){{3}}"
_H16 = "[0-9A-Fa-f]{1,4}"
_LS32 = rf"(?:{_H16}:{_H16}|{IPV4})"
IPV6 = "(?:" + "|".join([
    rf"(?:{_H16}:){{6}}{_LS32}",
    rf"::(?:{_H16}:){{5}}{_LS32}",
    rf"(?:{_H16})?::(?:{_H16}:){{4}}{_LS32}",
    rf"(?:(?:{_H16}:){{0,1}}{_H16})?::(?:{_H16}:){{3}}{_LS32}",
    rf"(?:(?:{_H16}:){{0,2}}{_H16})?::(?:{_H16}:){{2}}{_LS32}",
    rf"(?:(?:{_H16}:){{0,3}}{_H16})?::{_H16}:{_LS32}",
    rf"(?:(?:{_H16}:){{0,4}}{_H16})?::{_LS32}",
    rf"(?:(?:{_H16}:){{0,5}}{_H16})?::{_H16}",
    rf"(?:(?:{_H16}:){{0,6}}{_H16})?::",
]) + ")"
_LABEL = "[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
HOSTNAME = rf"{_LABEL}(?:\.{_LABEL})*"
_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]"
EMAIL = (rf"(?:{_ATEXT}+(?:\.{_ATEXT}+)*|\"(?:[ !#-\[\]-~]|\\[ -~])*\")"
         rf"@(?:{HOSTNAME}|\[{IPV4}\]|\[IPv6:{IPV6}\])")
UUID = "[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}"


def uri_parts(iri: bool = False) -> dict[str, str]:
    """The pieces of RFC 3986 (RFC 3987 when ``iri``) as regexes: ``pchar`` (a path character),
    ``userchar`` (one of userinfo), ``scheme``, ``userinfo`` (with its ``@``), ``authority``, ``abempty`` (a path after an authority), ``query`` and ``fragment``
    (each optional, with its ``?``/``#``), ``uri`` and ``reference``."""
    uc = r"\u00A0-\uD7FF\uF900-\uFDCF\uFDF0-\uFFEF\u{10000}-\u{EFFFD}" if iri else ""
    unreserved = rf"A-Za-z0-9._~\-{uc}"
    pct = "%[0-9A-Fa-f]{2}"
    sub = "!$&'()*+,;="
    pchar = rf"(?:[{unreserved}{sub}:@]|{pct})"
    seg = f"{pchar}*"
    seg_nz = f"{pchar}+"
    seg_nz_nc = rf"(?:[{unreserved}{sub}@]|{pct})+"
    userinfo = rf"(?:[{unreserved}{sub}:]|{pct})*@"
    ip_literal = rf"\[(?:{IPV6}|[vV][0-9A-Fa-f]+\.[{unreserved}{sub}:]+)\]"
    reg_name = rf"(?:[{unreserved}{sub}]|{pct})*"
    authority = rf"(?:{userinfo})?(?:{ip_literal}|{IPV4}|{reg_name})(?::[0-9]*)?"
    abempty = f"(?:/{seg})*"
    absolute = f"/(?:{seg_nz}(?:/{seg})*)?"
    rootless = f"{seg_nz}(?:/{seg})*"
    noscheme = f"{seg_nz_nc}(?:/{seg})*"
    private = r"\uE000-\uF8FF\u{F0000}-\u{10FFFD}" if iri else ""
    qchars = rf"(?:{pchar}|[/?{private}])*"
    query = rf"(?:\?{qchars})?"
    fragment = rf"(?:#(?:{pchar}|[/?])*)?"
    scheme = "[A-Za-z][A-Za-z0-9+.-]*"
    hier = f"(?://{authority}{abempty}|{absolute}|{rootless}|)"
    uri = f"{scheme}:{hier}{query}{fragment}"
    relative = f"(?://{authority}{abempty}|{absolute}|{noscheme}|){query}{fragment}"
    return {"pchar": pchar, "userchar": userinfo[:-2],
            "scheme": scheme, "userinfo": userinfo, "authority": authority, "abempty": abempty,
            "query": query, "fragment": fragment, "uri": uri, "reference": f"(?:{uri}|{relative})"}


URI, URI_REFERENCE = (uri_parts(False)[k] for k in ("uri", "reference"))
IRI, IRI_REFERENCE = (uri_parts(True)[k] for k in ("uri", "reference"))
JSON_POINTER = r"(?:/(?:[^~/]|~[01])*)*"
RELATIVE_JSON_POINTER = rf"(?:0|[1-9][0-9]*)(?:#|{JSON_POINTER})"
_DUR_TIME = r"T(?:[0-9]+H(?:[0-9]+M(?:[0-9]+S)?)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S)"
DURATION = (rf"P(?:[0-9]+W|(?:[0-9]+Y(?:[0-9]+M(?:[0-9]+D)?)?|[0-9]+M(?:[0-9]+D)?|[0-9]+D)"
            rf"(?:{_DUR_TIME})?|{_DUR_TIME})")

# RFC 6570 level 4 with erratum 6937 (literals %x26-3B, so "'" is allowed); the noncharacters at
# the end of each supplementary plane are not excluded
_UT_LITERAL = (r"(?:[!#$&-;=?@A-Z\[\]_a-z~\u00A0-\uD7FF\uE000-\uFDCF\uFDF0-\uFFEF"
               r"\u{10000}-\u{10FFFD}]|%[0-9A-Fa-f]{2})")
_UT_VARCHAR = r"(?:[A-Za-z0-9_]|%[0-9A-Fa-f]{2})"
_UT_VARSPEC = rf"{_UT_VARCHAR}(?:\.?{_UT_VARCHAR})*(?::[1-9][0-9]{{0,3}}|\*)?"
URI_TEMPLATE = rf"(?:{_UT_LITERAL}|\{{[+#./;?&=,!@|]?{_UT_VARSPEC}(?:,{_UT_VARSPEC})*\}})*"



def _class(ranges: list[tuple[int, int]], negate: bool = False) -> str:
    body = "".join(f"\\u{{{a:X}}}" + (f"-\\u{{{b:X}}}" if b != a else "") for a, b in ranges)
    return f"[{'^' if negate else ''}{body}]"


def _bmp_ranges(test) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for cp in range(0x80, 0x10000):
        if test(chr(cp)):
            if out and out[-1][1] == cp - 1:
                out[-1] = (out[-1][0], cp)
            else:
                out.append((cp, cp))
    return out


@functools.cache
def _idn_hostname() -> str:
    """A superset of IDNA2008 host names (RFC 5890-5893).

    Dot-separated labels (four dot characters) of letters, digits, hyphens (not first or last) and
    non-ASCII characters, at most 63 of them per label; a label does not start with a combining
    mark, and the contextual rules of RFC 5892 appendix A are applied for MIDDLE DOT (between two
    'l'), Greek KERAIA (before a Greek letter), Hebrew GERESH/GERSHAYIM (after a Hebrew letter) and
    ZERO WIDTH JOINER (after a virama). Not checked: the IDNA property tables, the KATAKANA MIDDLE
    DOT, Arabic-Indic digit and ZWNJ rules, Bidi rules, A-label (punycode) validity, 253 in all.
    """
    import unicodedata
    marks = _bmp_ranges(lambda c: unicodedata.category(c).startswith("M"))
    viramas = _bmp_ranges(lambda c: unicodedata.combining(c) == 9)
    special = [(0x2E, 0x2E), (0xB7, 0xB7), (0x375, 0x375), (0x5F3, 0x5F4), (0x200D, 0x200D),
               (0x3002, 0x3002), (0xFF0E, 0xFF0E), (0xFF61, 0xFF61), (0xD800, 0xDFFF)]
    plain = _class([(0, 0x2F), (0x3A, 0x40), (0x5B, 0x60), (0x7B, 0x7F)] + special, negate=True)
    not_mark = _class([(0, 0x2F), (0x3A, 0x40), (0x5B, 0x60), (0x7B, 0x7F)] + special + marks, negate=True)
    hebrew = r"[\u05D0-\u05EA\u05EF-\u05F2]"
    greek = r"[\u0370-\u0373\u0376-\u03FF\u1F00-\u1FFF]"
    virama = _class(viramas)
    contextual = rf"l(?:\u00B7l)*|\u0375{greek}|{hebrew}[\u05F3\u05F4]*|{virama}\u200D"
    first = rf"(?:{not_mark}|{contextual})"
    unit = rf"(?:{plain}|{contextual})"
    label = rf"{first}(?:(?:{unit}|-){{0,61}}{unit})?"
    sep = r"[.\u3002\uFF0E\uFF61]"
    return rf"{label}(?:{sep}{label})*"


@functools.cache
def _idn_email() -> str:
    """RFC 6531: the local part may use any non-ASCII character (atext and qtext are extended with
    UTF8-non-ascii); the domain is an IDN host name (the superset above) or an address literal."""
    non_ascii = r"\u0080-\uD7FF\uE000-\u{10FFFF}"
    return (rf"(?:[A-Za-z0-9!#$%&'*+/=?^_`{{|}}~{non_ascii}-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{{|}}~{non_ascii}-]+)*"
            rf"|\"(?:[ !#-\[\]-~{non_ascii}]|\\[ -~])*\")"
            rf"@(?:{_idn_hostname()}|\[{IPV4}\]|\[IPv6:{IPV6}\])")


class _BuiltOnUse(Mapping):
    """Format name -> regex, each made the first time it is asked for (the IDN ones scan the
    Basic Multilingual Plane for combining marks: ~0.15 s that a process should not pay on import)."""

    def __init__(self, makers: dict[str, Callable[[], str]]) -> None:
        self._makers = makers

    def __getitem__(self, name: str) -> str:
        return self._makers[name]()

    def __contains__(self, name: object) -> bool:
        return name in self._makers

    def __iter__(self) -> Iterator[str]:
        return iter(self._makers)

    def __len__(self) -> int:
        return len(self._makers)


FORMATS: dict[str, str] = {
    "date": DATE, "time": TIME, "date-time": DATE_TIME, "duration": DURATION,
    "ipv4": IPV4, "ipv6": IPV6, "hostname": HOSTNAME, "email": EMAIL, "uuid": UUID,
    "uri": URI, "uri-reference": URI_REFERENCE, "iri": IRI, "iri-reference": IRI_REFERENCE,
    "json-pointer": JSON_POINTER, "relative-json-pointer": RELATIVE_JSON_POINTER,
    "uri-template": URI_TEMPLATE, "regex": REGEX,
}
"""Format name -> anchored ECMAScript regex of the string value."""

# formats defined by the spec that halter does not check (their values are accepted as any string)
UNCHECKED_FORMATS: frozenset[str] = frozenset()

APPROXIMATE_FORMATS: Mapping[str, str] = _BuiltOnUse({"idn-hostname": _idn_hostname, "idn-email": _idn_email})
"""Formats checked as a superset: strict mode refuses them, the default mode uses the superset."""
