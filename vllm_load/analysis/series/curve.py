"""Reading a *curve* (the per-level aggregate of a series, one row per level value: a
concurrency, a request rate for an open-loop series) and saying its levels: what saturation, failures, decide
and findings all need."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...load_kinds import LoadKind, kind_named, kind_of_settings


def column(curve: pd.DataFrame, name: str) -> np.ndarray:
    """One column as floats; all NaN when the curve has no such column."""
    if name in curve:
        return pd.to_numeric(curve[name], errors="coerce").to_numpy(np.float64)
    return np.full(len(curve), np.nan)


def value_text(value: float) -> str:
    """A level's value as a report writes it (`1,000`; `-` when unknown)."""
    return f"{value:,.0f}" if value == value else "-"


def axis_of(run: dict, steps: pd.DataFrame | None = None) -> LoadKind:
    """The kind of a run's levels (its axis): its first level's in steps.csv, else from its
    run.json settings (a run from before steps.csv recorded kinds)."""
    if steps is not None and "kind" in steps and len(steps):
        return kind_named(steps["kind"].iloc[0])
    return kind_of_settings(run.get("settings") or {})
