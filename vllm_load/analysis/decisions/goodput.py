"""Goodput: the load a deployment carries while meeting latency SLOs (`slo.SloSpec`).

Per level, over the same measured window and measured requests as every other figure
(`levels.measure_levels`): the share of measured requests that are good (succeeded, every
per-request threshold held), goodput in req/s and output tok/s, whether the level meets the
SLOs, and which item bound it: the one it missed, or the one closest to its limit.

Goodput counts the work *good* requests did inside the window, as throughput counts the work
of successful ones (`window_rates.work_in_window`, any level's requests): with every request
good, goodput equals throughput.

A per-request threshold is judged at a level by the attainment quantile of its figure over the
measured requests (failures as infinitely late): with attainment 99 %, the 99th percentile of
the requests' TTFT against `ttft<=2s`, so its ratio to the limit says how close it came.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from ...load_kinds import LoadKind, kind_named
from ..levels.measure import LevelMeasurement
from ..levels.spans import success_spans
from ..levels.table import level_kinds
from ..levels.window_rates import work_in_window
from ..series.stats import Summary, summarize
from .slo import SloSpec, Threshold

#: per-level goodput figures, as_floats (averaged across runs)
GOODPUT_METRICS: tuple[str, ...] = (
    "slo_good",
    "slo_good_share",
    "goodput_req_per_s",
    "goodput_output_tok_per_s",
    "slo_met",
    "slo_binding_ratio",
)
#: ... and the binding item, with its value (seconds; the success share for `success`)
GOODPUT_COLUMNS: tuple[str, ...] = (*GOODPUT_METRICS, "slo_binding", "slo_binding_value")
#: the binding item when failures alone keep a level from its attainment
SUCCESS = "success"


def as_floats(frame: pd.DataFrame, column: str) -> np.ndarray:
    if column not in frame:
        return np.full(len(frame), np.nan)
    return pd.to_numeric(frame[column], errors="coerce").to_numpy(np.float64, na_value=np.nan)


def good_requests(requests: pd.DataFrame, spec: SloSpec) -> np.ndarray:
    """Per row: it succeeded and every per-request threshold holds (an undefined figure, such as
    the TPOT of a one-token reply, does not count against it)."""
    good = as_floats(requests, "ok") == 1
    for t in spec.thresholds:
        value = as_floats(requests, t.metric)
        good &= np.isnan(value) | (value <= t.limit)
    return good


def _threshold_value(requests: pd.DataFrame, t: Threshold, attainment: float) -> float:
    """The attainment quantile of a threshold's figure over a level's measured requests, failures
    as infinitely late: at most the limit exactly when enough of them hold it."""
    value = np.nan_to_num(as_floats(requests, t.metric), nan=0.0)
    value = np.where(as_floats(requests, "ok") == 1, value, np.inf)
    if not len(value):
        return math.nan
    return float(np.quantile(value, attainment, method="inverted_cdf"))


def _binding(
    measured: pd.DataFrame, metrics_row: dict, spec: SloSpec
) -> tuple[str, float, float, bool]:
    """(item, value, value / limit, met) of the item that bound a level (see the module doc)."""
    n = len(measured)
    ok_share = float((as_floats(measured, "ok") == 1).mean()) if n else math.nan
    if n and ok_share < spec.attainment:
        return SUCCESS, ok_share, math.inf, False
    items: list[tuple[str, float, float]] = []
    for t in spec.thresholds:
        value = _threshold_value(measured, t, spec.attainment)
        items.append((t.text, value, value / t.limit))
    for o in spec.objectives:
        value = float(metrics_row.get(o.column, math.nan))
        items.append((o.text, value, value / o.limit))
    known = [i for i in items if i[2] == i[2]]
    if not known:
        return "", math.nan, math.nan, False
    name, value, ratio = max(known, key=lambda i: i[2])
    return name, value, ratio, ratio <= 1


def level_goodput(
    requests: pd.DataFrame, measurement: LevelMeasurement, spec: SloSpec
) -> pd.DataFrame:
    """One row per level of `measurement.metrics` with `GOODPUT_COLUMNS` (and `level`).

    `requests` is the run's requests frame `measurement` was measured from."""
    metrics = measurement.metrics
    labelled = measurement.labelled
    level_known = ~np.isnan(as_floats(requests, "level"))
    req = requests[level_known]
    good = good_requests(req, spec)
    if measurement.spans is not None and measurement.ok is not None:
        spans = measurement.spans.take(good[measurement.ok])  # good requests succeeded
    else:
        spans = success_spans(req, good)
    good_measured = good_requests(labelled, spec)
    rows = []
    for rec in metrics.to_dict("records"):
        in_level = (labelled["level"] == rec["level"]).to_numpy()
        measured = labelled[in_level]
        n_good = int(good_measured[in_level].sum())
        row: dict = {"level": rec["level"], "slo_good": n_good}
        row["slo_good_share"] = n_good / len(measured) if len(measured) else math.nan
        window = rec["window_s"]
        if window == window:
            work = work_in_window(spans, rec["window_start"], rec["window_end"])
            row["goodput_req_per_s"] = work.requests / window
            row["goodput_output_tok_per_s"] = work.output_tokens / window
        else:
            row["goodput_req_per_s"] = row["goodput_output_tok_per_s"] = math.nan
        name, value, ratio, met = _binding(measured, rec, spec)
        share = row["slo_good_share"]
        met = met and share == share and share >= spec.attainment
        row.update(
            slo_met=float(met) if len(measured) else math.nan,
            slo_binding=name,
            slo_binding_value=value,
            slo_binding_ratio=ratio,
        )
        rows.append(row)
    return pd.DataFrame(rows, columns=["level", *GOODPUT_COLUMNS])


