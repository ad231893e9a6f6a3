"""The numbers of a report: runs loaded and measured, grouped into series, aggregated, analysed.

`build_report_data` is the only step that reads files (through `run_format.load`); what it
returns is everything the templates, charts and summary files show. The module is long because
every section of a report (levels, servers, replays, GPUs, findings) meets in its one model.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from ..analysis.decisions.goodput import (
    SloHeadline,
    slo_headline,
)
from ..analysis.decisions.speculation_k import (
    draft_tokens,
    level_choices,
    speculation_k_findings,
)
from ..analysis.decisions.speculation_verdict import speculation_diagnosis
from ..analysis.diagnosis.headline import Headline, headline
from ..analysis.diagnosis.series import SeriesDiagnosis, diagnose_runs
from ..analysis.frame_records import row_dicts
from ..analysis.levels.breakdown import conversation_summary, persona_table, turn_table
from ..analysis.levels.disagg import disagg_findings
from ..analysis.levels.gpu import gpu_findings
from ..analysis.levels.hist import pad_columns
from ..analysis.levels.measure import image_charges
from ..analysis.levels.per_target import TargetFigures, target_findings
from ..analysis.levels.rates import RateRule
from ..analysis.levels.server_side import level_server_figures
from ..analysis.levels.speculation import speculation_findings
from ..analysis.levels.table import error_counts
from ..analysis.levels.work_timeline import work_timeline
from ..analysis.measured_run import measure_run, read_targets
from ..analysis.replay.read import Replay, read_replays
from ..analysis.series.failures import failure_kinds
from ..analysis.series.findings import findings
from ..analysis.series.level_curve import level_curve
from ..analysis.series.model_comparison import ModelRow, compare, comparison_findings
from ..analysis.series.outcome import RunOutcome, outcome_of
from ..analysis.series.saturation import Saturation, SaturationRule, analyse
from ..analysis.series.stats import Series, group_runs
from ..analysis.sessions import session_summary, session_table
from ..load_kinds import CONCURRENCY, LoadKind
from ..run_format.load import (
    read_client_validation,
    read_run_json,
)
from ..slo import SloSpec, parse_slo


@dataclass
class RunSummary:
    """One run, measured: its per-level table and what the charts need from its requests."""

    run_id: str
    path: str
    model: str
    run: dict
    metrics: pd.DataFrame
    itl_counts: np.ndarray
    measured: pd.DataFrame
    timeline: pd.DataFrame
    history: pd.DataFrame | None
    steps: pd.DataFrame
    errors: pd.DataFrame  # every recorded failure, warm-up included (the run's errors table)
    #: the failures of the levels' measured requests, the set whose share the findings give
    measured_errors: pd.DataFrame
    client_validation: dict | None = None  # `vllm-load validate-client --run` result, when present
    server: pd.DataFrame | None = None  # server_metrics.csv, when the target had /metrics
    server_levels: pd.DataFrame | None = None  # per-level server figures against the client's
    client_levels: pd.DataFrame | None = (
        None  # per-level CPU, loop lag, run-queue wait, merged chunks
    )
    series_label: str = ""
    personas: pd.DataFrame | None = None  # per level and user class (`analysis.breakdown`)
    turns: pd.DataFrame | None = None  # per turn of the run's conversations
    conversations: dict | None = None  # the run's conversations as wholes
    sessions: dict | None = None  # per session: E2E, tool calls, idle and cached shares
    axis: LoadKind = CONCURRENCY  # what its levels are (users, or requests/s)
    outcome: RunOutcome | None = None  # how it ended: interrupted, target lost, workers lost
    bottlenecks: dict[float, dict] = field(default_factory=dict)  # value -> its verdict, as JSON

    def failures_by_value(self) -> pd.DataFrame:
        """Its measured requests' failure counts (`error_counts`) with each level's `value` in
        its kind of load."""
        errors = self.measured_errors
        values = dict(zip(self.metrics["level"], self.metrics["value"]))
        return errors.assign(value=errors["level"].map(values)).dropna(subset=["value"])

    #: the prompt tokens the server charged per image count (`measure.image_charges`)
    image_charges: dict[int, int] = field(default_factory=dict)
    input_notes: list[str] = field(default_factory=list)  # what was left out of its files, why
    replays: list[Replay] = field(default_factory=list)  # its trace replays, read over time
    targets: list[TargetFigures] = field(default_factory=list)  # each of several targets'


@dataclass
class SeriesReport:
    """A series (same model and settings) with its statistics across runs and its analysis."""

    series: Series
    runs: list[RunSummary]
    curve: pd.DataFrame
    saturation: Saturation
    findings: list[str]
    dist_value: float | None = None  # the level the distributions are drawn at
    ttft_at_dist: np.ndarray = field(default_factory=lambda: np.array([]))
    itl_at_dist: np.ndarray = field(default_factory=lambda: np.zeros(1, dtype=np.int64))
    axis: LoadKind = CONCURRENCY  # what its levels are (users, or requests/s)
    slo_headline: SloHeadline | None = None  # with SLOs: the highest level meeting them
    outcome_findings: list[str] = field(default_factory=list)  # how its runs ended (first)
    diagnosis: SeriesDiagnosis | None = None  # why it saturates, and what to change
    slo_finding: str = ""  # the SLO headline as a finding (after those)
    headline: Headline | None = None  # the five answers first in the report (`headline`)

    @property
    def label(self) -> str:
        return self.series.label

    @property
    def n_runs(self) -> int:
        return self.series.n_runs


@dataclass
class ReportData:
    """Everything a report shows."""

    runs: list[RunSummary]
    series: list[SeriesReport]
    comparison: list[ModelRow]
    comparison_findings: list[str]
    rule: SaturationRule
    generated_at: str
    slo: SloSpec = field(default_factory=SloSpec)  # the SLOs the levels were judged against


def _by_load(runs: Sequence[RunSummary]) -> dict[tuple[str, str], list[RunSummary]]:
    """The runs of one model and kind of load (what `decisions.speculation_k` ranks K across)."""
    groups: dict[tuple[str, str], list[RunSummary]] = {}
    for r in runs:
        groups.setdefault((r.model, r.axis.name), []).append(r)
    return groups


def _speculation_k(runs: Sequence[RunSummary]) -> list[str]:
    """Where speculation stops paying and K per load, across the runs of one model and kind of
    load against servers of several K (`decisions.speculation_k`)."""
    out = []
    for (model, _), members in _by_load(runs).items():
        found = speculation_k_findings(
            [(r.run_id, r.metrics) for r in members], members[0].axis.unit
        )
        out += [f"{model}: {text}" for text in found]
    return out


def _speculation_diagnoses(series: Sequence[SeriesReport], runs: Sequence[RunSummary]) -> None:
    """Each series whose K stopped paying against the report's runs of other K gets that verdict
    and its advice as its diagnosis (`decisions.speculation_verdict`)."""
    choices = {
        key: level_choices([(r.run_id, r.metrics) for r in members])
        for key, members in _by_load(runs).items()
    }
    for s in series:
        first = s.runs[0]
        ks = {draft_tokens(r.metrics) for r in s.runs}
        if s.diagnosis is None or len(ks) != 1:
            continue
        s.diagnosis = speculation_diagnosis(
            s.diagnosis, ks.pop(), choices[(first.model, first.axis.name)], first.axis.unit
        )
        s.headline = headline(s.saturation, s.diagnosis)


def recorded_slo(path: str) -> SloSpec:
    """The SLOs a run was started with (run.json settings `slo`); none for older runs. Raises
    DamagedRun (a ValueError) on a run.json that is not a run record."""
    return parse_slo(read_run_json(path)["settings"].get("slo") or [])


def report_slo(run_dirs: Sequence[str], given: SloSpec | None) -> SloSpec:
    """The SLOs a report judges every run against: `given` (report --slo), else those the runs
    were started with (runs started without any aside), which must then agree: one series'
    runs are averaged level by level."""
    if given:
        return given
    recorded = {items: p for p in run_dirs if (items := tuple(recorded_slo(p).items()))}
    if len(recorded) > 1:
        shown = "; ".join(" ".join(k) for k in recorded)
        raise ValueError(
            f"the runs were started with different --slo ({shown}): pass --slo to judge them alike"
        )
    return parse_slo(list(next(iter(recorded), ())))


def summarize_run(
    path: str, slo: SloSpec = SloSpec(), trace_window: float | None = None
) -> RunSummary:
    """Load and measure one run directory (`analysis.measured_run`); with SLOs, its levels'
    goodput too; a trace replay over time, in windows of `trace_window` s (default:
    `analysis.replay.read_replays`')."""
    measured = measure_run(path, slo)
    data, meas, metrics = measured.data, measured.meas, measured.metrics
    server = measured.server_read.frame
    return RunSummary(
        run_id=data.run_id,
        path=path,
        model=data.model,
        run=data.run,
        metrics=metrics,
        itl_counts=meas.itl_counts,
        measured=meas.measured[["level", "ttft"]],
        timeline=work_timeline(data.requests),
        history=data.history,
        steps=metrics[["level", "value", "level_start", "level_end", "stop_reason"]].copy(),
        errors=error_counts(data.requests),
        measured_errors=error_counts(meas.labelled),
        client_validation=read_client_validation(path),
        server=server,
        server_levels=(
            level_server_figures(
                server,
                meas.metrics,
                data.requests,
                (data.run.get("server_metrics") or {}).get("interval"),
                streams=data.streams,
            )
            if server is not None
            else None
        ),
        client_levels=measured.client_levels,
        personas=persona_table(meas.labelled, metrics, meas.labelled_marks),
        turns=turn_table(meas.labelled),
        conversations=conversation_summary(data.requests),
        sessions=session_summary(session_table(data.requests), data.requests),
        axis=measured.axis,
        outcome=outcome_of(data),
        image_charges=image_charges(data.requests),
        input_notes=[
            *data.notes,
            *(r.note for r in (measured.server_read, measured.health_read) if r.note),
        ],
        replays=read_replays(
            data.requests, data.steps, data.run, server, slo, trace_window, data.streams
        ),
        targets=read_targets(path, data, meas, metrics),
    )


def input_findings(runs: Sequence[RunSummary]) -> list[str]:
    """What the report left out of the runs' files, and why: first among a series' findings."""
    return [
        f"Run {r.run_id}: {note} The figures below are from what is sound."
        for r in runs
        for note in r.input_notes
    ]


def rate_findings(runs: Sequence[RunSummary], rule: RateRule = RateRule()) -> list[str]:
    """Whether the target kept up with the requested rates of an open-loop series, run by run
    (`analysis.rates`); nothing for a series with no requested rate (concurrency, a trace)."""
    judged = [
        (r.run_id, rec)
        for r in runs
        for rec in row_dicts(r.metrics)
        if rec.get("rate_kept_up") in (True, False)
    ]
    if not judged:
        return []
    behind = [(run_id, rec) for run_id, rec in judged if rec["rate_kept_up"] is False]
    if not behind:
        return [
            "The target kept up with every requested rate: it completed the requests within "
            f"{rule.tolerance:.0%} of the rate they arrived at during each measured window (or "
            "the noise of the requests in flight at its edges), with no queue building up."
        ]
    levels = sorted({float(rec["requested_rate"]) for _, rec in behind})
    out = [
        f"The target could not keep up at {', '.join(f'{x:,.4g}' for x in levels)} requests/s: "
        "the requests completed more slowly than they arrived, or their queueing grew through "
        "the level. " + rule.describe()
    ]
    out += [f"Run {run_id}, {rec['rate_behind']}." for run_id, rec in behind]
    return out


def _distributions(report: SeriesReport) -> None:
    """TTFT values and merged ITL counts at the saturation level (the peak when not saturated)."""
    point = report.saturation.saturation if report.saturation.saturated else report.saturation.peak
    if point is None:
        return
    report.dist_value = point.value
    ttfts, itls = [], []
    for run in report.runs:
        rows = run.metrics.index[run.metrics["value"] == point.value]
        for i in rows:
            level = run.metrics.at[i, "level"]
            ttfts.append(
                run.measured.loc[run.measured["level"] == level, "ttft"].dropna().to_numpy()
            )
            itls.append(run.itl_counts[i][None, :])
    report.ttft_at_dist = np.concatenate(ttfts) if ttfts else np.array([])
    report.itl_at_dist = (
        np.sum(pad_columns(itls), axis=0)[0] if itls else np.zeros(1, dtype=np.int64)
    )


def build_report_data(
    run_dirs: Sequence[str],
    gpus_per_model: Mapping[str, float] | None = None,
    rule: SaturationRule = SaturationRule(),
    step: Callable[[str], None] = lambda _msg: None,
    slo: SloSpec | None = None,
    trace_window: float | None = None,
) -> ReportData:
    """Measure every run, group runs into series, aggregate, analyse and compare.

    `step(description)` is called once per unit of work (one per run, then one per series).
    The levels are judged against `slo`, else the SLOs the runs were started with (`report_slo`).
    A trace replay is read in windows of `trace_window` s (default: `summarize_run`'s).
    """
    spec = report_slo(run_dirs, slo)
    runs: list[RunSummary] = []
    for path in run_dirs:
        step(f"measuring {path}")
        runs.append(summarize_run(path, spec, trace_window))
    groups = group_runs([r.run for r in runs])
    series: list[SeriesReport] = []
    for g in groups:
        step(f"analysing {g.label}")
        members = [runs[i] for i in g.run_indices]
        for r in members:
            r.series_label = g.label
        curve = level_curve([r.metrics for r in members])
        kinds = failure_kinds(pd.concat([r.failures_by_value() for r in members]))
        curve["failure_kinds"] = [kinds.get(float(v), "") for v in curve["value"]]
        sat = analyse(curve, rule)
        sat.axis = members[0].axis  # one series, one kind of level (`stats.comparable_settings`)
        outcomes = [r.outcome for r in members if r.outcome is not None]
        report = SeriesReport(
            series=g,
            runs=members,
            curve=curve,
            saturation=sat,
            findings=input_findings(members)
            + findings(curve, sat, g.n_runs, rule, outcomes)
            + rate_findings(members)
            + [
                f"Run {r.run_id}, trace replay: {line.text}"
                for r in members
                for replay in r.replays
                for line in replay.lines()
                if line.warn
            ]
            + [t for r in members for t in gpu_findings(r.run_id, r.run, r.metrics)]
            + [t for r in members for t in speculation_findings(r.run_id, r.metrics)]
            + [t for r in members for t in disagg_findings(r.run_id, r.metrics)]
            + [t for r in members for t in target_findings(r.run_id, r.targets)],
            axis=sat.axis,
            outcome_findings=[text for o in outcomes for text in o.sentences()],
        )
        report.diagnosis, verdicts = diagnose_runs(
            [(r.run, r.metrics) for r in members],
            curve,
            sat,
            rule.tolerance,
            members[0].image_charges,
        )
        for r, bottlenecks in zip(members, verdicts):
            r.bottlenecks = bottlenecks
        report.headline = headline(sat, report.diagnosis)
        if spec:
            report.slo_headline = slo_headline([r.metrics for r in members], spec)
            report.slo_finding = report.slo_headline.sentence(sat.axis, spec)
            # after how the runs ended, before every figure
            report.findings.insert(len(report.outcome_findings), report.slo_finding)
        _distributions(report)
        series.append(report)
    _speculation_diagnoses(series, runs)
    rows = compare(
        [s.series for s in series],
        [s.saturation for s in series],
        [r.run for r in runs],
        gpus_per_model,
    )
    return ReportData(
        runs=runs,
        series=series,
        comparison=rows,
        comparison_findings=comparison_findings(rows) + _speculation_k(runs),
        rule=rule,
        slo=spec,
        generated_at=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ"),
    )
