"""PostgreSQL intervals as Spark intervals, for ``timeshard serve``'s parameters.

A PostgreSQL interval is three numbers: months, days and microseconds, each
with its own sign. Spark has two interval types: a year-month one (months)
and a day-time one (microseconds, a day 24 hours, as in UTC, the session's
zone). An interval of months only is a year-month value, one of days and
time only a day-time value; one with months and days or time has no Spark
value, and is refused (0A000) naming it.

A parameter's text is read as PostgreSQL's interval input reads the forms its
output takes (:func:`interval_fields`), under the default ``IntervalStyle``
(``postgres``: each field has its own sign):

* ``postgres``: ``1 year 2 mons 3 days 04:05:06.7``, ``-1 days +02:00:00``;
* ``postgres_verbose``: ``@ 1 year 2 mons 3 days 4 hours 5 mins 6.7 secs ago``;
* ``sql_standard``: ``1-2`` (years-months), ``3 04:05:06`` (days and a time);
* ISO 8601 with designators: ``P1Y2M3DT4H5M6.7S``, ``P1DT2H``, ``PT-1M``.

A unit may be any of PostgreSQL's spellings (``day``, ``days``, ``d``,
``hrs``, ...) and a number may have a fraction, which spills into the
smaller fields as PostgreSQL spills it (a month is 30 days, a day 24 hours);
one of a year or a larger unit is rounded to whole months, as PostgreSQL 15+ rounds it.
Text of no such form is SqlError 22007, as PostgreSQL answers it, and so is text
of a non-ISO form longer than PostgreSQL's input takes (:func:`_fits`: 256 bytes of
fields, 25 fields).

:func:`interval_literal` writes the Spark literal of the three numbers: its
text is made of the numbers, never of the client's text. Pure Python.
"""

from __future__ import annotations

import decimal
import math
import re
import sys

from timeshard.server.sql_tokens import SqlError

_MICROS_PER_DAY = 86_400_000_000
#: The units of PostgreSQL's interval input, as (months, days, microseconds) per unit.
_UNITS: dict[str, tuple[int, int, int]] = {}
for _names, _value in (
    (("microsecond", "microseconds", "us", "usec", "usecs"), (0, 0, 1)),
    (("millisecond", "milliseconds", "ms", "msec", "msecs"), (0, 0, 1_000)),
    (("second", "seconds", "s", "sec", "secs"), (0, 0, 1_000_000)),
    (("minute", "minutes", "m", "min", "mins"), (0, 0, 60_000_000)),
    (("hour", "hours", "h", "hr", "hrs"), (0, 0, 3_600_000_000)),
    (("day", "days", "d"), (0, 1, 0)),
    (("week", "weeks", "w"), (0, 7, 0)),
    (("month", "months", "mon", "mons"), (1, 0, 0)),
    (("year", "years", "y", "yr", "yrs"), (12, 0, 0)),
    (("decade", "decades", "dec", "decs"), (120, 0, 0)),
    (("century", "centuries", "c", "cent"), (1_200, 0, 0)),
    (("millennium", "millennia", "mil", "mils"), (12_000, 0, 0)),
):
    for _name in _names:
        _UNITS[_name] = _value

_NUMBER = r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)"
#: One field of the non-ISO forms: a time, a years-months pair, a number and its unit.
_FIELD = re.compile(
    rf"\s*(?:(?P<time>[+-]?\d+:\d+(?::\d+)?(?:\.\d*)?)"
    rf"|(?P<ym>[+-]?\d+-\d+)"
    rf"|(?P<number>{_NUMBER})\s*(?P<unit>[a-z]+)?)",
    re.ASCII,
)
_ISO_DATE = re.compile(rf"({_NUMBER})([ymwd])", re.ASCII)
_ISO_TIME = re.compile(rf"({_NUMBER})([hms])", re.ASCII)
_ISO_UNITS = {"y": "year", "m": "month", "w": "week", "d": "day"}
_ISO_TIME_UNITS = {"h": "hour", "m": "minute", "s": "second"}

