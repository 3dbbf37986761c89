"""String ``format``s as regular expressions (RFC 3339 dates, RFC 3986 URIs, IP addresses, ...).

Each format is written as an ECMAScript regex and compiled by ``regex.py`` like any pattern.
Known departures: leap seconds (``23:59:60``) are only accepted written in UTC (a local time with
a non-zero offset is rejected); hostnames are not checked against the 253-character total or IDNA
(``xn--``) rules; e-mail and URI grammars follow the RFCs' ASCII syntax.
"""
from __future__ import annotations

_D = r"[0-9]"
_YEAR = _D + "{4}"
_LEAP = r"(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)"
DATE = (rf"(?:{_YEAR}-(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])"
        rf"|{_YEAR}-(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)"
        rf"|{_YEAR}-02-(?:0[1-9]|1[0-9]|2[0-8])"
        rf"|{_LEAP}-02-29)")
_HHMM = "(?:[01][0-9]|2[0-3]):[0-5][0-9]"
_FRAC = r"(?:\.[0-9]+)?"
# a leap second is 23:59:60 UTC; it is only accepted written in UTC (Z or +-00:00)
TIME = (rf"(?:{_HHMM}:[0-5][0-9]{_FRAC}(?:[Zz]|[+-]{_HHMM})"
        rf"|23:59:60{_FRAC}(?:[Zz]|[+-]00:00))")
DATE_TIME = DATE + "[Tt]" + TIME
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


def _uri(iri: bool) -> tuple[str, str]:
    """(absolute URI, URI reference) regexes per RFC 3986 (RFC 3987 when ``iri``)."""
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
    return uri, f"(?:{uri}|{relative})"


URI, URI_REFERENCE = _uri(False)
IRI, IRI_REFERENCE = _uri(True)
JSON_POINTER = r"(?:/(?:[^~/]|~[01])*)*"
RELATIVE_JSON_POINTER = rf"(?:0|[1-9][0-9]*)(?:#|{JSON_POINTER})"
_DUR_TIME = r"T(?:[0-9]+H(?:[0-9]+M(?:[0-9]+S)?)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S)"
DURATION = (rf"P(?:[0-9]+W|(?:[0-9]+Y(?:[0-9]+M(?:[0-9]+D)?)?|[0-9]+M(?:[0-9]+D)?|[0-9]+D)"
            rf"(?:{_DUR_TIME})?|{_DUR_TIME})")

# RFC 6570 level 4 (the noncharacters at the end of each supplementary plane are not excluded)
_UT_LITERAL = (r"(?:[!#$&()*+,\-./0-9:;=?@A-Z\[\]_a-z~\u00A0-\uD7FF\uE000-\uFDCF\uFDF0-\uFFEF"
               r"\u{10000}-\u{10FFFD}]|%[0-9A-Fa-f]{2})")
_UT_VARCHAR = r"(?:[A-Za-z0-9_]|%[0-9A-Fa-f]{2})"
_UT_VARSPEC = rf"{_UT_VARCHAR}(?:\.?{_UT_VARCHAR})*(?::[1-9][0-9]{{0,3}}|\*)?"
URI_TEMPLATE = rf"(?:{_UT_LITERAL}|\{{[+#./;?&=,!@|]?{_UT_VARSPEC}(?:,{_UT_VARSPEC})*\}})*"

# a superset of IDNA2008 host names: dot-separated labels of letters, digits, hyphens (not first or
# last) and non-ASCII characters, at most 63 characters each; the IDNA tables, contextual rules,
# Bidi rules and A-label (punycode) validity are not checked
_IDN_SEP = r"[.\u3002\uFF0E\uFF61]"
_IDN_CHAR = r"[A-Za-z0-9\u0080-\u3001\u3003-\uD7FF\uE000-\uFF0D\uFF0F-\uFF60\uFF62-\u{10FFFF}]"
_IDN_LABEL = rf"{_IDN_CHAR}(?:(?:{_IDN_CHAR}|-){{0,61}}{_IDN_CHAR})?"
IDN_HOSTNAME = rf"{_IDN_LABEL}(?:{_IDN_SEP}{_IDN_LABEL})*"

FORMATS: dict[str, str] = {
    "date": DATE, "time": TIME, "date-time": DATE_TIME, "duration": DURATION,
    "ipv4": IPV4, "ipv6": IPV6, "hostname": HOSTNAME, "email": EMAIL, "uuid": UUID,
    "uri": URI, "uri-reference": URI_REFERENCE, "iri": IRI, "iri-reference": IRI_REFERENCE,
    "json-pointer": JSON_POINTER, "relative-json-pointer": RELATIVE_JSON_POINTER,
    "uri-template": URI_TEMPLATE,
}
"""Format name -> anchored ECMAScript regex of the string value."""

# formats defined by the spec that halter does not check (their values are accepted as any string)
UNCHECKED_FORMATS = frozenset({"idn-email", "regex"})

APPROXIMATE_FORMATS: dict[str, str] = {"idn-hostname": IDN_HOSTNAME}
"""Formats checked as a superset: strict mode refuses them, the default mode uses the superset."""
