"""One value of a trace line checked and converted: token counts, times, Azure's datetimes.

Each raises `BadValue` saying what is wrong and what to do; the reader that read the line puts
`FILE:LINE: ` before it. The common case (a plain whole number) returns at once: a trace may have
millions of lines.
"""

from __future__ import annotations

import datetime
import math
import re
from typing import Any


class BadValue(Exception):
    """A value a trace line cannot have; the message says what is wrong and what to do."""


#: what a token count of 0 means, by the count it is
ZERO = {
    "prompt": "a request needs a prompt of at least 1 token",
    "output": "a request must generate at least 1 token",
}


def shown(value: Any) -> str:
    """A value as a message quotes it: one line, at most ~40 characters."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def token_count(value: Any, name: str, role: str) -> int:
    """A JSON token count (`role`: "prompt" or "output"): a whole number above 0. A float with
    no fraction (1024.0, as some converters write integers) is that whole number."""
    if type(value) is int and value > 0:
        return value
    if type(value) is float and value.is_integer():
        return token_count(int(value), name, role)
    if type(value) is not int:
        raise BadValue(f'"{name}" must be a whole number of tokens, got {shown(value)}')
    return _positive(value, name, role)


def token_text(text: str, name: str, role: str) -> int:
    """A CSV token count: the text of a whole number above 0 ("1024" or "1024.0")."""
    try:
        value = int(text)
    except ValueError:
        try:
            number = float(text)
        except ValueError:
            number = math.nan
        if not number.is_integer():
            raise BadValue(
                f"{name} must be a whole number of tokens, got {shown(text.strip())}"
            ) from None
        value = int(number)
    if value > 0:
        return value
    return _positive(value, name, role)


def _positive(value: int, name: str, role: str) -> int:
    if value < 0:
        raise BadValue(f"{name} is {value}: a token count cannot be negative (fix the line)")
    if value == 0:
        raise BadValue(f"{name} is 0: {ZERO[role]} (remove the line, or give the count)")
    return value


def json_time(value: Any, name: str) -> float:
    """A JSON time: a finite number (int or float)."""
    if type(value) is int or (type(value) is float and math.isfinite(value)):
        return value
    raise BadValue(f'"{name}" must be a number, got {shown(value)}')


def text_time(text: str, name: str) -> float:
    """A CSV time in seconds: the text of a finite number."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if math.isfinite(value):
        return value
    raise BadValue(f"{name} must be a number of seconds, got {shown(text.strip())}")


# 2023-11-16 18:15:46.6805900 (the 2023 traces), 2024-05-10 00:00:00.009930+00:00 (2024's), an
# ISO 8601 "T" or a "Z" alike; up to 9 fractional digits, kept whole (nanoseconds)
_DATETIME = re.compile(
    r"\s*(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?"
    r"\s*(Z|[+-]\d{2}:?\d{2})?\s*$"
)
_PLAIN = re.compile(r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}\.\d{1,9}")
_DAYS: dict[str, int] = {}  # a date's days since 0001-01-01; a trace has few dates


def datetime_ns(text: str, name: str) -> int:
    """An Azure TIMESTAMP as nanoseconds (since 0001-01-01, UTC where the text has an offset):
    whole numbers, so a 7-digit fraction loses nothing however far from the epoch."""
    match = _DATETIME.match(text)
    if match is None:
        raise BadValue(
            f"{name} must be a date and time such as 2023-11-16 18:15:46.6805900, "
            f"got {shown(text.strip())}"
        )
    year, month, day, hour, minute, second, fraction, zone = match.groups()
    date = f"{year}-{month}-{day}"
    days = _DAYS.get(date)
    if days is None:
        try:
            days = datetime.date(int(year), int(month), int(day)).toordinal()
        except ValueError:
            raise BadValue(f"{name} has no such date: {date}") from None
        _DAYS[date] = days
    h, m, s = int(hour), int(minute), int(second)
    if h > 23 or m > 59 or s > 59:
        raise BadValue(f"{name} has no such time of day: {hour}:{minute}:{second}")
    seconds = days * 86400 + h * 3600 + m * 60 + s - _offset(zone)
    return seconds * 1_000_000_000 + (int(fraction.ljust(9, "0")) if fraction else 0)


class Datetimes:
    """`datetime_ns` for a column whose rows mostly fall in the same second as the row before
    (a trace in time order): the date and time of day are parsed once per second, and a row of
    that second with a plain fraction (`.6805900`, no offset) reads only its fraction."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._second = ""  # "2023-11-16 18:15:46" of the last row parsed in full, with no offset
        self._second_ns = 0

    def ns(self, text: str) -> int:
        second, fraction = text[:19], text[20:]
        if (
            second == self._second
            and text[19:20] == "."
            and 0 < len(fraction) <= 9
            and fraction.isascii()
            and fraction.isdigit()
        ):
            return self._second_ns + int(fraction.ljust(9, "0"))
        value = datetime_ns(text, self.name)
        if _PLAIN.fullmatch(text):  # its first 19 characters are the whole date and time of day
            self._second, self._second_ns = second, value - value % 1_000_000_000
        return value


def _offset(zone: str | None) -> int:
    """A time zone's offset from UTC in seconds (none and Z: 0)."""
    if not zone or zone == "Z":
        return 0
    digits = zone[1:].replace(":", "")
    offset = int(digits[:2]) * 3600 + int(digits[2:]) * 60
    return -offset if zone[0] == "-" else offset
