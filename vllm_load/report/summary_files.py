"""The report's numbers as plain data: `summary.json`, the long-form `summary.csv`.

`summary_dict` is the one source for the machine-readable outputs; the HTML and Markdown
templates show the same figures from the same `ReportData`, so every number in the HTML can
be found in the JSON and the CSV.

A level is named by its `value` in its kind of load (`load_kinds`: users, requests/s, s into a
trace), with `kind` and `unit` beside it; `users` is only ever the Locust users run for it.
Format 2 (format 1 keyed levels by a `users` that held requests/s in a rate run).
"""

from __future__ import annotations

import csv
import math
from dataclasses import asdict
from typing import Any, Iterator

import numpy as np
import pandas as pd

from .. import __version__
from ..analysis.frame_records import row_dicts
from ..analysis.series.stats import STAT_SUFFIXES
from ..load_kinds import kind_named
from .gpu_section import gpu_json
from .model import ReportData, SeriesReport
from .replay_section import replay_json, replay_rows
from .target_section import targets_json

#: per-run level columns that are not figures (timestamps are kept, they locate the window)
_LABEL_COLUMNS = ("stop_reason", "run_id")


def clean(value: Any) -> Any:
    """JSON-safe: NaN and infinities become None, numpy scalars become Python numbers."""
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is pd.NA or value is pd.NaT:
        return None
    return value


#: summary.json's format: 2 since levels are keyed by `value` (with `kind`, `unit`)
FORMAT = 2


def records(frame: pd.DataFrame) -> list[dict]:
    return [clean(r) for r in row_dicts(frame)]


def level_records(frame: pd.DataFrame) -> list[dict]:
    """Per-level records, each with its kind's `unit` beside its `kind` and `value`."""
    out = records(frame)
    for rec in out:
        if "kind" in rec and "unit" not in rec:
            rec["unit"] = kind_named(rec["kind"]).unit
    return out


def saturation_json(s: SeriesReport) -> dict:
    sat = s.saturation
    out = {
        "status": sat.status,
        "saturated": sat.saturated,
        "reason": sat.reason,
        "decision": None,
        "failed_levels": [asdict(f) for f in sat.failed],
        "peak": asdict(sat.peak) if sat.peak else None,
        "saturation_point": asdict(sat.saturation) if sat.saturation else None,
        "scaling": None,
        "past_saturation": None,
        "recommendations": [
            {
                "use_case": r.use_case,
                "value": r.point.value,
                "total_tok_per_s": r.point.tok_per_s,
                "e2e_p99": r.point.e2e_p99,
                "ttft_p99": r.point.ttft_p99,
                "note": r.note,
            }
            for r in sat.recommendations
        ],
    }
    if sat.decision is not None:
        out["decision"] = {**asdict(sat.decision), "text": sat.decision_text}
    if sat.scaling is not None:
        out["scaling"] = {**asdict(sat.scaling), "note": sat.scaling.note()}
    if sat.past_saturation is not None:
        cost = sat.past_saturation
        out["past_saturation"] = {
            **asdict(cost),
            "e2e_p99_added": cost.e2e_p99_added,
            "e2e_p99_change": cost.e2e_p99_change,
        }
    return clean(out)


def _slo(s: SeriesReport) -> dict | None:
    """The series' highest level meeting the SLOs across runs, and what bound it."""
    head = s.slo_headline
    if head is None:
        return None
    return clean(
        {
            "highest_level_meeting": asdict(head.best),
            "runs_meeting_at_no_level": head.runs_without,
            "runs_unknown": head.runs_unknown,
            "unknown": head.unknown,
            "bound_by": head.binding,
            "bound_by_missed": head.binding_missed,
            "goodput_peak_value": head.goodput_peak_value,
            "goodput_peak_req_per_s": head.goodput_peak,
            "throughput_peak_value": head.throughput_peak_value,
        }
    )


def _with_bottlenecks(levels: list[dict], verdicts: dict[float, dict]) -> list[dict]:
    """Level records with `bottleneck`: their verdict (`analysis.diagnosis`), None without one."""
    for level in levels:
        value = level.get("value")
        level["bottleneck"] = clean(verdicts.get(float(value))) if value is not None else None
    return levels


