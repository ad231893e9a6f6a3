"""Per-level figures of one run, over each level's measured window (docs/run-format.md).

For every level: take the requests that started during it, in the order they started; the
first W are its warm-up, the next K its measured requests, whatever their end (success, failure,
timeout) and however long after the others it came: a level is chosen by start, never by which
requests finished first, so a slow tail or a failure cannot drop out (`run.steps` holds the
level's load until they have all ended). W and K are the level's own, from steps.csv. The
measured window runs from the end of the W-th request of the level to finish (the level's start
when W = 0) to the end of the (W + K)-th (a level cut short: its last before it ended); as the
load was held until the measured requests had all ended, the window is all at the level's load.

Throughput and req/s count the work done inside the window by every successful request of the
run, each spread over the part of its life in which it was done (`window_rates`: counting what
*finishes* in a window whose edges are finish times depends on where closed-loop waves fall);
latency percentiles are over the successful measured requests (a failure's "latency" is its time to
fail, which says nothing about serving speed; failures are counted separately); ITL
percentiles come from their merged `itl_hist`.

Everything is vectorised: a run with a million requests is a few array passes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ... import figures as declared
from ...figures import gpu_columns, statistic_columns
from . import as_floats
from .hist import hist_percentiles, merge_hist_column
from .rates import RATE_COLUMNS, offered_figures, rate_figures
from .recorded_levels import recorded_levels
from .window_rates import RequestSpans, work_in_window

#: stop reasons after which the level ended before its W + K requests had all ended
CUT_SHORT = frozenset({"time_cap", "interrupted", "workers_lost", "measured_lost", "client_limit"})

_HEAD_COLUMNS: tuple[str, ...] = (
    "level",
    "kind",  # the level's kind of load (`load_kinds`) ...
    "value",  # ... and its value in that kind's unit
    "users",
    "level_start",
    "level_end",
    "started",
    "finished",
    "warmup",
    "measured",
    "measured_after_end",
    "ok",
    "failed",
    "success_rate",
    "window_start",
    "window_end",
    "window_s",
    "req_per_s",
    "total_tok_per_s",
    "output_tok_per_s",
    "input_tok_per_s",
    "achieved_concurrency",
    *RATE_COLUMNS,
)
_TAIL_COLUMNS: tuple[str, ...] = (
    "prompt_exact_share",
    "completion_exact_share",
    "usage_missing",
    "stop_reason",
)


def metric_columns() -> tuple[str, ...]:
    """The columns of a run's per-level table: the level's own figures, then a statistic
    column for every declared per-request figure (`figures.statistic_columns`)."""
    return (*_HEAD_COLUMNS, *statistic_columns(), *_TAIL_COLUMNS, *gpu_columns())


@dataclass
class LevelMeasurement:
    """The per-level table of one run plus what charts need beyond it.

    `itl_counts[i]` is the merged ITL histogram (bucket counts, see `hist`) of level row i of
    `metrics`; `measured` holds the successful measured requests (level, ttft, e2e, tpot);
    `labelled` every measured request, both outcomes, with the columns `breakdown` reads;
    `labelled_marks` its successful rows' parsed `RequestSpans.marks` (for `persona_table`).
    """

    metrics: pd.DataFrame
    itl_counts: np.ndarray
    measured: pd.DataFrame
    labelled: pd.DataFrame
    labelled_marks: np.ndarray | None = None


#: the columns of a measured request that `LevelMeasurement.labelled` keeps (those present)
LABELLED_COLUMNS: tuple[str, ...] = (
    "start_ts",
    "end_ts",
    "ttft",
    "e2e",
    "tpot",
    "itl_max",
    "chunk_marks",
    "prompt_tokens",
    "completion_tokens",
    "ok",
    "error",
    "status",
    "user_class",
    "task",
    "conversation",
    "turn",
    "cached_tokens",
    "target",  # several targets: each one's figures (`analysis.levels.targets`)
)


def _token_counts(frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Prompt and completion tokens per row: the server's usage, else the requested counts."""
    prompt = as_floats(frame["prompt_tokens"])
    completion = as_floats(frame["completion_tokens"])
    prompt = np.where(np.isnan(prompt), as_floats(frame["requested_prompt_tokens"]), prompt)
    completion = np.where(
        np.isnan(completion), as_floats(frame["requested_completion_tokens"]), completion
    )
    return prompt, completion


