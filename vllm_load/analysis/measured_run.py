"""One run directory read and measured once, with what a level's judgement adds to its figures:
the typed result both the report (`report/model.py`'s `summarize_run`) and the summary a
finished run prints (`run/end_summary.py`) build on, so neither reads and measures a run twice.
Also that run judged on its own as a series: its diagnosis, and each level's verdict."""

from __future__ import annotations

import os
from dataclasses import dataclass

import pandas as pd

from ..load_kinds import LoadKind
from ..run_format.files import (
    CLIENT_HEALTH_CSV,
    SERVER_METRICS_CSV,
    role_metrics_csv,
    target_metrics_csv,
)
from ..run_format.load import RunData, analysis_columns, load_run
from ..run_format.optional_csv import CsvRead
from ..slo import SloSpec
from .decisions.goodput import binding_text, level_goodput
from .diagnosis.evidence import level_evidence
from .diagnosis.headline import Headline, headline
from .diagnosis.series import SeriesDiagnosis, diagnose_runs
from .levels.client_side import bound_levels, late_levels, level_client_health, read_client_health
from .levels.disagg import with_disagg
from .levels.gpu import with_gpu
from .levels.measure import LevelMeasurement, image_charges, measure_levels
from .levels.per_target import TargetFigures, target_figures
from .levels.rates import rate_verdicts
from .levels.server_queue import level_queue
from .levels.server_side import read_server_metrics
from .levels.speculation import with_speculation
from .series.curve import axis_of
from .series.level_curve import level_curve
from .series.saturation import analyse


@dataclass
class MeasuredRun:
    """A run read and measured: `meas` holds its levels' figures with the GPUs' (`metrics` that
    and, per level, goodput against the SLOs it was measured with, whether its client was late or
    bound, the server's queue and evidence, a requested rate's verdict, and its `run_id`)."""

    path: str
    data: RunData
    meas: LevelMeasurement
    metrics: pd.DataFrame
    server_read: CsvRead
    health_read: CsvRead
    client_levels: pd.DataFrame | None
    axis: LoadKind


def measure_run(path: str, slo: SloSpec = SloSpec()) -> MeasuredRun:
    """Load and measure one run directory; with SLOs, its levels' goodput too."""
    data = load_run(path, analysis_columns())
    meas = measure_levels(data.requests, data.steps, data.streams)
    meas.metrics = with_gpu(meas.metrics, data.gpu)  # GPU telemetry (analysis.levels.gpu)
    server_read = read_server_metrics(os.path.join(path, SERVER_METRICS_CSV))
    server = server_read.frame  # speculative decoding, where the server does it
    meas.metrics = with_speculation(meas.metrics, server)
    meas.metrics = with_disagg(meas.metrics, *read_roles(path))
    if slo:
        goodput = level_goodput(data.requests, meas, slo)
        goodput["slo_binding_text"] = [
            binding_text(n, v, slo)
            for n, v in zip(goodput["slo_binding"], goodput["slo_binding_value"])
        ]
        meas.metrics = meas.metrics.merge(goodput, on="level", how="left")
    health_read = read_client_health(os.path.join(path, CLIENT_HEALTH_CSV))
    health = health_read.frame
    client_levels = None
    if health is not None or data.requests["chunks_merged"].notna().any():
        client_levels = level_client_health(health, meas.metrics, data.requests)
    metrics = with_client_late(meas.metrics.copy(), client_levels)
    if server is not None:  # whether requests waited in the server's queue, per level
        metrics = metrics.merge(level_queue(server, meas.metrics), on="level", how="left")
        metrics = metrics.merge(level_evidence(server, meas.metrics), on="level", how="left")
    axis = axis_of(data.run, data.steps)
    if axis.open_loop:
        with_rate_verdicts(metrics)
    metrics.insert(0, "run_id", data.run_id)
    return MeasuredRun(path, data, meas, metrics, server_read, health_read, client_levels, axis)


def read_roles(path: str) -> tuple[pd.DataFrame | None, pd.DataFrame | None]:
    """A disaggregated deployment's prefill and decode servers' scrapes (--role-metrics; None
    where the run has none)."""
    prefill, decode = (
        read_server_metrics(os.path.join(path, role_metrics_csv(role))).frame
        for role in ("prefill", "decode")
    )
    return prefill, decode


def with_client_late(metrics: pd.DataFrame, client_levels: pd.DataFrame | None) -> pd.DataFrame:
    """`metrics` with `client_late` (bool) and `client_late_reason` per level (False and "" where
    the run's health does not say): whether the level's TTFT and ITL can be trusted."""
    late = late_levels(client_levels)
    metrics["client_late"] = [int(lv) in late for lv in metrics["level"]]
    metrics["client_late_reason"] = [late.get(int(lv), "") for lv in metrics["level"]]
    bound = bound_levels(client_levels)
    metrics["client_bound_reason"] = [bound.get(int(lv), "") for lv in metrics["level"]]
    return metrics


def with_rate_verdicts(metrics: pd.DataFrame) -> None:
    """An open-loop run's `metrics` with whether each level kept to its requested rate."""
    verdicts = rate_verdicts(metrics)
    metrics["rate_kept_up"] = [
        verdicts[lv].kept_up if lv in verdicts else None for lv in metrics["level"]
    ]
    metrics["rate_behind"] = [
        verdicts[lv].text() if lv in verdicts else "" for lv in metrics["level"]
    ]
    metrics["rate_unsteady"] = [
        verdicts[lv].unsteady_text() if lv in verdicts else "" for lv in metrics["level"]
    ]


def read_targets(
    path: str, data: RunData, meas: LevelMeasurement, metrics: pd.DataFrame
) -> list[TargetFigures]:
    """Each of a run's several targets (run.json `targets`), with its own scrapes."""
    run = data.run
    targets = [t for t in run.get("targets") or [] if isinstance(t, dict)]
    if len(targets) < 2:
        return []
    servers = [
        read_server_metrics(os.path.join(path, target_metrics_csv(i))).frame
        for i in range(len(targets))
    ]
    interval = run.get("settings", {}).get("metrics_interval")
    return target_figures(
        data.requests,
        meas.labelled,
        metrics,
        targets,
        servers,
        interval,
        meas.labelled_marks,
        data.streams,
    )


def diagnose_run(run: MeasuredRun) -> tuple[SeriesDiagnosis, dict[int, str], Headline]:
    """One run on its own as a series: its diagnosis, each level's verdict kind by level and its
    headline (what `vllm-load run` prints under its table)."""
    metrics = run.metrics
    curve = level_curve([metrics])
    sat = analyse(curve)
    sat.axis = run.axis
    diagnosis, per_run = diagnose_runs(
        [(run.data.run, metrics)], curve, sat, image_charges=image_charges(run.data.requests)
    )
    kinds = {value: v["kind"] for value, v in per_run[0].items()}
    levels = {
        int(lv): kinds.get(float(v), "-") for lv, v in zip(metrics["level"], metrics["value"])
    }
    return diagnosis, levels, headline(sat, diagnosis)


def diagnosis_lines(diagnosis: SeriesDiagnosis) -> list[str]:
    """The diagnosis as the terminal prints it: the verdict, the capacity model, the advice."""
    lines = [f"Why it saturates: {diagnosis.sentence}"]
    if diagnosis.gap:
        lines.append(f"  {diagnosis.gap}")
    lines += [f"  warning: {c}" for c in diagnosis.facts.conflicts]
    lines += [f"  advice: {a.text()}" for a in diagnosis.advice]
    return lines
