"""The numbers of `vllm-load compare`: both sides' runs loaded and measured, then compared.

`build_compare_data` is the only step of the comparison that reads files; what it returns is
everything the templates, the chart and the JSON show (`compare_dict`).
"""

from __future__ import annotations

import datetime as _dt
import math
import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Sequence

from ..analysis.decisions.ab import (
    BETTER,
    HIGHER,
    LOWER,
    UNSURE,
    WORSE,
    ABResult,
    Comparison,
    RunLevels,
    compare_runs,
    worse_by,
)
from ..analysis.decisions.workload import workload_differences
from ..analysis.levels.gpu import with_gpu
from ..analysis.levels.measure import measure_levels
from ..analysis.series.curve import axis_of
from ..load_kinds import CONCURRENCY, LoadKind
from ..run_format.gpu_metrics import source_line
from ..run_format.load import analysis_columns, load_run


@dataclass
class Side:
    """One side of the comparison: its name, its run directories and their per-level figures."""

    name: str
    paths: list[str]
    runs: list[RunLevels]
    models: list[str]
    axis: LoadKind
    records: list[dict] = field(default_factory=list)  # each run's run.json
    notes: list[str] = field(default_factory=list)  # what was left out of its runs' files, and why
    gpu_sources: list[str] = field(default_factory=list)  # where its GPU figures came from


@dataclass
class CompareData:
    """Everything a comparison shows."""

    a: Side
    b: Side
    result: ABResult
    generated_at: str
    resamples: int
    seed: int
    fail_if_worse: float | None = None  # the --fail-if-worse threshold (relative), if given
    worse: list[Comparison] = field(default_factory=list)  # what crossed it
    #: how the sides' workloads differ, when compared anyway (--allow-different-workloads)
    workload_differences: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return bool(self.worse)


def level_text(level: float, axis: LoadKind) -> str:
    """A level as the comparison names it: `64 users`, `2.50 requests/s`."""
    return axis.text(level)


def load_side(name: str, paths: Sequence[str]) -> Side:
    """Read and measure the runs of one side. Raises ValueError on a run that cannot be read,
    or runs of both kinds (concurrency levels and request rates) on one side."""
    runs, models, axes, records, notes = [], [], set(), [], []
    gpu: list[str] = []  # GPU telemetry: each run's source line (simulated ones say so)
    for path in paths:
        data = load_run(path, analysis_columns())
        meas = measure_levels(data.requests, data.steps, data.streams)
        meas.metrics = with_gpu(meas.metrics, data.gpu)  # GPU telemetry (analysis.levels.gpu)
        runs.append(RunLevels(data.run_id, meas.metrics, meas.measured))
        if data.model not in models:
            models.append(data.model)
        axes.add(axis_of(data.run, data.steps))
        records.append(data.run)
        notes += [f"run {data.run_id}: {note}" for note in data.notes]
        gpu += [f"{data.run_id}: {line}" for line in [source_line(data.run)] if line]
    if len(axes) > 1:
        raise ValueError(f"{name} mixes concurrency runs and --rates runs: compare like with like")
    side = Side(
        name, list(paths), runs, models, axes.pop() if axes else CONCURRENCY, records, notes
    )
    side.gpu_sources = gpu
    return side


def build_compare_data(
    a_paths: Sequence[str],
    b_paths: Sequence[str],
    a_name: str = "A",
    b_name: str = "B",
    alpha: float = 0.05,
    correction: str = "level",
    resamples: int = 2000,
    seed: int = 0,
    fail_if_worse: float | None = None,
    allow_different_workloads: bool = False,
) -> CompareData:
    """Load both sides and compare every headline figure at every level they share.

    Raises ValueError when a run is on both sides, a run cannot be read, the sides' levels are
    of different kinds, they share no level, or their runs sent different workloads (unless
    `allow_different_workloads`: the differences are then in `workload_differences`).
    """
    both = sorted(set(map(os.path.realpath, a_paths)) & set(map(os.path.realpath, b_paths)))
    if both:
        raise ValueError(f"{both[0]} is in both {a_name} and {b_name}")
    a, b = load_side(a_name, a_paths), load_side(b_name, b_paths)
    if a.axis is not b.axis:
        raise ValueError(
            f"{a_name} tested {a.axis.plural} and {b_name} {b.axis.plural}: nothing to compare"
        )
    differ = workload_differences(a.records, b.records, a_name, b_name)
    if differ and not allow_different_workloads:
        raise ValueError(
            f"{a_name} and {b_name} did not send the same workload ({'; '.join(differ)}): their "
            "figures measure different work; compare runs of one workload, or pass "
            "--allow-different-workloads to compare them anyway"
        )
    result = compare_runs(a.runs, b.runs, alpha, correction, resamples, seed)
    if not result.levels:
        raise ValueError(
            f"{a_name} and {b_name} share no measured level ({a_name}: "
            f"{_levels_text(result.only_a, a.axis)}; {b_name}: {_levels_text(result.only_b, b.axis)})"
        )
    return CompareData(
        a=a,
        b=b,
        result=result,
        generated_at=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        resamples=resamples,
        seed=seed,
        fail_if_worse=fail_if_worse,
        worse=worse_by(result, fail_if_worse) if fail_if_worse is not None else [],
        workload_differences=differ,
    )


