"""The levels a run recorded: steps.csv's rows, and any level its requests name that steps.csv
lost (it is rewritten while the run goes on)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...load_kinds import CONCURRENCY, RATE, kind_named
from . import as_floats


def recorded_levels(steps: pd.DataFrame, requests: pd.DataFrame) -> pd.DataFrame:
    """One row per level: its kind of load and value (`load_kinds`), users, start/end, W, K,
    time cap, stop reason, and `rate`: the requested rate of a rate level (NaN for others).

    steps.csv is rewritten while a run goes on, so a level may appear twice (the last row wins)
    or not at all (a crash before the rewrite): such a level is taken from its requests, with
    the W and K of the other levels and its first request's start as its start.
    """
    if steps is not None and len(steps):
        plan = steps.copy()
        plan["level"] = as_floats(plan["level"]).astype(np.int64)
        plan = plan.drop_duplicates("level", keep="last")
    else:
        plan = pd.DataFrame({"level": pd.Series([], dtype=np.int64)})
    out = pd.DataFrame({"level": plan["level"].to_numpy(np.int64)})
    columns = ("users", "start_ts", "end_ts", "warmup_requests", "target_requests", "time_cap")
    for col in columns:
        out[col] = as_floats(plan[col]) if col in plan else np.nan
    out["kind"], out["value"] = kinds_and_values(plan, out["users"].to_numpy(np.float64))
    reason = plan["stop_reason"] if "stop_reason" in plan else pd.Series([""] * len(plan))
    out["stop_reason"] = reason.astype("string").fillna("").to_numpy(dtype=object)

    if len(requests):
        req_levels = as_floats(requests["level"])
        known = set(out["level"].tolist())
        seen = pd.DataFrame(
            {
                "level": req_levels,
                "users": as_floats(requests["users"]),
                "start": as_floats(requests["start_ts"]),
            }
        ).dropna(subset=["level"])
        missing = seen[~seen["level"].isin(known)]
        if len(missing):
            agg = (
                missing.groupby("level")
                .agg(users=("users", "first"), start_ts=("start", "min"))
                .reset_index()
            )
            default_w = (
                out["warmup_requests"].dropna().iloc[0]
                if out["warmup_requests"].notna().any()
                else 0.0
            )
            default_t = (
                out["target_requests"].dropna().iloc[0]
                if out["target_requests"].notna().any()
                else np.nan
            )
            extra = pd.DataFrame(
                {
                    "level": agg["level"].astype(np.int64),
                    "users": agg["users"],
                    "start_ts": agg["start_ts"],
                    "end_ts": np.nan,
                    "warmup_requests": default_w,
                    "target_requests": default_t,
                    "time_cap": np.nan,
                    "stop_reason": "",
                    "kind": out["kind"].iloc[0] if len(out) else CONCURRENCY.name,
                    "value": agg["users"]
                    if not len(out) or out["kind"].iloc[0] == CONCURRENCY.name
                    else np.nan,
                }
            )
            out = pd.concat([out, extra], ignore_index=True) if len(out) else extra
    out["warmup_requests"] = out["warmup_requests"].fillna(0.0)
    out["rate"] = np.where(out["kind"] == RATE.name, out["value"].to_numpy(np.float64), np.nan)
    return out.sort_values("level", kind="mergesort").reset_index(drop=True)


def kinds_and_values(
    plan: pd.DataFrame, users: np.ndarray | pd.Series
) -> tuple[list[str], np.ndarray]:
    """Each level's kind name and value; a run from before kinds were recorded has a `rate`
    column instead (a rate level's requests/s, empty for a concurrency level)."""
    if "kind" in plan:
        kinds = [kind_named(k).name for k in plan["kind"].astype("string").fillna("")]
        return kinds, as_floats(plan["value"]) if "value" in plan else np.asarray(users, float)
    rate = as_floats(plan["rate"]) if "rate" in plan else np.full(len(plan), np.nan)
    kinds = [RATE.name if r == r else CONCURRENCY.name for r in rate]
    return kinds, np.where(np.isnan(rate), users, rate)
