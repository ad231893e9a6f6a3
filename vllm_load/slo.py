"""Latency SLOs as a user writes them (`--slo ttft<=2s --slo e2e_p99<=20s`), parsed once.

Three kinds of item, each `NAME<=N` with a unit (`s` or `ms`) or `attainment>=N%`:

- a per-request threshold (`ttft<=2s`, `ttfat<=3s`, `tpot<=50ms`, `e2e<=20s`,
  `itl_max<=500ms`): a request
  is *good* when it succeeded and every threshold holds for it (a figure the request has none
  of, such as the TPOT of a one-token reply, does not count against it; but a reasoning reply
  whose answer never came missed `ttfat`: `figures.PerRequest.absent_misses`). Goodput counts
  the good requests only;
- a per-level percentile objective (`ttft_p99<=2s`, `ttfat_p99<=3s`, `tpot_p90<=50ms`,
  `e2e_p99<=20s`, `itl_p99<=100ms`; percentiles 50, 90, 95, 99): the level's percentile, over its successful
  measured requests as every other percentile of the report, must hold;
- `attainment>=N%`: the share of a level's measured requests that must be good (default 99 %).
  A level *meets the SLOs* when that share is reached and every percentile objective holds.

The names are the per-request figures declared with `slo=True` in `vllm_load.figures` (`ttfat`
is a reasoning model's time to its first answer token).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

from .figures import PERCENTILES, slo_quantities
from .user_values import SettingsError

DEFAULT_ATTAINMENT = 0.99
#: a per-request threshold on a request's longest token gap (requests.csv `itl_max`): ITL itself
#: is per token, with no one value per request
ITL_MAX = "itl_max"


def request_metrics() -> tuple[str, ...]:
    """The per-request threshold names (each a requests.csv column): the declared per-request
    figures in seconds an SLO may name (`figures.slo_quantities`), and `itl_max`."""
    names = [q.key for q in slo_quantities() if not q.from_histogram and q.unit == "s"]
    return (*names, ITL_MAX)


def level_metrics() -> tuple[str, ...]:
    """The figures whose per-level percentiles an objective may name (`ttft` in `ttft_p99`)."""
    return tuple(q.key for q in slo_quantities() if q.unit == "s")


def forms() -> str:
    """The SLO forms, for errors and --help."""
    percentiles = ",".join(str(p) for p in PERCENTILES)
    return (
        f"{'|'.join(request_metrics())}<=N(s|ms) per request, "
        f"{'|'.join(level_metrics())}_pP<=N(s|ms) per level (P in {percentiles}), "
        "or attainment>=N%"
    )


_ITEM = re.compile(r"^([a-z0-9_]+)\s*(<=|>=)\s*([0-9]*\.?[0-9]+(?:e-?[0-9]+)?)\s*(ms|s|%)?$")
_PERCENTILE = re.compile(r"^([a-z0-9_]+)_p([0-9]+)$")


def seconds_text(seconds: float) -> str:
    """A limit as an SLO writes it: `2s`, `50ms`, `1.5s`."""
    if seconds < 1:
        return f"{seconds * 1000:g}ms"
    return f"{seconds:g}s"


@dataclass(frozen=True)
class Threshold:
    """One per-request limit: the request's `metric` (a requests.csv column) <= `limit` s."""

    metric: str
    limit: float

    @property
    def text(self) -> str:
        return f"{self.metric}<={seconds_text(self.limit)}"


@dataclass(frozen=True)
class LevelPercentile:
    """A limit on one per-level percentile: the level's `metric` percentile against `limit` s,
    compared as `SIGN` says (an SLO objective holds at or under it; a stop rule fires above)."""

    metric: str
    percentile: int
    limit: float

    SIGN = "<="

    @property
    def column(self) -> str:
        """The per-level column (`levels.metric_columns()`) it judges (`ttft_p99`)."""
        return f"{self.metric}_p{self.percentile}"

    @property
    def text(self) -> str:
        return f"{self.column}{self.SIGN}{seconds_text(self.limit)}"


@dataclass(frozen=True)
class Objective(LevelPercentile):
    """One per-level limit: the level's `metric` percentile <= `limit` s."""


