"""`vllm-load regress`: has a stored configuration (the candidate) regressed against another (the
baseline)? Per level both measured and per figure `compare` judges, the same test as `compare`
(`analysis.decisions.ab.compare_runs`: Welch's t-test across runs, Holm-corrected per level) on
the stored per-level figures, and a verdict: better, worse or no significant difference. A CI
gate: exit 1 on a significant regression beyond `--max-regression`, or when nothing could be tested
(one run on a side); exit 2 on bad input (a side that matches no run, different workloads)."""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

from ..user_values import SettingsError, parse_share
from .history import Condition, add_selection_arguments, matches, parse_where, stored_runs
from .record import StoredLevel

LATEST = "latest"
#: the significance level, after Holm's correction: `compare`'s default
ALPHA = 0.05


def configure_regress(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Compare a candidate's stored runs with a baseline's, level by level, with the test "
        "`vllm-load compare` uses (Welch's t-test across runs, Holm-corrected, alpha 0.05): per "
        "figure "
        "better, worse or no significant difference. Exit 1 when the candidate is "
        "significantly worse beyond --max-regression on any figure, or when nothing could be tested "
        "(one run on a side); 2 on bad input."
    )
    parser.add_argument(
        "--baseline",
        required=True,
        metavar="KEY=VALUE[,KEY=VALUE]",
        help="the baseline's runs: those whose keys have these values (keys as history --where)",
    )
    parser.add_argument(
        "--candidate",
        default=LATEST,
        metavar="KEY=VALUE[,...]|latest",
        help="the candidate's runs; latest: the runs of the newest stored run's vLLM version "
        "and commit (default latest)",
    )
    add_selection_arguments(parser)  # both sides
    parser.add_argument(
        "--max-regression",
        default="0%",
        metavar="PCT",
        help="a significant regression smaller than this passes, e.g. 5%% (default 0%%)",
    )


def _conditions(text: str, flag: str) -> list[Condition]:
    items = [t for t in text.split(",") if t.strip()]
    if not items:
        raise SettingsError(f"{flag} takes KEY=VALUE[,KEY=VALUE], got {text!r}")
    return parse_where(items)


@dataclass(frozen=True)
class Side:
    rows: list[dict]
    levels: list[list[StoredLevel]]


def _side(runs: list[tuple[dict, list[StoredLevel]]], conditions: list[Condition]) -> Side:
    kept = [(row, levels) for row, levels in runs if matches(row, conditions)]
    return Side([r for r, _ in kept], [lv for _, lv in kept])


def _latest(runs: list[tuple[dict, list[StoredLevel]]]) -> list[Condition]:
    newest = max(runs, key=lambda r: (r[0]["started_at"], r[0]["id"]))[0]
    return [
        Condition("vllm_version", newest["vllm_version"]),
        Condition("vllm_commit", newest["vllm_commit"]),
    ]


def _run_levels(row: dict, levels: list[StoredLevel]):
    """A stored run as `compare_runs` reads one: its per-level table (no requests: the
    request-level tests, for information only at n = 1, have nothing to read)."""
    import pandas as pd

    from ..analysis.decisions.ab import RunLevels

    metrics = pd.DataFrame(
        [{"level": lv.level, "kind": lv.kind, "value": lv.value, **lv.figures} for lv in levels]
    )
    return RunLevels(row["run_id"], metrics, pd.DataFrame({"level": [], "ttft": []}))


def _word(verdict: str) -> str:
    from ..analysis.decisions.ab import BETTER, WORSE

    return {BETTER: "better", WORSE: "worse"}.get(verdict, verdict)


def regress(args: argparse.Namespace, store) -> int:
    from ..analysis.decisions.ab import compare_runs, worse_by
    from ..analysis.decisions.workload import workload_differences

    tolerance = parse_share(args.max_regression, "--max-regression")
    baseline = _conditions(args.baseline, "--baseline")
    try:
        runs = stored_runs(store, args.model, parse_where(args.where))
    finally:
        store.close()
    if not runs:
        raise SettingsError(f"no stored run matches --model/--where in {store.location.shown}")
    candidate = (
        _latest(runs) if args.candidate == LATEST else _conditions(args.candidate, "--candidate")
    )
    cand = _side(runs, candidate)
    base = _side(
        [r for r in runs if r[0]["run_id"] not in {c["run_id"] for c in cand.rows}], baseline
    )
    for name, side in (("--baseline", base), ("--candidate", cand)):
        if not side.rows:
            raise SettingsError(f"{name}: no stored run matches (see vllm-load history)")
    models = {r["model"] for r in base.rows + cand.rows}
    if len(models) > 1:
        raise SettingsError(
            f"the runs are of {len(models)} models ({', '.join(sorted(models))}): give --model"
        )
    as_run = lambda row: {"settings": row["settings"], **row["workload"]}  # noqa: E731
    differ = workload_differences(
        [as_run(r) for r in base.rows], [as_run(r) for r in cand.rows], "baseline", "candidate"
    )
    if differ:
        raise SettingsError(f"the runs sent different workloads: {differ[0]} (narrow with --where)")
    result = compare_runs(
        [_run_levels(r, lv) for r, lv in zip(base.rows, base.levels)],
        [_run_levels(r, lv) for r, lv in zip(cand.rows, cand.levels)],
        alpha=ALPHA,
    )
    _print(result, base, cand)
    if not result.n_tested:
        print(
            "regress: nothing was tested (a side has one run: no test is possible): run each "
            "side at least twice; the gate does not pass"
        )
        return 1
    worse = worse_by(result, tolerance)
    if worse:
        print(
            f"regress: the candidate is significantly worse beyond {tolerance * 100:g}% on "
            f"{len(worse)} figure(s)"
        )
        return 1
    print(f"regress: no significant regression beyond {tolerance * 100:g}%")
    return 0


def _print(result, base: Side, cand: Side) -> None:
    print(
        f"baseline: {len(base.rows)} run(s), candidate: {len(cand.rows)} run(s) "
        f"({', '.join(r['run_id'] for r in cand.rows)}); alpha {result.alpha:g}"
    )
    for c in result.comparisons:
        rel = f"{c.rel_diff * 100:+.1f}%" if not math.isnan(c.rel_diff) else "n/a"
        p = f"p={c.p_adjusted:.3g}" if c.tested else "no test"
        a, b = _value(c.figure, c.a.mean), _value(c.figure, c.b.mean)
        print(f"  {c.level:g}: {c.figure.label}: {a} -> {b} ({rel}, {p}): {_word(c.verdict)}")


def _value(figure, value: float) -> str:
    """A figure's value as the printed table shows it (latencies in ms)."""
    if math.isnan(value):
        return "n/a"
    return f"{value * 1000:{figure.spec}} ms" if figure.in_ms else f"{value:{figure.spec}}"
