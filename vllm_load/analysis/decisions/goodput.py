"""Goodput: the load a deployment carries while meeting latency SLOs (`slo.SloSpec`).

Per level, over the same measured window and measured requests as every other figure
(`levels.measure_levels`): the share of measured requests that are good (succeeded, every
per-request threshold held), goodput in req/s and output tok/s, whether the level meets the
SLOs, and which item bound it: the one it missed, or the one closest to its limit.

Goodput counts the work *good* requests did inside the window, as throughput counts the work
of successful ones (`window_rates.work_in_window`, any level's requests): with every request
good, goodput equals throughput.

A per-request threshold is missed at a level when fewer than the attainment share of its
measured requests hold it; how close it came is the attainment percentile of its figure over
them (failures as infinitely late), by the tables' own percentile method
(`levels.group_percentiles`): with attainment 99 %, the 99th percentile of the
requests' TTFT against `ttft<=2s`, where every request succeeded the table's TTFT p99.

A figure no successful request of a level has (a run that did not record it) is unknown there,
never 0 and never good: so are its good requests, its goodput and whether it met the SLOs
(`slo_unknown`), unless it missed another item.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from ...figures import per_request
from ...load_kinds import LoadKind, kind_named
from ...slo import Objective, SloSpec, Threshold
from ..frame_records import row_dicts
from ..levels import cancelled, group_percentiles
from ..levels.measure import LevelMeasurement
from ..levels.spans import success_spans
from ..levels.table import level_kinds
from ..levels.window_rates import work_in_window
from ..series.stats import Summary, summarize

#: per-level goodput figures, as_floats (averaged across runs)
GOODPUT_METRICS: tuple[str, ...] = (
    "slo_good",
    "slo_good_share",
    "goodput_req_per_s",
    "goodput_output_tok_per_s",
    "slo_met",
    "slo_unknown",  # 1: whether the level met the SLOs is unknown (a figure the run lacks)
    "slo_binding_ratio",
)
#: ... and the binding item, with its value (seconds; the success share for `success`)
GOODPUT_COLUMNS: tuple[str, ...] = (*GOODPUT_METRICS, "slo_binding", "slo_binding_value")
#: the binding item when failures alone keep a level from its attainment
SUCCESS = "success"
#: what every output says of a figure a run lacks (never 0, never good)
UNKNOWN = "unknown"


def as_floats(frame: pd.DataFrame, column: str) -> np.ndarray:
    if column not in frame:
        return np.full(len(frame), np.nan)
    return pd.to_numeric(frame[column], errors="coerce").to_numpy(np.float64, na_value=np.nan)


def good_requests(requests: pd.DataFrame, spec: SloSpec) -> np.ndarray:
    """Per row: it succeeded and every per-request threshold holds (an undefined figure, such as
    the TPOT of a one-token reply, does not count against it; one its declaration says a success
    must have, such as a reasoning reply's TTFAT, does: `_holds`)."""
    good = as_floats(requests, "ok") == 1
    for t in spec.thresholds:
        good &= _holds(requests, t)
    return good


def _absent_misses(t: Threshold) -> bool:
    """Whether a success without a value of the threshold's figure missed it (`figures`)."""
    source = per_request(t.metric)
    return source is not None and source.absent_misses


def _holds(requests: pd.DataFrame, t: Threshold) -> np.ndarray:
    """Per row: the threshold holds for it, or the request has no value of its figure and its
    figure exempts such a request (a reasoning reply that never answered missed `ttfat`)."""
    value = as_floats(requests, t.metric)
    return (np.isnan(value) & (not _absent_misses(t))) | (value <= t.limit)


def unknown_thresholds(measured: pd.DataFrame, spec: SloSpec) -> list[Threshold]:
    """The thresholds whose figure no successful request of `measured` has (a run that did not
    record it, an older run's requests.csv): whether a request is good is then unknown."""
    ok = as_floats(measured, "ok") == 1
    return [t for t in spec.thresholds if not (ok & ~np.isnan(as_floats(measured, t.metric))).any()]


def _threshold_value(requests: pd.DataFrame, t: Threshold, attainment: float) -> float:
    """The attainment quantile of a threshold's figure over a level's measured requests
    (`threshold_values`), by the tables' percentile method (`levels.group_percentiles`); NaN
    where no success has it (unknown)."""
    if (value := threshold_values(requests, t)) is None:
        return math.nan
    return float(group_percentiles(value, np.zeros(len(value), np.int64), 1, (attainment,))[0, 0])


def threshold_values(requests: pd.DataFrame, t: Threshold) -> np.ndarray | None:
    """Per request, the figure as judged: a failure infinitely late, a success without it as
    holding it (missing it: `_absent_misses`); None where no success has it (unknown)."""
    value = as_floats(requests, t.metric)
    ok = as_floats(requests, "ok") == 1
    if not (ok & ~np.isnan(value)).any():
        return None
    absent = np.inf if _absent_misses(t) else 0.0
    return np.where(ok, np.nan_to_num(value, nan=absent, posinf=np.inf), np.inf)


@dataclass(frozen=True)
class Judgement:
    """How a level fared against the SLOs: the item that bound it (`_judge`), its value (NaN:
    unknown) and value / limit, whether it met them (1, 0, NaN: unknown), and whether any item's
    figure is unknown there."""

    item: str
    value: float
    ratio: float
    met: float
    unknown: bool


def _judge(measured: pd.DataFrame, metrics_row: dict, spec: SloSpec) -> Judgement:
    """The item that bound a level: the success share where failures alone keep it from its
    attainment, else the item it missed furthest, else one whose figure is unknown (met NaN),
    else the one closest to its limit. A threshold is missed when fewer than the attainment share
    of the measured requests hold it (its value, the attainment percentile, says how far); an
    objective when its percentile is over its limit."""
    n = len(measured)
    if not n:
        return Judgement("", math.nan, math.nan, math.nan, False)
    ok = as_floats(measured, "ok") == 1
    missed: list[tuple[str, float, float]] = []
    unknown: list[tuple[str, float, float]] = []
    kept: list[tuple[str, float, float]] = []
    for t in spec.thresholds:
        value = _threshold_value(measured, t, spec.attainment)
        item = (t.text, value, value / t.limit)
        held = float((ok & _holds(measured, t)).sum()) / n
        (unknown if value != value else missed if held < spec.attainment else kept).append(item)
    for o in spec.objectives:
        value = float(metrics_row.get(o.column, math.nan))
        item = (o.text, value, value / o.limit)
        (unknown if value != value else missed if value > o.limit else kept).append(item)
    in_doubt = bool(unknown) and bool(ok.any())  # no success at all: failures bind, not figures
    if float(ok.mean()) < spec.attainment:
        return Judgement(SUCCESS, float(ok.mean()), math.inf, 0.0, in_doubt)
    if missed:
        return Judgement(*max(missed, key=lambda i: i[2]), 0.0, in_doubt)
    if unknown:
        return Judgement(*unknown[0], math.nan, True)
    if not kept:
        return Judgement("", math.nan, math.nan, 1.0, False)
    return Judgement(*max(kept, key=lambda i: i[2]), 1.0, False)


def level_goodput(
    requests: pd.DataFrame, measurement: LevelMeasurement, spec: SloSpec
) -> pd.DataFrame:
    """One row per level of `measurement.metrics` with `GOODPUT_COLUMNS` (and `level`). Where a
    threshold's figure is unknown at a level (`unknown_thresholds`), so are its good requests,
    its goodput, and whether it met the SLOs (unless it missed another item): NaN, with the
    unknown item as `slo_binding` and `slo_unknown` 1.

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
    judged_rows = ~cancelled(labelled)  # (closed by the client on purpose: neither good nor late)
    rows = []
    for rec in row_dicts(metrics):
        in_level = (labelled["level"] == rec["level"]).to_numpy() & judged_rows
        measured = labelled[in_level]
        row: dict = {"level": rec["level"], **_good(measured, good_measured[in_level], spec)}
        window = rec["window_s"]
        if window == window and row["slo_good"] == row["slo_good"]:
            work = work_in_window(spans, rec["window_start"], rec["window_end"])
            row["goodput_req_per_s"] = work.requests / window
            row["goodput_output_tok_per_s"] = work.output_tokens / window
        else:
            row["goodput_req_per_s"] = row["goodput_output_tok_per_s"] = math.nan
        judged = _judge(measured, rec, spec)
        met, share = judged.met, row["slo_good_share"]
        if met == 1 and not share >= spec.attainment:  # every item held, but not all at once
            met = 0.0
        row.update(
            slo_met=met,
            slo_unknown=float(judged.unknown),
            slo_binding=judged.item,
            slo_binding_value=judged.value,
            slo_binding_ratio=judged.ratio,
        )
        rows.append(row)
    return pd.DataFrame(rows, columns=["level", *GOODPUT_COLUMNS])


def _good(measured: pd.DataFrame, good: np.ndarray, spec: SloSpec) -> dict:
    """A level's good requests and their share of its measured ones: NaN where unknown (a
    level without a success has none good, whatever its figures)."""
    ok = as_floats(measured, "ok") == 1
    if not len(measured) or (ok.any() and unknown_thresholds(measured, spec)):
        return {"slo_good": math.nan, "slo_good_share": math.nan}
    n_good = int(good.sum())
    return {"slo_good": n_good, "slo_good_share": n_good / len(measured)}


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
    if value != value:
        items: list[Threshold | Objective] = [*spec.thresholds, *spec.objectives]
        figure = next((i.metric for i in items if i.text == name), name)
        return f"{name} ({UNKNOWN}: no successful measured request recorded {figure})"
    shown = _secs(value)
    if name in {t.text for t in spec.thresholds}:
        return f"{name} ({shown} at the {spec.attainment * 100:g}th percentile of requests)"
    return f"{name} ({shown})"


def _cell(value: float, spec: str, scale: float = 1.0, blank: str = "-") -> str:
    return format(value * scale, spec) if value == value else blank


def format_goodput_table(metrics: pd.DataFrame, goodput: pd.DataFrame, spec: SloSpec) -> str:
    """A fixed-width text table of `level_goodput` for the terminal, under the SLOs' rule (empty
    string for no levels). `metrics` is the run's per-level table (its level names)."""
    if goodput.empty:
        return ""
    kinds = level_kinds(metrics)
    names = {
        rec["level"]: kind_named(rec.get("kind")).number(rec["value"]) for rec in row_dicts(metrics)
    }
    header = (
        kinds[0].unit if len(kinds) == 1 else "level",
        "good %",
        "goodput req/s",
        "goodput out tok/s",
    )
    rows = [(*header, "SLOs", "bound by")]
    for rec in row_dicts(goodput):
        met = rec["slo_met"]
        blank = UNKNOWN if rec["slo_unknown"] == 1 else "-"
        rows.append(
            (
                names.get(rec["level"], "-"),
                _cell(rec["slo_good_share"], ".1f", 100.0, blank),
                _cell(rec["goodput_req_per_s"], ",.2f", blank=blank),
                _cell(rec["goodput_output_tok_per_s"], ",.0f", blank=blank),
                "met" if met == 1 else "missed" if met == 0 else blank,
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
    runs_unknown: int = 0  # runs left out: at some level, whether it met the SLOs is unknown
    unknown: str = ""  # what is unknown there (`binding_text`)

    def sentence(self, axis: LoadKind, spec: SloSpec) -> str:
        """The key finding, naming levels as the series' kind of load names them."""
        slos = ", ".join(spec.items())
        if self.runs_unknown and self.best.n == 0 and self.runs_without == 0:
            return f"Whether any tested level meets the SLOs ({slos}) is {UNKNOWN}: {self.unknown}."
        text = self._known(axis, slos)
        if self.runs_unknown:
            text += f" {self.runs_unknown} run(s) left out, where it is {UNKNOWN}: {self.unknown}."
        return text

    def _known(self, axis: LoadKind, slos: str) -> str:
        noun, what = axis.noun, axis.what
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
    unknown: list[str] = []
    for frame in runs:
        in_doubt = (as_floats(frame, "slo_unknown") == 1) & np.isnan(as_floats(frame, "slo_met"))
        if in_doubt.any():  # a level whose judgement is unknown: so is the run's best level
            rec = frame[in_doubt].iloc[0]
            unknown.append(binding_text(rec["slo_binding"], rec["slo_binding_value"], spec))
            continue
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
        runs_unknown=len(unknown),
        unknown=_most_common(unknown),
    )