def _secs(value: float) -> str:
    if value != value or value == math.inf:
        return "n/a"
    return f"{value * 1000:.3g} ms" if value < 1 else f"{value:.3g} s"


def binding_text(name: str, value: float, spec: SloSpec) -> str:
    """An item that bound a level and how far it got: `ttft<=2s (2.41 s at the 99th
    percentile of requests)`, `e2e_p99<=20s (23.1 s)`, `success (95.0% of requests
    succeeded)`."""
    if not name:
        return "-"
    if name == SUCCESS:
        return f"success ({value * 100:.1f}% of requests succeeded)"
    shown = _secs(value)
    if name in {t.text for t in spec.thresholds}:
        return f"{name} ({shown} at the {spec.attainment * 100:g}th percentile of requests)"
    return f"{name} ({shown})"


def _cell(value: float, spec: str, scale: float = 1.0) -> str:
    return format(value * scale, spec) if value == value else "-"


def format_goodput_table(metrics: pd.DataFrame, goodput: pd.DataFrame, spec: SloSpec) -> str:
    """A fixed-width text table of `level_goodput` for the terminal, under the SLOs' rule (empty
    string for no levels). `metrics` is the run's per-level table (its level names)."""
    if goodput.empty:
        return ""
    kinds = level_kinds(metrics)
    names = {
        rec["level"]: kind_named(rec.get("kind")).number(rec["value"])
        for rec in metrics.to_dict("records")
    }
    header = (
        kinds[0].unit if len(kinds) == 1 else "level",
        "good %",
        "goodput req/s",
        "goodput out tok/s",
    )
    rows = [(*header, "SLOs", "bound by")]
    for rec in goodput.to_dict("records"):
        met = rec["slo_met"]
        rows.append(
            (
                names.get(rec["level"], "-"),
                _cell(rec["slo_good_share"], ".1f", 100.0),
                _cell(rec["goodput_req_per_s"], ",.2f"),
                _cell(rec["goodput_output_tok_per_s"], ",.0f"),
                "met" if met == 1 else "missed" if met == 0 else "-",
                binding_text(rec["slo_binding"], rec["slo_binding_value"], spec),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(c.rjust(w) if i < 4 else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths)))
        for r in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join([f"SLOs: {spec.describe()}.", *(line.rstrip() for line in lines)])