#: PostgreSQL's limits: months and days are int32, microseconds int64.
_INT32, _INT32_MIN = 2**31 - 1, -(2**31)
_INT64, _INT64_MIN = 2**63 - 1, -(2**63)


def _invalid(text: str) -> SqlError:
    return SqlError(f"invalid input syntax for type interval: {text!r}", "22007")


def _field_overflow(text: str) -> SqlError:
    return SqlError(f"interval field value out of range: {text!r}", "22015")


class _Sum:
    """Fields added up exactly, as PostgreSQL's ``DecodeInterval`` adds them (its
    ``pg_itm_in``), in the order the caller adds them: whole years, months and days
    (int32 each) and microseconds (int64), a fraction spilling into the smaller ones. A
    number's whole part times its unit past that field's range (``214748365 decades``:
    PostgreSQL's ``AdjustYears`` multiplies before it adds), or a field past its range
    once a number is added to it, is SqlError 22015 (interval field value out of range)
    naming ``text``."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.years = 0
        self.months = decimal.Decimal(0)
        self.days = decimal.Decimal(0)
        self.micros = decimal.Decimal(0)

    def add(self, number: decimal.Decimal, unit: tuple[int, int, int]) -> None:
        scale = unit[0] // 12 if unit[0] >= 12 else unit[0] or unit[1] or unit[2]
        least, greatest = (_INT64_MIN, _INT64) if unit[2] else (_INT32_MIN, _INT32)
        if not least <= int(number) * scale <= greatest:
            raise _field_overflow(self.text)
        months, days, micros = (number * f for f in unit)
        if unit[0] >= 12:  # whole years, and a fraction of one rounded to whole months
            # (PostgreSQL 15+ rounds it, half to even as its rint: '1.99 years' is 24 months)
            years = number.to_integral_value(decimal.ROUND_DOWN)
            self.years += int(years) * (unit[0] // 12)
            months = ((number - years) * unit[0]).to_integral_value(decimal.ROUND_HALF_EVEN)
        whole = months.to_integral_value(decimal.ROUND_DOWN)
        days += (months - whole) * 30
        self.months += whole
        whole = days.to_integral_value(decimal.ROUND_DOWN)
        self.micros += micros + (days - whole) * _MICROS_PER_DAY
        self.days += whole
        self._signed(1)  # a field past its range is refused as soon as it is

    def _signed(self, sign: int) -> tuple[int, int, int, int]:
        """The years, months, days and microseconds times ``sign``: SqlError 22015 if one
        is past its range."""
        years, months, days = (sign * int(v) for v in (self.years, self.months, self.days))
        micros = sign * int(self.micros.to_integral_value(decimal.ROUND_HALF_EVEN))
        if not all(_INT32_MIN <= v <= _INT32 for v in (years, months, days)):
            raise _field_overflow(self.text)
        if not _INT64_MIN <= micros <= _INT64:
            raise _field_overflow(self.text)
        return years, months, days, micros

    def fields(self, sign: int) -> tuple[int, int, int]:
        """The months, days and microseconds, each field times ``sign`` (``ago``); years
        and months summed past int32 are SqlError 22008 (interval out of range), as
        PostgreSQL's ``itmin2interval`` answers them."""
        years, months, days, micros = self._signed(sign)
        if not _INT32_MIN <= years * 12 + months <= _INT32:
            raise SqlError(f"interval out of range: {self.text!r}", "22008")
        return years * 12 + months, days, micros


def interval_fields(text: str) -> tuple[int, int, int]:
    """The months, days and microseconds of an interval's text (see the module doc):
    SqlError 22007 if it has none of PostgreSQL's forms; 22015 (interval field value out
    of range) for a minute field past 59, a second field past 60, a years-months pair's
    months past 11, or years, months, days or time past PostgreSQL's range of each;
    22008 (interval out of range) for years and months that, summed, are past the range
    of months, as PostgreSQL's ``interval_in`` answers them."""
    with decimal.localcontext() as context:
        context.prec = 60  # exact for every value in range
        try:
            return _fields(text, text.strip().lower())
        except decimal.DecimalException:  # a number past any field's range
            raise _field_overflow(text) from None