def summary_dict(data: ReportData) -> dict:
    """Everything the report shows, as JSON-ready data."""
    return clean(
        {
            "format": FORMAT,
            "generated_at": data.generated_at,
            "vllm_load_version": __version__,
            "confidence": 0.95,
            "slo": {"items": data.slo.items(), "rule": data.slo.describe()} if data.slo else None,
            "rules": {
                "saturation": data.rule.describe(),
                "failed_levels": data.rule.describe_failures(),
                "recommendations": data.rule.describe_recommendations(),
            },
            "series": [
                {
                    "label": s.label,
                    "model": s.series.model,
                    "n_runs": s.n_runs,
                    "run_ids": [r.run_id for r in s.runs],
                    "settings": s.series.settings,
                    "kind": s.axis.name,  # its levels' kind of load, and what their values count
                    "unit": s.axis.unit,
                    "levels": _with_bottlenecks(
                        level_records(s.curve),
                        {v.value: v.as_json() for v in s.diagnosis.levels} if s.diagnosis else {},
                    ),
                    "saturation": saturation_json(s),
                    "diagnosis": clean(s.diagnosis.as_json()) if s.diagnosis else None,
                    "slo": _slo(s),
                    "findings": s.findings,
                }
                for s in data.series
            ],
            "comparison": [asdict(r) for r in data.comparison],
            "comparison_findings": data.comparison_findings,
            "runs": [
                {
                    "run_id": r.run_id,
                    "path": r.path,
                    "model": r.model,
                    "series": r.series_label,
                    "kind": r.axis.name,
                    "unit": r.axis.unit,
                    "outcome": r.run.get("outcome"),
                    "started_at": r.run.get("started_at"),
                    "ended_at": r.run.get("ended_at"),
                    "levels": _with_bottlenecks(level_records(r.metrics), r.bottlenecks),
                    "errors": records(r.errors),
                    "workers_lost": r.run.get("workers_lost") or [],
                    "input_notes": r.input_notes,  # what was left out of its files, and why
                    "client_validation": r.client_validation,
                    "server_levels": records(r.server_levels)
                    if r.server_levels is not None
                    else None,
                    "client_levels": records(r.client_levels)
                    if r.client_levels is not None
                    else None,
                    # `analysis.breakdown`'s tables: [] / {} when the run had one persona / no
                    # conversations (turns from 0, as in requests.csv)
                    "personas": records(r.personas) if r.personas is not None else [],
                    "turns": records(r.turns) if r.turns is not None else [],
                    "conversations": r.conversations or {},
                    # its trace replays over time (`analysis.replay`): [] for a run without
                    "replays": [replay_json(p) for p in r.replays],
                    "gpu_metrics": gpu_json(r.run),  # where its GPU figures came from
                    # each of several targets (--hosts): [] for a run of one
                    "targets": targets_json(r),
                }
                for r in data.runs
            ],
        }
    )


def _split_stat(column: str) -> tuple[str, str]:
    for suffix in STAT_SUFFIXES:
        if column.endswith(f"_{suffix}"):
            return column[: -len(suffix) - 1], suffix
    return column, "value"


#: summary.csv's columns: `kind` and `level_value` name the level a row is about (empty for a
#: row about no level; `value` is the row's figure)
CSV_COLUMNS = ("scope", "series", "run_id", "kind", "level_value", "metric", "stat", "value")