def image_charges(requests: pd.DataFrame) -> dict[int, int]:
    """The prompt tokens a server charged for a request's images, per image count: the most
    common `prompt_tokens - requested_prompt_tokens` among the successful requests with images
    (docs/run-format.md, "Prompt exactness with images"). A run sends images of one size, and a
    server charges the same for as many of them; the client cannot count it beforehand."""
    if "images" not in requests or not len(requests):
        return {}
    images = as_floats(requests["images"])
    extra = as_floats(requests["prompt_tokens"]) - as_floats(requests["requested_prompt_tokens"])
    known = (images > 0) & ~np.isnan(extra) & (as_floats(requests["ok"]) == 1)
    charges: dict[int, int] = {}
    for count in np.unique(images[known]):
        values, seen = np.unique(extra[known & (images == count)], return_counts=True)
        charges[int(count)] = int(values[np.argmax(seen)])
    return charges


def expected_prompt_tokens(requests: pd.DataFrame) -> np.ndarray:
    """Per request, the prompt tokens it should have been served with: its requested text, plus
    the run's charge for its images (`image_charges`); NaN where it asked for no exact length.
    One charged otherwise (the charge varied, or its text was off) is inexact."""
    expected = as_floats(requests["requested_prompt_tokens"])
    charges = image_charges(requests)
    if charges:
        images = as_floats(requests["images"])
        for count, charge in charges.items():
            expected = np.where(images == count, expected + charge, expected)
    return expected


def success_spans(req: pd.DataFrame, ok: np.ndarray | None = None) -> RequestSpans:
    """The successful requests' lives and token counts, for `window_rates`."""
    if ok is None:
        ok = as_floats(req["ok"]) == 1
    read = ["start_ts", "ttft", "end_ts", "chunk_marks", "prompt_tokens", "completion_tokens"]
    read += ["requested_prompt_tokens", "requested_completion_tokens"]
    sub = req.loc[ok, [c for c in read if c in req]]  # not a copy of every column
    prompt, completion = _token_counts(sub)
    marks = sub["chunk_marks"] if "chunk_marks" in sub else None
    start, ttft, end = (as_floats(sub[c]) for c in ("start_ts", "ttft", "end_ts"))
    return RequestSpans.build(start, ttft, end, prompt, completion, marks)


def _group_statistics(
    values: np.ndarray, groups: np.ndarray, n_groups: int, stats: tuple[str, ...]
) -> dict[str, np.ndarray]:
    """Per group, each of `stats` ("p99": a linearly interpolated percentile, numpy's default;
    "mean") of the values; NaN where a group has none."""
    out = {stat: np.full(n_groups, np.nan) for stat in stats}
    keep = ~np.isnan(values)
    if not keep.any():
        return out
    frame = pd.DataFrame({"g": groups[keep], "v": values[keep]})
    by_group = frame.groupby("g")["v"]
    percentiles = [stat for stat in stats if stat.startswith("p")]
    if percentiles:
        q = by_group.quantile([int(stat[1:]) / 100.0 for stat in percentiles]).unstack()
        rows = q.index.to_numpy(dtype=np.int64)
        for j, stat in enumerate(percentiles):
            out[stat][rows] = q.iloc[:, j].to_numpy()
    if "mean" in stats:
        mean = by_group.mean()
        out["mean"][mean.index.to_numpy(dtype=np.int64)] = mean.to_numpy()
    return out


