"""The numbers of a report from plain Locust CSVs (`analysis.levels.locust_csv`): one run per `--csv`
prefix, runs of the same requests grouped into a series, and each series' curve built and
analysed as for run directories (`level_curve`, `saturation.analyse`, `findings`), on
requests/s or, when the locustfile reports tokens as its response length, output tokens/s.

`build_locust_data` is the only step that reads files (through `locust_csv.read_history`).
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from ..analysis.levels.locust_csv import (
    PERCENTILES,
    LocustLevels,
    PlateauRule,
    aggregated_rows,
    measure_levels,
    no_level_message,
)
from ..analysis.series.findings import findings
from ..analysis.series.level_curve import level_curve
from ..analysis.series.saturation import SaturationRule, Throughput, analyse
from ..analysis.series.stats import Series
from ..run_format.locust_files import LocustCsvError, LocustHistory, read_history
from .model import SeriesReport

REQUESTS = Throughput("req_per_s", "req/s", "request throughput (successful requests/s)")
OUTPUT_TOKENS = Throughput(
    "output_tok_per_s",
    "output tok/s",
    "output throughput (tokens/s, from Locust's response lengths)",
)
#: per-level figures averaged across runs
LOCUST_METRICS: tuple[str, ...] = (
    "req_per_s",
    "output_tok_per_s",
    "length_per_s",
    "mean_length",
    "success_rate",
    "requests",
    "failed",
    "window_s",
    "e2e_mean",
    *(f"e2e_p{p}" for p in PERCENTILES),
)


def throughput_of(length: str) -> Throughput:
    """What the saturation analysis judges: output tokens/s when Locust's response length is
    tokens, else requests/s (bytes say nothing about tokens)."""
    return OUTPUT_TOKENS if length == "tokens" else REQUESTS


def caveats(length: str, plateau_rule: PlateauRule) -> list[str]:
    """What a reader must know about figures from Locust's aggregates (every output says it)."""
    out = [
        "Every figure here comes from Locust's aggregates (its --csv stats history, one "
        "cumulative row a second), not from per-request records: levels are the plateaus of "
        "Locust's user count, and throughput counts the requests Locust logged as they ended "
        "during each level's measured part.",
        "Latency percentiles are approximate: Locust rounds every response time to two "
        "significant digits above 100 ms (147 ms → 150 ms, 3,432 ms → 3,400 ms; up to 5 % off), "
        "to whole ms below, and computes "
        "its percentiles over about the last 10 s; a level's is the median of those over its "
        "measured part, failures included. Mean response times are exact.",
        "Not available from Locust's CSVs: TTFT, ITL and TPOT (Locust's response time is the "
        "whole request: it sees no stream), prompt tokens and total token throughput, achieved "
        "concurrency, and the server's /metrics.",
    ]
    if length == "tokens":
        out.append(
            "Output tokens/s is Locust's response length taken as tokens (--locust-length "
            "tokens: the locustfile must report each response's generated tokens as its "
            "length); the saturation point is judged on it."
        )
    else:
        out.append(
            "No token figures: Locust's response length is taken as bytes (pass "
            "--locust-length tokens when the locustfile reports tokens as the length); the "
            "saturation point is judged on successful requests/s."
        )
    out.append(plateau_rule.describe())
    return out


@dataclass
class LocustRun:
    """One Locust run (one --csv prefix), measured."""

    source: LocustHistory
    levels: LocustLevels
    metrics: pd.DataFrame  # levels.metrics with `run_id`
    timeline: pd.DataFrame  # t, users, req_per_s between consecutive Aggregated rows
    series_label: str = ""

    @property
    def run_id(self) -> str:
        return self.source.run_id

    @property
    def prefix(self) -> str:
        return self.source.prefix


@dataclass
class LocustReportData:
    """Everything a report from Locust CSVs shows."""

    runs: list[LocustRun]
    series: list[SeriesReport]
    rule: SaturationRule
    plateau_rule: PlateauRule
    length: str
    caveats: list[str]
    generated_at: str = field(
        default_factory=lambda: _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")
    )


