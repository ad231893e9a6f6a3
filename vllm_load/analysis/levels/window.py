"""Each level's measured requests and measured window (`measure`'s module doc says which), and
what was done inside each window: requests in flight, work, the load offered.

Array work on one run's requests: `pos` (each request's row of the level plan), `start`, `end`
and whether it succeeded; the plan gives W, K, the level's end and why it ended.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from . import as_floats
from .rates import offered_figures
from .window_rates import RequestSpans, work_in_window

#: stop reasons after which the level ended before its W + K requests had all ended
CUT_SHORT = frozenset(
    {"time_cap", "interrupted", "workers_lost", "measured_lost", "client_limit", "stop_when"}
)


@dataclass(frozen=True)
class LevelWindows:
    """Per request: whether it is measured; per level: its measured window and counts in it."""

    measured: np.ndarray  # per request (bool)
    after_end: np.ndarray  # per level: measured requests that ended after the level did
    window_start: np.ndarray  # per level (Unix s; NaN when fewer than W finished)
    window_end: np.ndarray
    window_s: np.ndarray  # its length; NaN unless positive
    window_ok: np.ndarray  # per level: successful finishes inside the window


def level_windows(
    plan: pd.DataFrame, pos: np.ndarray, start: np.ndarray, end: np.ndarray, ok: np.ndarray
) -> LevelWindows:
    """The measured requests and windows of the levels of `plan` (`recorded_levels`), from the
    requests' plan rows `pos`, starts, ends and successes."""
    n_levels = len(plan)
    w = plan["warmup_requests"].to_numpy(np.float64)
    k = plan["target_requests"].to_numpy(np.float64) - w
    k = np.where(np.isnan(k), np.inf, k)
    level_end = plan["end_ts"].to_numpy(np.float64)
    cut = np.array([r in CUT_SHORT for r in plan["stop_reason"]], dtype=bool) & ~np.isnan(level_end)
    known_end = np.where(np.isnan(level_end), np.inf, level_end)
    measured = _measured(pos, start, end, w, k, n_levels)
    meas_pos = pos[measured]
    after_end = np.bincount(meas_pos[end[measured] > known_end[meas_pos]], minlength=n_levels)

    # the window: from the W-th finish of the level's requests (the level's start when W = 0) to
    # the (W + K)-th (a level cut short: its last finish before it ended); the level's load was
    # held until its first W + K to start had ended, so all of it is at the level's load
    counts = np.bincount(pos, minlength=n_levels)
    wi = w.astype(np.int64)
    by_end = np.lexsort((end, pos))
    pos_e, end_e = pos[by_end], end[by_end]
    done_e = end_e <= np.where(cut, level_end, np.inf)[pos_e]
    first_e = np.searchsorted(pos_e, np.arange(n_levels))
    rank_e = np.arange(len(by_end)) - first_e[pos_e]
    has_w = (wi > 0) & (counts >= wi)
    wth_idx = np.minimum(first_e + np.maximum(wi - 1, 0), max(len(end_e) - 1, 0))
    wth_end = end_e[wth_idx] if len(end_e) else np.full(n_levels, np.nan)
    window_start = np.where(
        wi == 0, plan["start_ts"].to_numpy(np.float64), np.where(has_w, wth_end, np.nan)
    )
    in_window = (rank_e >= w[pos_e]) & (rank_e < w[pos_e] + k[pos_e]) & done_e
    window_end = np.full(n_levels, np.nan)
    if in_window.any():
        last = pd.Series(end_e[in_window]).groupby(pos_e[in_window]).max()
        window_end[last.index.to_numpy()] = last.to_numpy()
    window_s = window_end - window_start
    window_s = np.where(window_s > 0, window_s, np.nan)
    # successful finishes inside the window: an open-loop level's achieved rate
    ok_e = ok[by_end] & in_window
    window_ok = np.bincount(pos_e[ok_e], minlength=n_levels)
    return LevelWindows(measured, after_end, window_start, window_end, window_s, window_ok)


def _measured(
    pos: np.ndarray, start: np.ndarray, end: np.ndarray, w: np.ndarray, k: np.ndarray, n: int
) -> np.ndarray:
    """The measured requests: by level, in the order they started (exact ties: by end), the K
    after the first W."""
    order = np.lexsort((end, start, pos))
    first = np.searchsorted(pos[order], np.arange(n))
    rank = np.arange(len(order)) - first[pos[order]]
    meas_s = (rank >= w[pos[order]]) & (rank < w[pos[order]] + k[pos[order]])
    measured = np.zeros(len(pos), dtype=bool)
    measured[order[meas_s]] = True
    return measured


def window_work(
    spans: RequestSpans, start: np.ndarray, end: np.ndarray, windows: LevelWindows
) -> tuple[np.ndarray, np.ndarray]:
    """Per level: the achieved concurrency (requests in flight, any level, any outcome,
    averaged over the window) and the work every successful request (any level) did inside it
    (requests, prompt tokens, output tokens)."""
    n_levels = len(windows.window_s)
    achieved = np.full(n_levels, np.nan)
    done = np.full((n_levels, 3), np.nan)
    for i in np.flatnonzero(~np.isnan(windows.window_s)):
        a, b = windows.window_start[i], windows.window_end[i]
        overlap = np.minimum(end, b) - np.maximum(start, a)
        achieved[i] = np.clip(overlap, 0.0, None).sum() / windows.window_s[i]
        work = work_in_window(spans, a, b)
        done[i] = (work.requests, work.prompt_tokens, work.output_tokens)
    return achieved, done


def offered(
    plan: pd.DataFrame,
    req: pd.DataFrame,
    pos: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    windows: LevelWindows,
) -> dict[str, np.ndarray]:
    """`rates.offered_figures` of the run's requests: each sent at its start plus its queueing,
    by the load process (worker) that sent it."""
    queued_all = as_floats(req["queued_s"]) if "queued_s" in req else np.zeros(len(req))
    worker = (
        req["worker"].astype("string").fillna("")
        if "worker" in req
        else pd.Series([""] * len(req), dtype=object)
    )
    return offered_figures(
        plan["rate"].to_numpy(np.float64),
        plan["users"].to_numpy(np.float64),
        pos,
        start,
        start + np.nan_to_num(queued_all),
        end,
        pd.factorize(worker.to_numpy(dtype=object), sort=True)[0],  # as np.unique's inverse
        windows.window_start,
        windows.window_end,
    )