def outcome_text(data: CompareData) -> str:
    """The comparison's outcome in one sentence: the verdicts counted, or why there are none."""
    res, a, b = data.result, data.a.name, data.b.name
    untested = [c for c in res.comparisons if not c.tested]
    if not res.n_tested:
        n = min(min(c.a.n, c.b.n) for c in untested) if untested else 0
        return (
            f"no test possible at n = {n}: no verdict on any of the {len(res.comparisons)} "
            f"comparisons ({a}: {len(data.a.runs)} run(s), {b}: {len(data.b.runs)} run(s)); "
            "run each side at least twice to compare configurations"
        )
    counts = Counter(c.verdict for c in res.comparisons if c.tested)
    text = (
        f"{b} better on {counts[BETTER]}, worse on {counts[WORSE]}, no significant difference "
        f"at this n on {counts[UNSURE]} of the {res.n_tested} comparisons tested"
    )
    if counts[HIGHER] or counts[LOWER]:  # figures with no better side (draft acceptance rate)
        text += (
            f"; higher on {counts[HIGHER]} and lower on {counts[LOWER]} with no better side (the "
            "draft acceptance rate: it falls as K rises, acceptance length and throughput judge)"
        )
    if untested:
        n = min(min(c.a.n, c.b.n) for c in untested)
        text += f"; {len(untested)} with no test possible (n = {n} on a side)"
    return text


def _levels_text(levels: Sequence[float], axis: LoadKind) -> str:
    return ", ".join(level_text(lv, axis) for lv in levels) or "none"


def dropped_text(data: CompareData) -> str:
    """Which levels only one side measured (left out of the comparison); empty when none."""
    parts = []
    for side, levels in ((data.a, data.result.only_a), (data.b, data.result.only_b)):
        if levels:
            parts.append(f"only {side.name} measured {_levels_text(levels, side.axis)}")
    return "; ".join(parts)


def numeric(value: float) -> float | None:
    """JSON has no NaN: a missing figure is null."""
    return None if value is None or math.isnan(value) else float(value)


def comparison_dict(c: Comparison) -> dict:
    """One row of the JSON: both sides, the difference, the test, the verdict."""
    r = c.result
    row: dict[str, object] = {
        "figure": c.figure.key,
        "label": c.figure.label,
        "unit": c.figure.unit,
        "higher_is_better": c.figure.higher_is_better,
        "a": {"n": c.a.n, "mean": numeric(c.a.mean), "std": numeric(c.a.std)},
        "b": {"n": c.b.n, "mean": numeric(c.b.mean), "std": numeric(c.b.std)},
        "diff": numeric(c.diff),
        "rel_diff": numeric(c.rel_diff),
        "test": r.test,
        "test_diff": numeric(r.diff),
        "ci_low": numeric(r.ci_low),
        "ci_high": numeric(r.ci_high),
        "p": numeric(r.p),
        "p_adjusted": numeric(c.p_adjusted),
        "verdict": c.verdict,
        "note": r.note,
        "mann_whitney_p": numeric(c.distribution_p),
    }
    if c.requests is not None:
        q = c.requests
        row["requests_test"] = {
            "test": q.test,
            "diff": numeric(q.diff),
            "ci_low": numeric(q.ci_low),
            "ci_high": numeric(q.ci_high),
            "p": numeric(q.p),
        }
    return row


def compare_dict(data: CompareData) -> dict:
    """The comparison as JSON-able data (the `.json` written beside the HTML)."""
    res = data.result
    return {
        "generated_at": data.generated_at,
        "sides": {
            key: {"name": s.name, "runs": s.paths, "models": s.models, "n_runs": len(s.runs)}
            for key, s in (("a", data.a), ("b", data.b))
        },
        "level_axis": data.a.axis.unit,
        "alpha": res.alpha,
        "correction": res.correction,
        "comparisons_tested": res.n_tested,
        "bootstrap": {"resamples": data.resamples, "seed": data.seed},
        "levels_only_a": res.only_a,
        "levels_only_b": res.only_b,
        "levels": [
            {"level": lv, "figures": [comparison_dict(c) for c in res.at(lv)]} for lv in res.levels
        ],
        "outcome": outcome_text(data),
        "workload_differences": data.workload_differences,
        "input_notes": data.a.notes + data.b.notes,
        "gpu_sources": data.a.gpu_sources + data.b.gpu_sources,  # GPU telemetry's origin
        "fail_if_worse": data.fail_if_worse,
        "failed": data.failed,
        "worse": [
            {"level": c.level, "figure": c.figure.key, "rel_diff": numeric(c.rel_diff)}
            for c in data.worse
        ],
    }