@dataclass(frozen=True)
class SloSpec:
    """Every SLO of a report or a run: per-request thresholds, per-level objectives, and the
    share of good requests a level needs."""

    thresholds: tuple[Threshold, ...] = ()
    objectives: tuple[Objective, ...] = ()
    attainment: float = DEFAULT_ATTAINMENT

    def __bool__(self) -> bool:
        return bool(self.thresholds or self.objectives)

    def items(self) -> list[str]:
        """The spec as `--slo` items; `parse_slo(spec.items()) == spec`."""
        out = [t.text for t in self.thresholds] + [o.text for o in self.objectives]
        if self.attainment != DEFAULT_ATTAINMENT:
            out.append(f"attainment>={self.attainment * 100:g}%")
        return out

    def describe(self) -> str:
        """One line for a report: what a good request and a level meeting the SLOs are."""
        good = "a request is good when it succeeded"
        if self.thresholds:
            good += f" with {', '.join(t.text for t in self.thresholds)}"
        level = (
            f"a level meets the SLOs when at least {self.attainment * 100:g}% of its measured "
            "requests are good"
        )
        if self.objectives:
            level += f" and {', '.join(o.text for o in self.objectives)}"
        return f"{good}; {level}"


def _error(part: str, why: str = "") -> SettingsError:
    reason = f" ({why})" if why else ""
    return SettingsError(f"--slo {part!r} is not an SLO{reason}: expected {forms()}")


def _parse_item(part: str) -> Threshold | Objective | float:
    match = _ITEM.match(part.strip().lower())
    if not match:
        raise _error(part)
    name, op, number, unit = match.groups()
    value = float(number)
    if name == "attainment":
        if op != ">=" or unit not in ("%", None):
            raise _error(part, "attainment takes >=N%")
        share = value / 100.0 if unit == "%" else value
        if not 0 < share <= 1:
            raise _error(part, "attainment must be above 0% and at most 100%")
        return share
    if op != "<=":
        raise _error(part, f"{name} takes <=")
    try:
        limit = seconds_limit(value, unit)
        if name in request_metrics():
            return Threshold(name, limit)
        metric, percentile = level_percentile(name)
    except ValueError as e:
        raise _error(part, str(e)) from None
    return Objective(metric, percentile, limit)


def seconds_limit(value: float, unit: str | None) -> float:
    """A limit in seconds from its number and unit (`s` or `ms`); ValueError saying what is
    wrong. The SLO grammar's and `stop_when`'s."""
    if unit not in ("s", "ms"):
        raise ValueError("give the limit in s or ms")
    limit = value / 1000.0 if unit == "ms" else value
    if not limit > 0:
        raise ValueError("the limit must be positive")
    return limit


def level_percentile(name: str) -> tuple[str, int]:
    """(figure, percentile) of a per-level percentile's name (`ttft_p99` -> ("ttft", 99)), of
    the figures `level_metrics` names and the percentiles every level computes; ValueError
    saying what is wrong. The SLO grammar's and `stop_when`'s."""
    level = _PERCENTILE.match(name)
    if not level or level.group(1) not in level_metrics():
        raise ValueError(f"unknown figure {name}")
    percentile = int(level.group(2))
    if percentile not in PERCENTILES:
        raise ValueError(f"percentile {percentile} is not one the report computes")
    return level.group(1), percentile


def parse_slo(items: Iterable[str] | str | None) -> SloSpec:
    """The SLOs of `--slo` items (each may hold several, comma- or space-separated); an empty
    spec for none. Raises a one-line `SettingsError` naming the bad part and the forms."""
    if items is None:
        return SloSpec()
    if isinstance(items, str):
        items = [items]
    thresholds: dict[str, Threshold] = {}
    objectives: dict[str, Objective] = {}
    attainment: float | None = None
    for item in items:
        text = re.sub(r"\s*(<=|>=)\s*", r"\1", str(item).strip())
        for part in re.split(r"[,\s]+", text):
            if not part:
                continue
            parsed = _parse_item(part)
            if isinstance(parsed, float):
                key, taken = "attainment", attainment is not None
                attainment = parsed
            elif isinstance(parsed, Threshold):
                key, taken = parsed.metric, parsed.metric in thresholds
                thresholds[parsed.metric] = parsed
            else:
                key, taken = parsed.column, parsed.column in objectives
                objectives[parsed.column] = parsed
            if taken:
                raise SettingsError(f"--slo {key} is given twice (in {part!r}): give it once")
    return SloSpec(
        tuple(thresholds.values()),
        tuple(objectives.values()),
        DEFAULT_ATTAINMENT if attainment is None else attainment,
    )


def slo_argument(value: object) -> list[str]:
    """`Settings.slo` from what an option holds (a list of items, or one text from the web
    UI): checked, and kept as the normalised items run.json records."""
    items = value if isinstance(value, list) else [str(value)]
    return parse_slo([str(v) for v in items]).items()
