"""RFC 3339 ``date``, ``time`` and ``date-time`` as regexes, leap seconds included; and the forms
Python's ``datetime`` types take as Pydantic parses and dumps them (``PY_*``).

A leap second (``hh:mm:60``) is valid when the time converted to UTC is 23:59:60, so the local
hour and minute are fixed by the offset: ``+HH:MM`` needs local = 23:59 + HH:MM, ``-HH:MM`` local =
23:59 - HH:MM (mod 24 h). The local time is written before the offset, so an automaton has to
remember the local hour and minute across ``:60``, the fraction and the sign: every (hour, minute)
pair it allows costs ~10 states. All 1,440 pairs (every offset) would be ~11,000 states and
3.4 s to build; the quarter-hour offsets (minutes 00/15/30/45, every offset in use since leap
seconds began in 1972) are 96 pairs, ~900 states and ~0.3 s. So a leap second is exact for
quarter-hour offsets (and ``Z``), and rejected with any other offset (e.g. ``00:19:60+00:20``).
"""
from __future__ import annotations

_D = r"[0-9]"
_YEAR = _D + "{4}"
_LEAP_YEAR = r"(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)"
DATE = (rf"(?:{_YEAR}-(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])"
        rf"|{_YEAR}-(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)"
        rf"|{_YEAR}-02-(?:0[1-9]|1[0-9]|2[0-8])"
        rf"|{_LEAP_YEAR}-02-29)")
_HHMM = "(?:[01][0-9]|2[0-3]):[0-5][0-9]"
_FRAC = r"(?:\.[0-9]+)?"
LEAP_OFFSET_MINUTES = (0, 15, 30, 45)
"""Offset minutes for which leap seconds are accepted (see the module docstring)."""
_UTC_LEAP = 23 * 60 + 59


def _offset(sign: str, minutes: int) -> str:
    return ("\\+" if sign == "+" else "-") + "%02d:%02d" % divmod(minutes, 60)


def _leap_second() -> str:
    """``hh:mm:60[.frac]`` followed by exactly the offsets that make it 23:59:60 UTC."""
    by_local: dict[int, list[str]] = {}
    for hours in range(24):
        for minutes in LEAP_OFFSET_MINUTES:
            off = hours * 60 + minutes
            for sign, local in (("+", (_UTC_LEAP + off) % 1440), ("-", (_UTC_LEAP - off) % 1440)):
                by_local.setdefault(local, []).append(_offset(sign, off))
    by_local[_UTC_LEAP].append("[Zz]")
    by_hour: dict[int, list[str]] = {}
    for local in sorted(by_local):
        hour, minute = divmod(local, 60)
        offsets = "|".join(sorted(set(by_local[local])))
        by_hour.setdefault(hour, []).append(f"{minute:02d}:60{_FRAC}(?:{offsets})")
    return "(?:" + "|".join(f"{h:02d}:(?:{'|'.join(alts)})" for h, alts in by_hour.items()) + ")"


TIME = rf"(?:{_HHMM}:[0-5][0-9]{_FRAC}(?:[Zz]|[+-]{_HHMM})|{_leap_second()})"
DATE_TIME = DATE + "[Tt]" + TIME

# What Python's ``datetime`` can hold (Pydantic parses into it): years 0001-9999 (no year 0, so
# 0000-02-29 goes too) and no leap second. Everything else is RFC 3339 as above, a subset of what
# Pydantic's parser takes (it also takes a space for ``T``, no offset, more fraction digits).
_PY_YEAR = r"(?:000[1-9]|00[1-9][0-9]|0[1-9][0-9]{2}|[1-9][0-9]{3})"
_PY_LEAP_YEAR = r"(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:[13579][26]|[2468][048]|0[48])00)"
PY_DATE = DATE.replace(_YEAR, _PY_YEAR).replace(_LEAP_YEAR, _PY_LEAP_YEAR)
PY_TIME_NAIVE = rf"{_HHMM}:[0-5][0-9]{_FRAC}"
PY_TIME = rf"{PY_TIME_NAIVE}(?:[Zz]|[+-]{_HHMM})"
PY_DATE_TIME = PY_DATE + "[Tt]" + PY_TIME
PY_TIME_ANY = rf"{PY_TIME_NAIVE}(?:[Zz]|[+-]{_HHMM})?"
"""A time with or without an offset: what a plain ``datetime.time`` field takes and dumps."""
PY_DATE_TIME_ANY = PY_DATE + "[Tt]" + PY_TIME_ANY
"""A date-time with or without an offset: a plain ``datetime`` field (``datetime.now()`` dumps
without one); ``AwareDatetime`` keeps ``date-time`` and ``NaiveDatetime`` has none."""

# A ``timedelta`` as Pydantic dumps it (``-P1Y35DT3H2M1.5S``: years of 365 days, an optional sign,
# a fraction on the seconds) and parses it: components in order, each optional, at least one. Its
# parser refuses a total past 999,999,999 days and a time part past 2**32 - 1 seconds, so digits
# are capped to stay below both whatever the components add up to: at most 1,999,999 years (the
# dumps of every ``timedelta`` up to 730M days, of the 1,000M it can hold), 6 digits of months and
# weeks and 8 of days (~867M days in all); 6 digits of hours and minutes and 8 of seconds
# (~3.76e9 s).


def _in_order(parts: list[str]) -> str:
    """A regex for one or more of ``parts``, each at most once, in their order."""
    alts = []
    for i, first in enumerate(parts):
        alts.append(first + "".join(f"(?:{p})?" for p in parts[i + 1:]))
    return "(?:" + "|".join(alts) + ")"


_PY_SECONDS = r"[0-9]{1,8}(?:\.[0-9]+)?S"
_PY_DUR_TIME = "T" + _in_order([r"[0-9]{1,6}H", r"[0-9]{1,6}M", _PY_SECONDS])
PY_DURATION = (r"[+-]?P(?:" + _in_order([r"[01]?[0-9]{1,6}Y", r"[0-9]{1,6}M", r"[0-9]{1,6}W", r"[0-9]{1,8}D"])
               + f"(?:{_PY_DUR_TIME})?|{_PY_DUR_TIME})")
"""A ``timedelta`` as Pydantic dumps and parses it (see the comment above)."""