@dataclass(frozen=True)
class SloHeadline:
    """The highest level meeting the SLOs across the runs of a series, and what bound it."""

    best: Summary  # per run, its highest level meeting the SLOs (runs with none are left out)
    runs_without: int  # runs where no level met them
    binding: str  # the item that bound it (most often across runs), `binding_text`
    binding_missed: bool  # False: every level met the SLOs, `binding` is the closest to its limit
    goodput_peak_value: float  # the level of the highest mean goodput (req/s)
    goodput_peak: float
    throughput_peak_value: float  # ... and of the highest mean req/s

    def sentence(self, axis: LoadKind, spec: SloSpec) -> str:
        """The key finding, naming levels as the series' kind of load names them."""
        noun, what = axis.noun, axis.what
        slos = ", ".join(spec.items())
        if self.best.n == 0:
            return (
                f"No tested level met the SLOs ({slos}) in any run; the closest miss was "
                f"{self.binding}."
            )
        level = f"{self.best.mean:,.4g} {noun}"
        if self.best.n >= 2 and self.best.std == 0:
            level += f" in all {self.best.n} runs"
        elif self.best.n >= 2 and self.best.ci_low == self.best.ci_low:
            level += (
                f" (mean of {self.best.n} runs, 95% CI {self.best.ci_low:,.4g}–"
                f"{self.best.ci_high:,.4g})"
            )
        elif self.best.n == 1:
            level += " (one run: no interval)"
        if self.runs_without:
            level += f"; {self.runs_without} run(s) met them at no level"
        bound = (
            f"bound by {self.binding}"
            if self.binding_missed
            else f"every tested level met them; closest to its limit: {self.binding}"
        )
        text = f"Highest {what} meeting the SLOs ({slos}): {level}, {bound}."
        if self.goodput_peak_value == self.goodput_peak_value:
            text += (
                f" Goodput peaks at {self.goodput_peak_value:,.4g} {noun} "
                f"({self.goodput_peak:,.2f} good req/s)"
            )
            if self.throughput_peak_value != self.goodput_peak_value:
                text += f", throughput at {self.throughput_peak_value:,.4g}"
            text += "."
        return text


def _most_common(texts: list[str]) -> str:
    texts = [t for t in texts if t]
    return max(set(texts), key=lambda t: (texts.count(t), -texts.index(t))) if texts else "-"


def slo_headline(runs: Sequence[pd.DataFrame], spec: SloSpec) -> SloHeadline:
    """The headline of a series from its runs' per-level tables (`value` and `req_per_s` with
    `GOODPUT_COLUMNS`): per run the highest level that met the SLOs, and the item it missed at
    the next level up (or, where every level met them, the one closest to its limit at the
    highest)."""
    best: list[float] = []
    missed: list[str] = []
    closest: list[str] = []
    for frame in runs:
        rows = frame[frame["slo_met"].notna()].sort_values("value")
        if rows.empty:
            continue
        met = rows["slo_met"].to_numpy(np.float64) == 1
        values = rows["value"].to_numpy(np.float64)
        texts = [
            binding_text(n, v, spec) for n, v in zip(rows["slo_binding"], rows["slo_binding_value"])
        ]
        top = int(np.flatnonzero(met)[-1]) if met.any() else -1
        best.append(values[top] if top >= 0 else math.nan)
        above = [i for i in range(top + 1, len(rows)) if not met[i]]
        if above:
            missed.append(texts[above[0]])
        else:
            closest.append(texts[-1])
    frame = pd.concat(list(runs), ignore_index=True) if runs else pd.DataFrame()
    peak_value = peak = thr_value = math.nan
    if not frame.empty and frame["goodput_req_per_s"].notna().any():
        mean = frame.groupby("value")[["goodput_req_per_s", "req_per_s"]].mean()
        values = mean.index.to_numpy(np.float64)
        goodput = mean["goodput_req_per_s"].to_numpy(np.float64)
        peak_value, peak = float(values[np.nanargmax(goodput)]), float(np.nanmax(goodput))
        thr_value = float(values[np.nanargmax(mean["req_per_s"].to_numpy(np.float64))])
    return SloHeadline(
        best=summarize(best),
        runs_without=sum(1 for b in best if b != b),
        binding=_most_common(missed) if missed else _most_common(closest),
        binding_missed=bool(missed),
        goodput_peak_value=peak_value,
        goodput_peak=peak,
        throughput_peak_value=thr_value,
    )
