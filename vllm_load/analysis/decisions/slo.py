"""Latency SLOs as a user writes them (`--slo ttft<=2s --slo e2e_p99<=20s`), parsed once.

Three kinds of item, each `NAME<=N` with a unit (`s` or `ms`) or `attainment>=N%`:

- a per-request threshold (`ttft<=2s`, `tpot<=50ms`, `e2e<=20s`, `itl_max<=500ms`): a request
  is *good* when it succeeded and every threshold holds for it (a figure the request has none
  of, such as the TPOT of a one-token reply, does not count against it). Goodput counts the
  good requests only;
- a per-level percentile objective (`ttft_p99<=2s`, `tpot_p90<=50ms`, `e2e_p99<=20s`,
  `itl_p99<=100ms`; percentiles 50, 90, 95, 99): the level's percentile, over its successful
  measured requests as every other percentile of the report, must hold;
- `attainment>=N%`: the share of a level's measured requests that must be good (default 99 %).
  A level *meets the SLOs* when that share is reached and every percentile objective holds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

from ...values import SettingsError

#: per-request threshold name -> requests.csv column
REQUEST_METRICS: dict[str, str] = {
    "ttft": "ttft",
    "tpot": "tpot",
    "e2e": "e2e",
    "itl_max": "itl_max",
}
#: per-level percentile objectives: `<metric>_p<percentile>` columns of `levels.METRIC_COLUMNS`
LEVEL_METRICS: tuple[str, ...] = ("ttft", "tpot", "e2e", "itl")
LEVEL_PERCENTILES: tuple[int, ...] = (50, 90, 95, 99)
DEFAULT_ATTAINMENT = 0.99

FORMS = (
    "ttft|tpot|e2e|itl_max<=N(s|ms) per request, "
    "ttft|tpot|e2e|itl_pP<=N(s|ms) per level (P in 50,90,95,99), or attainment>=N%"
)
_ITEM = re.compile(r"^([a-z0-9_]+)\s*(<=|>=)\s*([0-9]*\.?[0-9]+(?:e-?[0-9]+)?)\s*(ms|s|%)?$")
_PERCENTILE = re.compile(r"^(ttft|tpot|e2e|itl)_p([0-9]+)$")


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
class Objective:
    """One per-level limit: the level's `metric` percentile <= `limit` s."""

    metric: str
    percentile: int
    limit: float

    @property
    def column(self) -> str:
        """The per-level column (`levels.METRIC_COLUMNS`) it judges."""
        return f"{self.metric}_p{self.percentile}"

    @property
    def text(self) -> str:
        return f"{self.column}<={seconds_text(self.limit)}"


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
    return SettingsError(f"--slo {part!r} is not an SLO{reason}: expected {FORMS}")


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
    if unit not in ("s", "ms"):
        raise _error(part, "give the limit in s or ms")
    limit = value / 1000.0 if unit == "ms" else value
    if not limit > 0:
        raise _error(part, "the limit must be positive")
    if name in REQUEST_METRICS:
        return Threshold(REQUEST_METRICS[name], limit)
    level = _PERCENTILE.match(name)
    if level:
        percentile = int(level.group(2))
        if percentile not in LEVEL_PERCENTILES:
            raise _error(part, f"percentile {percentile} is not one the report computes")
        return Objective(level.group(1), percentile, limit)
    raise _error(part, f"unknown figure {name}")


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