def measure_levels(requests: pd.DataFrame, steps: pd.DataFrame) -> LevelMeasurement:
    """Per-level figures of one run (see the module docstring); one row per level in `metrics`."""
    plan = recorded_levels(steps, requests)
    n_levels = len(plan)
    lv_all = as_floats(requests["level"]) if len(requests) else np.array([])
    valid = ~np.isnan(lv_all)
    req = requests[valid] if not valid.all() else requests
    lv = lv_all[valid].astype(np.int64)
    start = as_floats(req["start_ts"]) if len(req) else np.array([])
    end = as_floats(req["end_ts"]) if len(req) else np.array([])
    pos = np.searchsorted(plan["level"].to_numpy(), lv)  # every request level is in the plan

    w = plan["warmup_requests"].to_numpy(np.float64)
    k = plan["target_requests"].to_numpy(np.float64) - w
    k = np.where(np.isnan(k), np.inf, k)
    level_end = plan["end_ts"].to_numpy(np.float64)
    cut = np.array([r in CUT_SHORT for r in plan["stop_reason"]], dtype=bool) & ~np.isnan(level_end)
    known_end = np.where(np.isnan(level_end), np.inf, level_end)
    counts = np.bincount(pos, minlength=n_levels)
    wi = w.astype(np.int64)

    # the measured requests: by level, in the order they started (exact ties: by end)
    order = np.lexsort((end, start, pos))
    first = np.searchsorted(pos[order], np.arange(n_levels))
    rank = np.arange(len(order)) - first[pos[order]]
    meas_s = (rank >= w[pos[order]]) & (rank < w[pos[order]] + k[pos[order]])
    measured_mask = np.zeros(len(pos), dtype=bool)
    measured_mask[order[meas_s]] = True
    meas_pos = pos[measured_mask]
    after_end = np.bincount(meas_pos[end[measured_mask] > known_end[meas_pos]], minlength=n_levels)

    # the window: from the W-th finish of the level's requests (the level's start when W = 0) to
    # the (W + K)-th (a level cut short: its last finish before it ended); the level's load was
    # held until its first W + K to start had ended, so all of it is at the level's load
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

    ok_all = as_floats(req["ok"]) == 1 if len(req) else np.array([], dtype=bool)
    mok = measured_mask & ok_all
    n_meas = np.bincount(meas_pos, minlength=n_levels)
    n_ok = np.bincount(pos[mok], minlength=n_levels)
    n_warm = np.minimum(counts, wi)
    finished_in_level = np.bincount(pos[end <= known_end[pos]], minlength=n_levels)
    # successful finishes inside the window: an open-loop level's achieved rate
    ok_e = ok_all[by_end] & in_window
    window_ok = np.bincount(pos_e[ok_e], minlength=n_levels)

    sub = req[mok]
    g = pos[mok]
    prompt_usage = as_floats(sub["prompt_tokens"])
    completion_usage = as_floats(sub["completion_tokens"])
    req_prompt = expected_prompt_tokens(req)[mok]  # the requested text, plus images' charge
    req_completion = as_floats(sub["requested_completion_tokens"])
    usage_missing = np.isnan(prompt_usage) | np.isnan(completion_usage)
    # exactness is judged where a request asked for an exact count (a locustfile's own requests
    # may ask for none) and the server reported one
    with_prompt = ~np.isnan(prompt_usage) & ~np.isnan(req_prompt)
    with_completion = ~np.isnan(completion_usage) & ~np.isnan(req_completion)
    n_with_prompt = np.bincount(g[with_prompt], minlength=n_levels)
    n_with_completion = np.bincount(g[with_completion], minlength=n_levels)
    prompt_exact = np.bincount(g[with_prompt & (prompt_usage == req_prompt)], minlength=n_levels)
    completion_exact = np.bincount(
        g[with_completion & (completion_usage == req_completion)], minlength=n_levels
    )

    # achieved concurrency: requests in flight (any level, any outcome) averaged over the window;
    # throughput: the work every successful request (any level) did inside it
    spans = success_spans(req, ok_all)
    achieved = np.full(n_levels, np.nan)
    done = np.full((n_levels, 3), np.nan)  # requests, prompt tokens, output tokens
    for i in np.flatnonzero(~np.isnan(window_s)):
        overlap = np.minimum(end, window_end[i]) - np.maximum(start, window_start[i])
        achieved[i] = np.clip(overlap, 0.0, None).sum() / window_s[i]
        work = work_in_window(spans, window_start[i], window_end[i])
        done[i] = (work.requests, work.prompt_tokens, work.output_tokens)

    with np.errstate(invalid="ignore", divide="ignore"):
        out = pd.DataFrame(
            {
                "level": plan["level"].to_numpy(np.int64),
                "kind": plan["kind"].to_numpy(dtype=object),
                "value": plan["value"].to_numpy(np.float64),
                "users": plan["users"].to_numpy(np.float64),
                "level_start": plan["start_ts"].to_numpy(np.float64),
                "level_end": level_end,
                "started": counts,
                "finished": finished_in_level,
                "warmup": n_warm,
                "measured": n_meas,
                "measured_after_end": after_end,
                "ok": n_ok,
                "failed": n_meas - n_ok,
                "success_rate": np.where(n_meas > 0, n_ok / np.maximum(n_meas, 1), np.nan),
                "window_start": window_start,
                "window_end": window_end,
                "window_s": window_s,
                "req_per_s": done[:, 0] / window_s,
                "total_tok_per_s": (done[:, 1] + done[:, 2]) / window_s,
                "output_tok_per_s": done[:, 2] / window_s,
                "input_tok_per_s": done[:, 1] / window_s,
                "achieved_concurrency": achieved,
            }
        )
    # every declared per-request figure's statistics (figures.PER_REQUEST), over the successful
    # measured requests; a column the run did not record (an older run) gives NaN
    measured_frame = pd.DataFrame({"level": plan["level"].to_numpy(np.int64)[g]})
    for source in declared.PER_REQUEST:
        if source.from_histogram:
            continue
        values = as_floats(sub[source.key]) if source.key in sub else np.full(len(sub), np.nan)
        measured_frame[source.key] = values
        for stat, column in _group_statistics(values, g, n_levels, source.stats).items():
            out[f"{source.key}_{stat}"] = column
    queued = as_floats(sub["queued_s"]) if "queued_s" in sub else np.full(len(sub), np.nan)
    figures = rate_figures(
        plan["rate"].to_numpy(np.float64),
        g,
        as_floats(sub["start_ts"]),
        as_floats(sub["ttft"]),
        queued,
        window_s,
        window_ok,
    )
    queued_all = as_floats(req["queued_s"]) if "queued_s" in req else np.zeros(len(req))
    worker = (
        req["worker"].astype("string").fillna("")
        if "worker" in req
        else pd.Series([""] * len(req), dtype=object)
    )
    figures.update(
        offered_figures(
            plan["rate"].to_numpy(np.float64),
            plan["users"].to_numpy(np.float64),
            pos,
            start,
            start + np.nan_to_num(queued_all),
            end,
            np.unique(worker.to_numpy(dtype=object), return_inverse=True)[1].reshape(-1),
            window_start,
            window_end,
        )
    )
    for col, values in figures.items():
        out[col] = values
    itl_counts = merge_hist_column(sub["itl_hist"], g, n_levels)
    for source in (s for s in declared.PER_REQUEST if s.from_histogram):  # ITL, per token
        percentiles = tuple(float(stat[1:]) for stat in source.stats)
        q = hist_percentiles(itl_counts, percentiles)
        for j, stat in enumerate(source.stats):
            out[f"{source.key}_{stat}"] = q[:, j]
    with np.errstate(invalid="ignore", divide="ignore"):
        out["prompt_exact_share"] = np.where(
            n_with_prompt > 0, prompt_exact / np.maximum(n_with_prompt, 1), np.nan
        )
        out["completion_exact_share"] = np.where(
            n_with_completion > 0, completion_exact / np.maximum(n_with_completion, 1), np.nan
        )
    out["usage_missing"] = np.bincount(g[usage_missing], minlength=n_levels)
    out["stop_reason"] = plan["stop_reason"].to_numpy(dtype=object)
    for col in gpu_columns():  # the GPUs' figures, where a run recorded them: `gpu.with_gpu`
        out[col] = np.nan
    labelled = req.loc[measured_mask, [c for c in LABELLED_COLUMNS if c in req]].copy()
    labelled.insert(0, "level", plan["level"].to_numpy(np.int64)[pos[measured_mask]])
    return LevelMeasurement(
        metrics=out[list(metric_columns())],
        itl_counts=itl_counts,
        measured=measured_frame,
        labelled=labelled,
        labelled_marks=spans.marks[measured_mask[ok_all]] if spans.marks is not None else None,
    )


def level_metrics(requests: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """One row per level of one run with the columns of `metric_columns()` (see the module docstring).

    `started` counts the level's recorded requests (they started during it), `finished` those
    of them that finished before the level ended, `warmup`/`measured` the discarded and measured
    ones (its first to start), `measured_after_end` the measured ones that ended after the level
    did (a level cut short, or a run from before levels were held for them), `ok`/`failed` the
    measured successes and failures. Rates are per second of the measured
    window; latencies are in seconds; `*_exact_share` is the share of successful measured
    requests with usage whose token count equals the requested one; `usage_missing` counts those
    without usage (their requested counts are used for throughput instead).
    """
    return measure_levels(requests, steps).metrics
