"""Rules that end a run's ladder early (`--stop-when "failed>5%,ttft_p99>10s"`), parsed once.

Three kinds of rule, each judged on one level at a time (`run.stop_rules` judges them):

- `failed>N%`: more than N % of the level's measured requests failed (N from 0 to under 100);
- `NAME_pP>N(s|ms)`: the level's P-th percentile of a per-request figure, over its successful
  measured requests as every percentile of the report, is above N. The names and percentiles
  are the per-level ones the SLO grammar takes (`slo.level_percentile`: the figures declared
  with `slo=True` in `vllm_load.figures`), read by the same functions, so a figure declared
  there is a rule here too;
- `over-saturation`: within the level, TTFT and the requests in flight both rose significantly
  (`run.stop_rules.over_saturated` says how that is tested).

Items are comma- or space-separated, and the option may be repeated; a rule given twice is
refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Union

from .figures import PERCENTILES
from .slo import LevelPercentile, level_metrics, level_percentile, seconds_limit
from .user_values import SettingsError

FAILED = "failed"
OVER_SATURATION = "over-saturation"

_ITEM = re.compile(r"^([a-z0-9_]+)\s*(>=|<=|>|<|=)\s*([0-9]*\.?[0-9]+(?:e-?[0-9]+)?)\s*([a-z%]*)$")


@dataclass(frozen=True)
class FailedShare:
    """More than `limit` (a share, 0..1) of a level's measured requests failed."""

    limit: float

    @property
    def text(self) -> str:
        return f"{FAILED}>{self.limit * 100:g}%"


@dataclass(frozen=True)
class PercentileAbove(LevelPercentile):
    """A level's `metric` percentile, over its successful measured requests, above `limit` s."""

    SIGN = ">"


@dataclass(frozen=True)
class OverSaturation:
    """TTFT and requests in flight both rising significantly within a level."""

    @property
    def text(self) -> str:
        return OVER_SATURATION


StopRule = Union[FailedShare, PercentileAbove, OverSaturation]


def forms() -> str:
    """The rule forms, for errors and --help."""
    percentiles = ",".join(str(p) for p in PERCENTILES)
    return (
        f"{FAILED}>N% (N from 0 to under 100), "
        f"{'|'.join(level_metrics())}_pP>N(s|ms) (P in {percentiles}), or {OVER_SATURATION}"
    )


def _error(part: str, why: str = "") -> SettingsError:
    reason = f" ({why})" if why else ""
    return SettingsError(f"--stop-when {part!r} is not a rule{reason}: expected {forms()}")


def _parse_item(part: str) -> StopRule:
    if part == OVER_SATURATION:
        return OverSaturation()
    match = _ITEM.match(part)
    if not match:
        raise _error(part)
    name, op, number, unit = match.groups()
    if op != ">":
        raise _error(part, f"a rule says when to stop: {name}>N")
    value = float(number)
    if name == FAILED:
        if unit != "%":
            raise _error(part, "give the failed share in %, e.g. failed>5%")
        if not 0 <= value < 100:
            raise _error(part, "the failed share must be from 0% to under 100%")
        return FailedShare(value / 100.0)
    try:
        limit = seconds_limit(value, unit or None)
        metric, percentile = level_percentile(name)
    except ValueError as e:
        raise _error(part, str(e)) from None
    return PercentileAbove(metric, percentile, limit)


def parse_stop_when(items: Iterable[str] | str | None) -> tuple[StopRule, ...]:
    """The rules of `--stop-when` items (each may hold several, comma- or space-separated), in
    the order given. Raises a one-line `SettingsError` naming the bad part and the forms."""
    if items is None:
        return ()
    if isinstance(items, str):
        items = [items]
    rules: dict[str, StopRule] = {}
    for item in items:
        text = re.sub(r"\s*(>=|<=|>|<|=)\s*", r"\1", str(item).strip().lower())
        for part in re.split(r"[,\s]+", text):
            if not part:
                continue
            rule = _parse_item(part)
            key = rule.column if isinstance(rule, PercentileAbove) else type(rule).__name__
            if key in rules:
                raise SettingsError(
                    f"--stop-when {rules[key].text} is given twice (again in {part!r}): give it once"
                )
            rules[key] = rule
    return tuple(rules.values())


def stop_when_argument(value: object) -> list[str]:
    """`Settings.stop_when` from what an option holds: checked, and kept as the normalised
    rules run.json records (`parse_stop_when(those) == parse_stop_when(value)`)."""
    items = value if isinstance(value, list) else [str(value)]
    return [rule.text for rule in parse_stop_when([str(v) for v in items])]


def stopped_by_line(run: dict) -> str:
    """The line of the rule that ended a run (run.json `stopped_by`, written by
    `run.stop_rules.Trip`), or "" when none did."""
    stopped = run.get("stopped_by")
    line = stopped.get("line") if isinstance(stopped, dict) else None
    return line if isinstance(line, str) else ""