def timeline(history: pd.DataFrame, levels: LocustLevels) -> pd.DataFrame:
    """Successful requests/s between consecutive Aggregated rows, and the user count, by date."""
    agg = aggregated_rows(history)
    agg = agg[pd.to_numeric(agg["Timestamp"], errors="coerce").notna()].reset_index(drop=True)
    t = levels.dates if len(levels.dates) == len(agg) else agg["Timestamp"].astype(float) + 0.5
    ok = pd.to_numeric(agg["Total Request Count"], errors="coerce") - pd.to_numeric(
        agg["Total Failure Count"], errors="coerce"
    )
    dt = np.diff(np.asarray(t, dtype=np.float64), prepend=np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        rate = np.where(dt > 0, np.clip(ok.diff().to_numpy(np.float64), 0, None) / dt, np.nan)
    return pd.DataFrame(
        {
            "t": np.asarray(t, dtype=np.float64),
            "users": pd.to_numeric(agg["User Count"], errors="coerce").to_numpy(np.float64),
            "req_per_s": rate,
        }
    )


def summarize_prefix(prefix: str, plateau_rule: PlateauRule, length: str) -> LocustRun:
    """Read and measure one --csv prefix; a one-line `LocustCsvError` when it has no level."""
    source = read_history(prefix)
    levels = measure_levels(source.history, plateau_rule, length)
    if levels.metrics.empty:
        raise LocustCsvError(no_level_message(prefix, levels, plateau_rule))
    metrics = levels.metrics.copy()
    metrics.insert(0, "run_id", source.run_id)
    return LocustRun(source, levels, metrics, timeline(source.history, levels))


def group_locust_runs(runs: Sequence[LocustRun]) -> list[Series]:
    """Runs that sent the same requests (the same per-name rows) form a series: repeats of one
    test, whose levels are averaged with intervals as for run directories."""
    out: dict[tuple[str, ...], Series] = {}
    for i, run in enumerate(runs):
        names = run.source.names
        if names not in out:
            shown = ", ".join(names[:3]) + (f" +{len(names) - 3}" if len(names) > 3 else "")
            label = f"Locust: {shown}" if shown else "Locust"
            out[names] = Series(
                key=repr(names), model=label, settings={"requests": list(names)}, label=label
            )
        out[names].run_indices.append(i)
    series = list(out.values())
    for k, s in enumerate(series):
        if [o.label for o in series].count(s.label) > 1:
            s.label = f"{s.label} #{k + 1}"
    return series


def build_locust_data(
    prefixes: Sequence[str],
    rule: SaturationRule = SaturationRule(),
    plateau_rule: PlateauRule = PlateauRule(),
    length: str = "bytes",
    step: Callable[[str], None] = lambda _msg: None,
) -> LocustReportData:
    """Measure every prefix, group them into series, and analyse each series' curve."""
    rule = replace(rule, throughput=throughput_of(length))
    runs = []
    for prefix in prefixes:
        step(f"measuring {prefix}")
        runs.append(summarize_prefix(prefix, plateau_rule, length))
    series = []
    for g in group_locust_runs(runs):
        step(f"analysing {g.label}")
        members = [runs[i] for i in g.run_indices]
        for r in members:
            r.series_label = g.label
        curve = level_curve([r.metrics for r in members], LOCUST_METRICS)
        sat = analyse(curve, rule)
        series.append(
            SeriesReport(
                series=g,
                runs=[],  # Locust runs have no run directory: `LocustReportData.runs`
                curve=curve,
                saturation=sat,
                findings=findings(curve, sat, g.n_runs, rule),
            )
        )
    return LocustReportData(
        runs=runs,
        series=series,
        rule=rule,
        plateau_rule=plateau_rule,
        length=length,
        caveats=caveats(length, plateau_rule),
    )