def _fields(text: str, lowered: str) -> tuple[int, int, int]:
    if lowered.startswith("p"):
        return _iso_fields(text, lowered[1:])
    if not _fits(lowered):
        raise _invalid(text)
    sign = 1
    if lowered.startswith("@"):
        lowered = lowered[1:]
    if re.search(r"(?:^|\s)ago$", lowered):  # postgres_verbose: every field negated
        lowered, sign = lowered[:-3], -1
    lowered = lowered.rstrip()
    pos = 0
    matches = []
    while pos < len(lowered):
        match = _FIELD.match(lowered, pos)
        if match is None or match.end() == pos:
            raise _invalid(text)
        matches.append(match)
        pos = match.end()
    if not matches:
        raise _invalid(text)
    total = _Sum(text)
    seen: set[str] = set()
    # Right to left, as PostgreSQL's DecodeInterval adds them, each checked as it is added:
    # which is refused first (a field past its range, one given twice) depends on it.
    for k in reversed(range(len(matches))):
        match = matches[k]
        if match["time"] is not None:
            _once("time", seen, text)
            _add_time(total, match["time"], text)
        elif match["ym"] is not None:
            _once("ym", seen, text)
            years, months = match["ym"].lstrip("+-").split("-")
            negative = -1 if match["ym"].startswith("-") else 1
            if _integer(months, text) > 11:  # PostgreSQL's field overflow
                raise _field_overflow(text)
            whole = _integer(years, text) * 12 + _integer(months, text)
            total.add(decimal.Decimal(negative * whole), (1, 0, 0))
        else:
            unit = match["unit"]
            if unit is None:  # a day before a time (sql_standard), else seconds
                following = matches[k + 1] if k + 1 < len(matches) else None
                unit = "day" if following is not None and following["time"] else "second"
            value = _UNITS.get(unit)
            if value is None:
                raise _invalid(text)
            _once(str(value), seen, text)
            total.add(_number(match["number"], text), value)
    return total.fields(sign)


#: The bytes of the buffer PostgreSQL's ``interval_in`` splits a text into fields in (its
#: ``workbuf``: each field's characters, then a NUL), and the most fields it takes
#: (``MAXDATEFIELDS``). Past either its ``ParseDateTime`` fails, and text that is then no
#: ISO 8601 interval is refused (22007); PostgreSQL 15 takes ``'0' * 250 + '1 day'``
#: (256 bytes: 252 and 4) and refuses one more zero.
_FIELD_BUFFER = 256
_MAX_FIELDS = 25
_DIGITS = frozenset("0123456789")
_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyz")


def _fits(lowered: str) -> bool:
    """Whether PostgreSQL's ``ParseDateTime`` splits ``lowered`` into fields within its
    buffer and field count (:data:`_FIELD_BUFFER`, :data:`_MAX_FIELDS`): spaces, and
    punctuation but a sign and a decimal point, separate fields and take no byte. A word
    followed by a digit or ``+`` is taken as one field with what follows, as PostgreSQL
    takes any word but its date keywords (an interval has none: it is refused anyway). A
    character it refuses outright is left to the grammar to refuse."""
    used = fields = pos = 0
    while pos < len(lowered):
        char = lowered[pos]
        if char.isspace() or char in _IGNORED:
            pos += 1
            continue
        if char in _DIGITS:
            end = _number_field(lowered, pos + 1)
            taken = end - pos
        elif char == ".":
            end = _run(lowered, pos + 1, _DIGITS)
            taken = end - pos
        elif char in _LETTERS:
            end = _run(lowered, pos + 1, _LETTERS)
            if end < len(lowered) and lowered[end] in "-/.+0123456789":
                end = _run(lowered, end + 1, _LETTERS | _DIGITS | frozenset("+-/_.:"))
            taken = end - pos
        elif char in "+-":
            after = pos + 1  # the spaces after a sign are skipped
            while after < len(lowered) and lowered[after].isspace():
                after += 1
            first = lowered[after] if after < len(lowered) else ""
            if first and first in _DIGITS:
                end = _run(lowered, after + 1, _DIGITS | frozenset(":.-"))
            elif first and first in _LETTERS:
                end = _run(lowered, after + 1, _LETTERS)
            else:
                return True
            taken = 1 + end - after
        else:
            return True
        used += taken + 1  # its characters, and a NUL
        fields += 1
        if used > _FIELD_BUFFER or fields > _MAX_FIELDS:
            return False
        pos = end
    return True


