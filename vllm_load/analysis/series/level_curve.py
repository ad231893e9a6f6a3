"""A series' curve: its runs' per-level tables aggregated level by level (`stats.aggregate`),
with what decides whether a level is kept (the worst run's success rate) and what marks it
(client-late, client-bound, unsteady open-loop levels, the SLO item that bound it)."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from ...figures import spec_position_keys
from ...load_kinds import kind_named
from ..decisions.goodput import GOODPUT_METRICS
from ..diagnosis.evidence import EVIDENCE_COLUMNS
from ..levels.measure import metric_columns
from ..levels.server_queue import QUEUE_COLUMNS
from .stats import aggregate

#: per-level columns that are not averaged across runs (the rest is everything numeric)
_NOT_AVERAGED = frozenset(
    {
        "level",
        "kind",
        "value",
        "users",
        "level_start",
        "level_end",
        "window_start",
        "window_end",
        "stop_reason",
    }
)


def agg_metrics() -> tuple[str, ...]:
    """The per-level figures averaged across runs (everything numeric but timestamps)."""
    return tuple(c for c in metric_columns() if c not in _NOT_AVERAGED)


def _with_level(curve: pd.DataFrame, frame: pd.DataFrame) -> pd.DataFrame:
    """`curve` with each level's `kind`, its `unit` and `users`, the Locust users run for it
    (the most any run had), beside its `value`."""
    at = list(curve.columns).index("value") + 1
    if "users" in frame:
        users = pd.to_numeric(frame["users"], errors="coerce").groupby(frame["value"]).max()
        curve.insert(at, "users", curve["value"].map(users))
        at += 1
    if "kind" in frame:
        kinds = frame.groupby("value")["kind"].first().map(lambda name: kind_named(name).name)
        curve.insert(at, "kind", curve["value"].map(kinds))
        curve.insert(at + 1, "unit", curve["kind"].map(lambda name: kind_named(name).unit))
    return curve


def level_curve(
    tables: Sequence[pd.DataFrame], metrics: Sequence[str] | None = None
) -> pd.DataFrame:
    """Per level across runs (one per-level table each, with `value`, the level's value in its
    kind of load, `run_id` and `success_rate`), keyed by `value`: `aggregate`'s statistics of
    `metrics` (and goodput's, where judged), each level's `kind`, `unit` and `users`, plus
    `success_rate_min`, the worst run's success rate, which decides whether the level is left
    out of the conclusions (`failures`), and whether a run was client-late there."""
    frame = pd.concat(list(tables), ignore_index=True)
    frame = frame[frame["value"].notna()]
    if "client_late" not in frame:
        frame = frame.assign(client_late=False, client_late_reason="")
    judged = tuple(m for m in (*GOODPUT_METRICS, *QUEUE_COLUMNS, *EVIDENCE_COLUMNS) if m in frame)
    judged += tuple(spec_position_keys(frame.columns))  # as many as the server's draft positions
    chosen = agg_metrics() if metrics is None else metrics
    curve = aggregate(frame, ["value"], (*(m for m in chosen if m in frame), *judged))
    worst = pd.to_numeric(frame["success_rate"], errors="coerce").groupby(frame["value"]).min()
    curve["success_rate_min"] = curve["value"].map(worst).astype(np.float64)
    curve = curve.sort_values("value").reset_index(drop=True)
    curve = _with_level(curve, frame)
    # a mean over runs is as untrustworthy as the late runs in it: say which, and why
    late = frame[frame["client_late"]]
    reasons = {
        u: "; ".join(f"run {r}: {why}" for r, why in zip(g["run_id"], g["client_late_reason"]))
        for u, g in late.groupby("value")
    }
    if "slo_binding_text" in frame:  # the item that bound each level most often across runs
        binding = frame.groupby("value")["slo_binding_text"].agg(lambda t: t.mode().iloc[0])
        curve["slo_binding"] = curve["value"].map(binding).fillna("")
    if (
        "client_bound_reason" in frame
    ):  # possibly client-bound in some run: the diagnosis's `client`
        bound = frame[frame["client_bound_reason"].fillna("").astype(str) != ""]
        why_bound = {
            u: "; ".join(f"run {r}: {w}" for r, w in zip(g["run_id"], g["client_bound_reason"]))
            for u, g in bound.groupby("value")
        }
        curve["client_bound_reason"] = [why_bound.get(u, "") for u in curve["value"]]
    curve["client_late"] = [u in reasons for u in curve["value"]]
    curve["client_late_reason"] = [reasons.get(u, "") for u in curve["value"]]
    if "rate_unsteady" in frame:  # open-loop levels whose window was no steady state (`failures`)
        unsteady = frame[frame["rate_unsteady"].fillna("").astype(str) != ""]
        why = {
            u: "; ".join(f"run {r}: {w}" for r, w in zip(g["run_id"], g["rate_unsteady"]))
            for u, g in unsteady.groupby("value")
        }
        curve["rate_unsteady"] = [why.get(u, "") for u in curve["value"]]
    return curve