def summary_rows(summary: dict) -> Iterator[tuple]:
    """Long-form rows (`CSV_COLUMNS`) of `summary_dict`."""
    for s in summary["series"]:
        kind = s.get("kind", "")
        for level in s["levels"]:
            value = level.get("value")
            for column, figure in level.items():
                if column in ("value", "kind", "unit") or figure is None or figure == "":
                    continue
                if column == "bottleneck":
                    for metric, stat, v in _bottleneck_cells(figure):
                        yield ("series", s["label"], "", kind, value, metric, stat, v)
                    continue
                metric, stat = _split_stat(column)
                yield ("series", s["label"], "", kind, value, metric, stat, figure)
        diagnosis = s.get("diagnosis") or {}
        for name in ("kind", "value", "predicted_knee", "advised_knee"):
            if diagnosis.get(name) is not None:
                yield ("diagnosis", s["label"], "", "", "", name, "value", diagnosis[name])
        for advice in diagnosis.get("advice") or []:
            for stat in ("from", "to"):
                if advice.get(stat) is not None:
                    yield (
                        "diagnosis",
                        s["label"],
                        "",
                        "",
                        "",
                        f"advice.{advice['flag']}",
                        stat,
                        advice[stat],
                    )
        sat = s["saturation"]
        for key in ("peak", "saturation_point", "scaling", "past_saturation"):
            for name, figure in (sat.get(key) or {}).items():
                if (
                    isinstance(figure, (int, float))
                    and not isinstance(figure, bool)
                    and figure is not None
                ):
                    yield ("saturation", s["label"], "", kind, "", f"{key}.{name}", "value", figure)
        for name, figure in (s.get("slo") or {}).get("highest_level_meeting", {}).items():
            if figure is not None:
                yield ("slo", s["label"], "", kind, "", "highest_level_meeting", name, figure)
        for name in (
            "goodput_peak_value",
            "goodput_peak_req_per_s",
            "throughput_peak_value",
            "runs_unknown",
        ):
            figure = (s.get("slo") or {}).get(name)
            if figure is not None:
                yield ("slo", s["label"], "", kind, "", name, "value", figure)
        for name in ("n", "runs_needed"):
            figure = (sat.get("decision") or {}).get(name)
            if figure is not None:
                yield ("saturation", s["label"], "", "", "", f"decision.{name}", "value", figure)
        for f in sat["failed_levels"]:
            for name in ("worst_share", "mean_share"):
                yield (
                    "failed_level",
                    s["label"],
                    "",
                    kind,
                    f["value"],
                    f"failed_{name}",
                    "value",
                    f[name],
                )
        for rec in sat["recommendations"]:
            yield (
                "recommendation",
                s["label"],
                "",
                kind,
                rec["value"],
                rec["use_case"],
                "value",
                rec["value"],
            )
    for row in summary["comparison"]:
        for name, figure in row.items():
            if (
                isinstance(figure, (int, float))
                and not isinstance(figure, bool)
                and figure is not None
            ):
                yield (
                    "comparison",
                    row["label"],
                    "",
                    row.get("kind", ""),
                    "",
                    name,
                    "value",
                    figure,
                )
    for run in summary["runs"]:
        for level in run["levels"]:
            value, kind = level.get("value"), level.get("kind", "")
            for column, figure in level.items():
                if (
                    column in ("value", "kind", "unit", *_LABEL_COLUMNS)
                    or figure is None
                    or figure == ""
                ):
                    continue
                if column == "bottleneck":
                    for metric, stat, v in _bottleneck_cells(figure):
                        yield ("run", run["series"], run["run_id"], kind, value, metric, stat, v)
                    continue
                yield ("run", run["series"], run["run_id"], kind, value, column, "value", figure)
        for err in run["errors"]:
            yield (
                "errors",
                run["series"],
                run["run_id"],
                "",
                "",
                f"level{err['level']}.{err['error']}"
                + (f".{err['status']}" if err.get("status") else ""),
                "count",
                err["count"],
            )
        yield from _breakdown_rows(run)
        yield from replay_rows(run)
        if run.get("gpu_metrics"):  # simulated GPU figures say so in the CSV too
            simulated = int(bool(run["gpu_metrics"]["simulated"]))
            yield ("gpu", run["series"], run["run_id"], "", "", "gpu_simulated", "value", simulated)


def _bottleneck_cells(verdict: dict) -> Iterator[tuple[str, str, object]]:
    """A level's verdict as (metric, stat, value) cells: its kind, then its evidence."""
    yield ("bottleneck", "kind", verdict["kind"])
    for name, value in (verdict.get("evidence") or {}).items():
        yield (f"bottleneck.{name}", "value", value)


def _breakdown_rows(run: dict) -> Iterator[tuple]:
    """A run's per-persona (`<persona>.<figure>` at its level), per-turn (`turn<n>.<figure>`,
    turns from 0) and conversation rows."""
    series, run_id, kind = run["series"], run["run_id"], run.get("kind", "")
    for row in run.get("personas") or []:
        for column, figure in row.items():
            if column in ("value", "user_class") or figure is None:
                continue
            metric = f"{row['user_class']}.{column}"
            yield ("persona", series, run_id, kind, row.get("value"), metric, "value", figure)
    for row in run.get("turns") or []:
        for column, figure in row.items():
            if column != "turn" and figure is not None:
                metric = f"turn{row['turn']}.{column}"
                yield ("turn", series, run_id, "", "", metric, "value", figure)
    for name, figure in (run.get("conversations") or {}).items():
        if figure is not None:
            yield ("conversations", series, run_id, "", "", name, "value", figure)


def write_summary_csv(summary: dict, path: str) -> int:
    """Write `summary_rows` with a header; returns the number of data rows."""
    n = 0
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(CSV_COLUMNS)
        for row in summary_rows(summary):
            writer.writerow(row)
            n += 1
    return n