def _number_field(text: str, pos: int) -> int:
    """Where the field that starts with a digit before ``pos`` ends, as ``ParseDateTime``
    reads it: digits, then a time (``:``), or a date (``-``, ``/`` or ``.``: ``1-2``,
    ``1.5``) of digits or letters."""
    pos = _run(text, pos, _DIGITS)
    if pos == len(text):
        return pos
    if text[pos] == ":":
        return _run(text, pos + 1, _DIGITS | frozenset(":."))
    if text[pos] not in "-/.":
        return pos
    delim = text[pos]
    if pos + 1 < len(text) and text[pos + 1] in _DIGITS:
        pos = _run(text, pos + 1, _DIGITS)
        if pos < len(text) and text[pos] == delim:
            pos = _run(text, pos + 1, _DIGITS | {delim})
        return pos
    return _run(text, pos + 1, _LETTERS | _DIGITS | {delim})


def _run(text: str, pos: int, chars: frozenset[str]) -> int:
    """Where the run of ``chars`` from ``pos`` of ``text`` ends."""
    while pos < len(text) and text[pos] in chars:
        pos += 1
    return pos


#: The punctuation PostgreSQL's ``ParseDateTime`` skips between fields (C's ``ispunct``
#: but a sign and a decimal point).
_IGNORED = frozenset("!\"#$%&'()*,/;<=>?@[\\]^_`{|}~")


def _once(field: str, seen: set[str], text: str) -> None:
    """SqlError 22007 if a field is given twice, as PostgreSQL refuses it."""
    if field in seen:
        raise _invalid(text)
    seen.add(field)


def _add_time(total: _Sum, time: str, text: str) -> None:
    """``[+-]H:M[:S[.f]]``, or ``[+-]M:S.f`` (two fields and a fraction), its sign on all."""
    negative = time.startswith("-")
    parts = time.lstrip("+-").split(":")
    if len(parts) == 2 and "." in parts[1]:
        parts = ["0", *parts]
    hours, minutes = _integer(parts[0], text), _integer(parts[1], text)
    seconds = _number(parts[2], text) if len(parts) == 3 else decimal.Decimal(0)
    if minutes > 59 or seconds >= 61:  # PostgreSQL's DecodeTime takes a 60th second
        raise _field_overflow(text)
    micros = (hours * 3600 + minutes * 60) * 1_000_000 + seconds * 1_000_000
    total.add(-micros if negative else micros, (0, 0, 1))


#: More significant digits than a field of an interval in range has; past them Python's
#: ``int`` of them may be refused (past 4300 digits) or slow.
_MAX_DIGITS = 30


def _integer(digits: str, text: str) -> int:
    """A field's whole number; SqlError 22015 if it has more significant digits than any
    in range (PostgreSQL's ``strtoint`` overflows: its field overflow). Leading zeros
    count for nothing, as PostgreSQL reads them."""
    significant = digits.lstrip("0")
    if len(significant) > _MAX_DIGITS:
        raise _field_overflow(text)
    return int(significant or "0")


def _number(number: str, text: str) -> decimal.Decimal:
    """A field's number (``[+-]digits[.digits]``); SqlError 22015 if its whole part has
    more significant digits than any in range, as :func:`_integer` (a long one would take
    seconds to convert, or overflow the decimal context)."""
    whole = number.lstrip("+-").partition(".")[0]
    _integer(whole, text)
    return decimal.Decimal(number)


