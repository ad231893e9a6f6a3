"""Reading a *curve* (the per-level aggregate of a series, one row per concurrency, or per
request rate for an open-loop series) and saying its levels: what saturation, failures, decide
and findings all need."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd


def column(curve: pd.DataFrame, name: str) -> np.ndarray:
    """One column as floats; all NaN when the curve has no such column."""
    if name in curve:
        return pd.to_numeric(curve[name], errors="coerce").to_numpy(np.float64)
    return np.full(len(curve), np.nan)


def users_text(users: float) -> str:
    """A concurrency as a report writes it (`1,000`; `-` when unknown)."""
    return f"{users:,.0f}" if users == users else "-"


@dataclass(frozen=True)
class Axis:
    """What a series' levels are: concurrent users, or requests per second (--rates). A curve's
    `users` column holds the level either way; this says how to name it."""

    label: str  # an axis title
    noun: str  # what follows a level's number in a sentence

    @property
    def rate(self) -> bool:
        return self is RATE


USERS = Axis("concurrent users (requested)", "concurrent")
RATE = Axis("requests/s (requested)", "requests/s")


def axis_of(run: dict) -> Axis:
    """The axis of a run's levels, from its run.json settings."""
    return RATE if (run.get("settings") or {}).get("rates") else USERS
