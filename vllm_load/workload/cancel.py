"""Requests a client gives up on (--cancel-share, --cancel-after): which, and when.

--cancel-after is a length spec (`lengths.parse_length`: `N`, `uniform:LO,HI`, `normal:MEAN,SD`,
`lognormal:MEAN,SD`, then `,min=N,max=N`) followed by its unit: `tok` (content chunks received,
a stream's tokens), `s` or `ms` (from when the request is sent). A time is drawn in whole
milliseconds: `uniform:0.5,2s` is `uniform:500,2000` in ms. `CancelDraws` decides, when a
request starts, whether it is to be cancelled (a seeded draw against the share) and at which
point (a draw from the distribution); the request carries its `CancelPoint` from then on.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable

from ..user_values import SettingsError, probability
from .lengths import LengthDistribution, parse_length

UNITS = ("tok", "ms", "s")  # (`ms` before `s`: the suffix is matched in this order)
FORMS = (
    "give a time (2s, 500ms, uniform:1,3s) or a number of tokens (32tok, uniform:16,64tok): "
    "a length spec of docs/workload.md followed by s, ms or tok"
)


@dataclass(frozen=True, slots=True)
class CancelPoint:
    """Where one request is to be closed: after `seconds` from its sending, or once `tokens`
    content chunks are in (one of the two is None). `label` is how its record names it."""

    seconds: float | None
    tokens: int | None

    @property
    def label(self) -> str:
        return f"{self.tokens}tok" if self.tokens is not None else f"{self.seconds:.3f}s"


@dataclass(frozen=True)
class CancelAfter:
    """A parsed --cancel-after: its distribution in tokens, or in milliseconds for a time."""

    tokens: bool
    distribution: LengthDistribution
    spec: str  # as given, spaces removed: what run.json records and the parser gives back

    def sample(self, rng: random.Random) -> CancelPoint:
        value = self.distribution.sample(rng)
        return CancelPoint(None, value) if self.tokens else CancelPoint(value / 1000.0, None)


def parse_cancel_after(given: str) -> CancelAfter:
    """The `CancelAfter` a --cancel-after value describes; a bad one is a one-line
    `SettingsError` that says what to give."""
    text = str(given).replace(" ", "").lower()
    unit = next((u for u in UNITS if text.endswith(u)), "")
    body = text[: len(text) - len(unit)]
    if not unit or not body:
        raise SettingsError(f"--cancel-after {given!r}: no unit; {FORMS}")
    if unit == "tok":
        return CancelAfter(True, parse_length(body, "--cancel-after", FORMS), text)
    in_ms = body if unit == "ms" else _seconds_as_ms(body)
    name = "--cancel-after" if unit == "ms" else f"--cancel-after {given!r}, in ms"
    return CancelAfter(False, parse_length(in_ms, name, FORMS), text)


def _seconds_as_ms(body: str) -> str:
    """A length spec in seconds rewritten in whole milliseconds (`uniform:0.5,2` ->
    `uniform:500,2000`); a part that is no number is left for `parse_length` to refuse."""
    kind, colon, rest = body.rpartition(":")
    parts = []
    for part in rest.split(","):
        key, eq, value = part.rpartition("=")
        try:
            number = float(value)
        except ValueError:
            parts.append(part)
            continue
        parts.append(f"{key}{eq}{round(number * 1000)}")
    return f"{kind}{colon}{','.join(parts)}"


def cancel_after_argument(value: str) -> str:
    """--cancel-after's parser: "" stays unset, anything else is checked."""
    text = str(value or "").strip()
    return parse_cancel_after(text).spec if text else ""


def share_argument(value: str) -> float:
    """--cancel-share's parser: a share of requests, 0 to 1."""
    return probability(value, "--cancel-share", "requests", "0.1: one in ten")


class CancelDraws:
    """One load process's choice, request by request, of which to cancel and when: a request is
    chosen with probability `share` (every request draws, so the choices do not depend on what
    the requests are), and a chosen one draws its `CancelPoint`. Seeded, so a seed repeats it."""

    __slots__ = ("_share", "_after", "_random", "_rng")

    def __init__(self, share: float, after: CancelAfter, seed: int | None = None) -> None:
        self._share = share
        self._after = after
        self._rng = random.Random(seed)
        self._random: Callable[[], float] = self._rng.random

    def draw(self) -> CancelPoint | None:
        if self._random() >= self._share:
            return None
        return self._after.sample(self._rng)