def _check_double(number: str, text: str) -> None:
    """SqlError 22007 if PostgreSQL's ``strtod`` of an ISO 8601 field's ``number`` is out
    of a double's range (ERANGE: past about 1.8e308, about 309 digits, or nonzero below
    its smallest normal value), as its ``ParseISO8601Number`` answers it, before it checks
    the field's range (22015). Python's ``float`` rounds as ``strtod`` does, to infinity
    past the largest double, in time linear in the digits."""
    value = abs(float(number))
    if math.isinf(value) or (value < sys.float_info.min and number.strip("+-.0")):
        raise _invalid(text)


def _iso_fields(text: str, rest: str) -> tuple[int, int, int]:
    """ISO 8601 with designators: ``[nY][nM][nW][nD][T[nH][nM][nS]]``, each signed."""
    date, _, time = rest.partition("t")
    if not (date or time) or rest.endswith("t"):
        raise _invalid(text)
    total = _Sum(text)
    for part, pattern, names in ((date, _ISO_DATE, _ISO_UNITS), (time, _ISO_TIME, _ISO_TIME_UNITS)):
        seen: set[str] = set()
        pos = 0
        while pos < len(part):
            match = pattern.match(part, pos)
            if match is None:
                raise _invalid(text)
            _once(match[2], seen, text)
            _check_double(match[1], text)
            total.add(_number(match[1], text), _UNITS[names[match[2]]])
            pos = match.end()
    return total.fields(1)


def interval_literal(months: int, days: int, micros: int, shown: str) -> str:
    """The Spark literal of an interval of ``months``, ``days`` and ``micros``: a
    year-month one of months only, else a day-time one (a day 24 hours). A value with
    months and days or time has no Spark value: SqlError 0A000 naming ``shown`` (the
    value as the client sent it); one past Spark's day-time range (a long of
    microseconds) is 22008."""
    if months and (days or micros):
        raise SqlError(
            f"an interval parameter of {months} months, {days} days and {micros} microseconds "
            f"({shown!r}) has no Spark value: Spark's intervals are either year-month or "
            "day-time; send the months and the days or time apart",
            "0A000",
        )
    if months:
        sign = "-" if months < 0 else ""
        return f"INTERVAL '{sign}{abs(months) // 12}-{abs(months) % 12}' YEAR TO MONTH"
    total = days * _MICROS_PER_DAY + micros
    if abs(total) > _INT64:
        raise SqlError(
            f"interval out of range: {shown!r} is past Spark's day-time intervals", "22008"
        )
    sign = "-" if total < 0 else ""
    seconds, fraction = divmod(abs(total), 1_000_000)
    minutes, second = divmod(seconds, 60)
    hours, minute = divmod(minutes, 60)
    day, hour = divmod(hours, 24)
    text = f"{sign}{day} {hour:02d}:{minute:02d}:{second:02d}.{fraction:06d}"
    return f"INTERVAL '{text}' DAY TO SECOND"


def interval_text(months: int, days: int, micros: int) -> str:
    """An interval as PostgreSQL's ``postgres`` output writes it (``1 year 2 mons``,
    ``-1 days +02:03:04.5``, ``00:00:00``): what :func:`interval_fields` reads back.
    A field after a negative one has its sign written, ``+`` too."""
    years, month = divmod(abs(months), 12)
    sign = -1 if months < 0 else 1
    named = [(sign * years, "year", "years"), (sign * month, "mon", "mons"), (days, "day", "days")]
    parts = []
    negative_before = False
    for value, one, many in named:
        if value:
            plus = "+" if negative_before and value > 0 else ""
            parts.append(f"{plus}{value} {one if value == 1 else many}")
            negative_before = value < 0
    if micros or not parts:
        time_sign = "-" if micros < 0 else ("+" if negative_before else "")
        seconds, fraction = divmod(abs(micros), 1_000_000)
        minutes, second = divmod(seconds, 60)
        hours, minute = divmod(minutes, 60)
        clock = f"{time_sign}{hours:02d}:{minute:02d}:{second:02d}"
        parts.append(f"{clock}.{fraction:06d}".rstrip("0") if fraction else clock)
    return " ".join(parts)


__all__ = ["interval_fields", "interval_literal", "interval_text"]
