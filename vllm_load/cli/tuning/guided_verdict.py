"""What one configuration's SLO-max levels say, for the guided search (`guided.py`): the
bottleneck verdict at its SLO-max level and the flags it advises, its measured and predicted
knee, and its throughput there.

The SLO-max search runs each level alone, so its runs are one curve only once put together:
here they are, as the report puts a series' runs together (`report.model.build_report_data`:
each run measured, the levels' curve, the saturation analysis, the diagnosis of the series).
The verdict read is the SLO-max level's; where it names no flag with a value to set (the
SLO-max level not yet held at a limit: requests start to wait only past it), the verdict of
the first level past it that does, where the limit that ended the SLO shows (as the report's
diagnosis reads the first determined level past the knee). Its advice is followed by the later
levels' advice, each flag once: the next step moves the first, and where that one was tried
(or its server did not start), the next.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from ...slo import SloSpec


@dataclass(frozen=True)
class ConfigVerdict:
    kind: str  # the bottleneck verdict's kind (`analysis.diagnosis.kinds`), "" when none
    level: float | None  # the level it was read at
    #: {"flag", "from", "value"[, "also": [{"flag", "from", "value"}]]}: each piece of advice,
    #: in the verdict's order (`also`: flags to set together with it)
    advice: list[dict]
    knee_measured: float | None
    knee_predicted: float | None
    total_tok_per_s: float | None  # at the SLO-max level
    output_tok_per_s_per_user: float | None  # at the SLO-max level: 1 / its median TPOT


def _number(value) -> float | None:
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if x == x else None


def _runnable(advice) -> list[dict]:
    """Advice with a value to set, as `GuidedStep.advice` keeps it (with the flags that must
    change together with it, `also`, where there are any)."""
    out = []
    for a in advice:
        if a.to_value is None or not a.flag.startswith("--"):
            continue
        item = {"flag": a.flag, "from": a.from_value, "value": a.to_value}
        if a.also:
            item["also"] = [
                {"flag": b.flag, "from": b.from_value, "value": b.to_value} for b in a.also
            ]
        out.append(item)
    return out


def chosen_advice(verdicts: list, slo_max: float | None) -> tuple[Any, list[dict]]:
    """The verdict read (`_chosen`) and the advice to follow: its runnable advice, then each
    later level's (lowest first), each flag once. The SLO-max level met the SLO: its own limit
    (compute, with nothing waiting) is not always the one that ended the SLO past it (a sequence
    cap with requests waiting), and where its advice cannot run (a server that does not start)
    or gains nothing, the search moves that limit next instead of stopping."""
    chosen = _chosen(verdicts, slo_max)
    if chosen is None:
        return None, []
    later = sorted((v for v in verdicts if v.value > chosen.value), key=lambda v: v.value)
    advice: list[dict] = []
    for verdict in (chosen, *later):
        for a in _runnable(verdict.advice):
            if all(a["flag"] != b["flag"] for b in advice):
                advice.append(a)
    return chosen, advice


def _chosen(verdicts: list, slo_max: float | None):
    """The verdict at the SLO-max level, or where it names no flag with a value, the first
    level past it that does (the SLO-max's own where none does)."""
    if slo_max is None:  # no level met the SLO: what held the lowest one
        ordered = sorted(verdicts, key=lambda v: v.value)
    else:
        ordered = sorted((v for v in verdicts if v.value >= slo_max), key=lambda v: v.value)
    first = next(iter(ordered), None)
    return next((v for v in ordered if _runnable(v.advice)), first)


def read_verdict(run_dirs: Sequence[str], slo_max: float | None, spec: SloSpec) -> ConfigVerdict:
    """The verdict of the configuration whose SLO-max levels are `run_dirs`."""
    # at call time: the report's measuring keeps pandas out of every command's start
    import pandas as pd

    from ...analysis.decisions.pareto import per_user as per_user_rate
    from ...analysis.diagnosis.series import diagnose_runs
    from ...analysis.series.failures import failure_kinds
    from ...analysis.series.level_curve import level_curve
    from ...analysis.series.saturation import SaturationRule, analyse
    from ...report.model import summarize_run

    runs = [summarize_run(path, spec) for path in run_dirs]
    curve = level_curve([r.metrics for r in runs])
    kinds = failure_kinds(pd.concat([r.failures_by_value() for r in runs]))
    curve["failure_kinds"] = [kinds.get(float(v), "") for v in curve["value"]]
    rule = SaturationRule()
    sat = analyse(curve, rule)
    sat.axis = runs[0].axis
    diagnosis, _ = diagnose_runs(
        [(r.run, r.metrics) for r in runs], curve, sat, rule.tolerance, runs[0].image_charges
    )
    chosen, advice = chosen_advice(diagnosis.levels, slo_max)
    row = curve[curve["value"] == slo_max] if slo_max is not None else curve.iloc[0:0]
    total = _number(row["total_tok_per_s_mean"].iloc[0]) if len(row) else None
    # one user's output tok/s as the Pareto page reads it everywhere: 1 / the median TPOT
    per_user = _number(per_user_rate(float(row["tpot_p50_mean"].iloc[0]))) if len(row) else None
    knee = sat.saturation.value if sat.saturated and sat.saturation is not None else None
    return ConfigVerdict(
        kind=chosen.kind if chosen is not None else "",
        level=float(chosen.value) if chosen is not None else None,
        advice=advice,
        knee_measured=_number(knee),
        knee_predicted=_number(diagnosis.prediction.knee),
        total_tok_per_s=total,
        output_tok_per_s_per_user=per_user,
    )
