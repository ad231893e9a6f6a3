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
percentiles come from their merged `itl_hist`. A request the client closed on purpose
(--cancel-share, error `cancelled`) is counted as `cancelled`: neither a success (its latency
and its tokens are a part of a request's) nor a failure (the server did nothing wrong), so
`success_rate` is over the measured requests that were not cancelled.

Everything is vectorised: a run with a million requests is a few array passes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ... import figures as declared
from ...figures import disagg_columns, gpu_columns, spec_columns, statistic_columns
from ...run_format.stream_columns import StreamColumns
from . import as_floats, cancelled, group_percentiles
from .hist import hist_percentiles
from .rates import RATE_COLUMNS, rate_figures
from .recorded_levels import recorded_levels
from .spans import own_streams, success_spans
from .window import LevelWindows, level_windows, offered, window_work
from .window_rates import ChunkMarks, RequestSpans

#: the work done per second of a level's window, by the run's successful requests
WORK_RATES: tuple[str, ...] = (
    "req_per_s",
    "total_tok_per_s",
    "output_tok_per_s",
    "input_tok_per_s",
)
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
    "cancelled",
    "success_rate",
    "window_start",
    "window_end",
    "window_s",
    *WORK_RATES,
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
    return (
        *_HEAD_COLUMNS,
        *statistic_columns(),
        *_TAIL_COLUMNS,
        *gpu_columns(),
        *spec_columns(),
        *disagg_columns(),
    )


@dataclass
class LevelMeasurement:
    """The per-level table of one run plus what charts need beyond it.

    `itl_counts[i]` is the merged ITL histogram (bucket counts, see `hist`) of level row i of
    `metrics`; `measured` holds the successful measured requests (level, ttft, e2e, tpot);
    `labelled` every measured request, both outcomes, with the columns `breakdown` reads;
    `labelled_marks` its successful rows' chunk marks (`RequestSpans.marks`, for `persona_table`);
    `spans` every successful request's (of a known level), `ok` which of those rows succeeded
    (for `decisions.goodput`, which takes its good requests' spans from them).
    """

    metrics: pd.DataFrame
    itl_counts: np.ndarray
    measured: pd.DataFrame
    labelled: pd.DataFrame
    labelled_marks: ChunkMarks | None = None
    spans: RequestSpans | None = None
    ok: np.ndarray | None = None  # per request of a known level: it succeeded


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
    "target",  # several targets: each one's figures (`analysis.levels.per_target`)
)


def labelled_columns() -> tuple[str, ...]:
    """The columns `LevelMeasurement.labelled` keeps (those present): `LABELLED_COLUMNS` and
    every declared per-request figure's (`figures.PER_REQUEST`, as declared when it runs), so
    that an SLO on any of them (`decisions.goodput`) reads it."""
    declared_keys = (s.key for s in declared.PER_REQUEST if not s.from_histogram)
    return tuple(dict.fromkeys((*LABELLED_COLUMNS, *declared_keys)))


def _measured_columns() -> frozenset[str]:
    """The columns of the successful measured requests that `measure_levels` reads (every
    declared per-request figure's, as declared when it runs)."""
    return frozenset(
        (
            "start_ts",
            "ttft",
            "queued_s",
            "prompt_tokens",
            "completion_tokens",
            "requested_completion_tokens",
            *(source.key for source in declared.PER_REQUEST if not source.from_histogram),
        )
    )


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


def _group_statistics(
    values: np.ndarray, groups: np.ndarray, n_groups: int, stats: tuple[str, ...]
) -> dict[str, np.ndarray]:
    """Per group, each of `stats` ("p99": `group_percentiles`; "mean") of the values; NaN where
    a group has none."""
    out = {stat: np.full(n_groups, np.nan) for stat in stats}
    percentiles = [stat for stat in stats if stat.startswith("p")]
    if percentiles:
        fractions = tuple(int(stat[1:]) / 100.0 for stat in percentiles)
        q = group_percentiles(values, groups, n_groups, fractions)
        for j, stat in enumerate(percentiles):
            out[stat] = q[:, j]
    keep = ~np.isnan(values)
    if "mean" in stats and keep.any():
        mean = pd.Series(values[keep]).groupby(groups[keep]).mean()
        out["mean"][mean.index.to_numpy(dtype=np.int64)] = mean.to_numpy()
    return out


def _exactness(
    req: pd.DataFrame, sub: pd.DataFrame, mok: np.ndarray, g: np.ndarray, n_levels: int
) -> dict[str, np.ndarray]:
    """Per level, the shares of the successful measured requests (`sub`, rows `mok` of `req`,
    levels `g`) served the prompt and completion tokens they asked for, and how many had no
    usage. Exactness is judged where a request asked for an exact count (a locustfile's own
    requests may ask for none) and the server reported one."""
    prompt_usage = as_floats(sub["prompt_tokens"])
    completion_usage = as_floats(sub["completion_tokens"])
    req_prompt = expected_prompt_tokens(req)[mok]  # the requested text, plus images' charge
    req_completion = as_floats(sub["requested_completion_tokens"])
    with_prompt = ~np.isnan(prompt_usage) & ~np.isnan(req_prompt)
    with_completion = ~np.isnan(completion_usage) & ~np.isnan(req_completion)
    n_with_prompt = np.bincount(g[with_prompt], minlength=n_levels)
    n_with_completion = np.bincount(g[with_completion], minlength=n_levels)
    prompt_exact = np.bincount(g[with_prompt & (prompt_usage == req_prompt)], minlength=n_levels)
    completion_exact = np.bincount(
        g[with_completion & (completion_usage == req_completion)], minlength=n_levels
    )
    usage_missing = np.isnan(prompt_usage) | np.isnan(completion_usage)
    with np.errstate(invalid="ignore", divide="ignore"):
        return {
            "prompt_exact_share": np.where(
                n_with_prompt > 0, prompt_exact / np.maximum(n_with_prompt, 1), np.nan
            ),
            "completion_exact_share": np.where(
                n_with_completion > 0, completion_exact / np.maximum(n_with_completion, 1), np.nan
            ),
            "usage_missing": np.bincount(g[usage_missing], minlength=n_levels),
        }


def _measured_figures(
    req: pd.DataFrame, mok: np.ndarray, g: np.ndarray, plan: pd.DataFrame, windows: LevelWindows
) -> tuple[dict[str, np.ndarray], pd.DataFrame]:
    """The level columns taken from the successful measured requests (rows `mok` of `req`, at
    plan rows `g`): every declared per-request figure's statistics (`figures.PER_REQUEST`; a
    column the run did not record, an older run's, gives NaN), the open-loop rate figures and
    the token counts' exactness; and those requests' figures, with their level."""
    n_levels = len(plan)
    reads = _measured_columns()
    sub = req.loc[mok, [c for c in req.columns if c in reads]]  # not a copy of every column
    columns: dict[str, np.ndarray] = {}
    measured = pd.DataFrame({"level": plan["level"].to_numpy(np.int64)[g]})
    for source in declared.PER_REQUEST:
        if source.from_histogram:
            continue
        values = as_floats(sub[source.key]) if source.key in sub else np.full(len(sub), np.nan)
        measured[source.key] = values
        for stat, column in _group_statistics(values, g, n_levels, source.stats).items():
            columns[f"{source.key}_{stat}"] = column
    queued = as_floats(sub["queued_s"]) if "queued_s" in sub else np.full(len(sub), np.nan)
    columns.update(
        rate_figures(
            plan["rate"].to_numpy(np.float64),
            g,
            as_floats(sub["start_ts"]),
            as_floats(sub["ttft"]),
            queued,
            windows.window_s,
            windows.window_ok,
        )
    )
    columns.update(_exactness(req, sub, mok, g, n_levels))
    return columns, measured


def measure_levels(
    requests: pd.DataFrame, steps: pd.DataFrame, streams: StreamColumns | None = None
) -> LevelMeasurement:
    """Per-level figures of one run (see the module docstring); one row per level in `metrics`.
    `streams`: the requests' parsed `itl_hist` and `chunk_marks` (`RunData.streams`); without
    them, the frame's own texts are parsed."""
    plan = recorded_levels(steps, requests)
    n_levels = len(plan)
    if streams is None:
        streams = own_streams(requests)
    lv_all = as_floats(requests["level"]) if len(requests) else np.array([])
    valid = ~np.isnan(lv_all)
    req = requests[valid] if not valid.all() else requests
    streams = streams.take(valid) if not valid.all() else streams
    lv = lv_all[valid].astype(np.int64)
    start = as_floats(req["start_ts"]) if len(req) else np.array([])
    end = as_floats(req["end_ts"]) if len(req) else np.array([])
    pos = np.searchsorted(plan["level"].to_numpy(), lv)  # every request level is in the plan

    counts = np.bincount(pos, minlength=n_levels)
    known_end = plan["end_ts"].to_numpy(np.float64)
    known_end = np.where(np.isnan(known_end), np.inf, known_end)
    ok_all = as_floats(req["ok"]) == 1 if len(req) else np.array([], dtype=bool)
    windows = level_windows(plan, pos, start, end, ok_all)
    measured_mask, window_s = windows.measured, windows.window_s
    window_start, window_end = windows.window_start, windows.window_end
    mok = measured_mask & ok_all
    n_meas = np.bincount(pos[measured_mask], minlength=n_levels)
    n_ok = np.bincount(pos[mok], minlength=n_levels)
    n_cancelled = np.bincount(pos[measured_mask & cancelled(req)], minlength=n_levels)
    n_judged = n_meas - n_cancelled  # the measured requests that succeeded or failed
    n_warm = np.minimum(counts, plan["warmup_requests"].to_numpy(np.float64).astype(np.int64))
    finished_in_level = np.bincount(pos[end <= known_end[pos]], minlength=n_levels)

    g = pos[mok]
    spans = success_spans(req, ok_all, streams)
    achieved, done = window_work(spans, start, end, windows)

    with np.errstate(invalid="ignore", divide="ignore"):
        out = pd.DataFrame(
            {
                "level": plan["level"].to_numpy(np.int64),
                "kind": plan["kind"].to_numpy(dtype=object),
                "value": plan["value"].to_numpy(np.float64),
                "users": plan["users"].to_numpy(np.float64),
                "level_start": plan["start_ts"].to_numpy(np.float64),
                "level_end": plan["end_ts"].to_numpy(np.float64),
                "started": counts,
                "finished": finished_in_level,
                "warmup": n_warm,
                "measured": n_meas,
                "measured_after_end": windows.after_end,
                "ok": n_ok,
                "failed": n_judged - n_ok,
                "cancelled": n_cancelled,
                "success_rate": np.where(n_judged > 0, n_ok / np.maximum(n_judged, 1), np.nan),
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
    # a level none of whose measured requests succeeded did no work of its own: the work in its
    # window is other levels' requests', not a throughput to show (it read 15,804 tok/s)
    out.loc[n_ok == 0, list(WORK_RATES)] = np.nan
    figures, measured_frame = _measured_figures(req, mok, g, plan, windows)
    figures.update(offered(plan, req, pos, start, end, windows))
    for col, values in figures.items():
        out[col] = values
    itl_counts = streams.itl.merge(mok, g, n_levels)
    for source in (s for s in declared.PER_REQUEST if s.from_histogram):  # ITL, per token
        percentiles = tuple(float(stat[1:]) for stat in source.stats)
        q = hist_percentiles(itl_counts, percentiles)
        for j, stat in enumerate(source.stats):
            out[f"{source.key}_{stat}"] = q[:, j]
    out["stop_reason"] = plan["stop_reason"].to_numpy(dtype=object)
    for col in gpu_columns():  # the GPUs' figures, where a run recorded them: `gpu.with_gpu`
        out[col] = np.nan
    for col in spec_columns():  # the server's, where it speculates: `speculation.with_speculation`
        out[col] = np.nan
    for col in disagg_columns():  # a disaggregated deployment's roles': `disagg.with_disagg`
        out[col] = np.nan
    labelled = req.loc[measured_mask, [c for c in labelled_columns() if c in req]]
    labelled.insert(0, "level", plan["level"].to_numpy(np.int64)[pos[measured_mask]])
    return LevelMeasurement(
        metrics=out[list(metric_columns())],
        itl_counts=itl_counts,
        measured=measured_frame,
        labelled=labelled,
        labelled_marks=spans.marks.take(measured_mask[ok_all]) if spans.marks is not None else None,
        spans=spans,
        ok=ok_all,
    )


def level_metrics(
    requests: pd.DataFrame, steps: pd.DataFrame, streams: StreamColumns | None = None
) -> pd.DataFrame:
    """One row per level of one run with the columns of `metric_columns()` (see the module docstring).

    `started` counts the level's recorded requests (they started during it), `finished` those
    of them that finished before the level ended, `warmup`/`measured` the discarded and measured
    ones (its first to start), `measured_after_end` the measured ones that ended after the level
    did (a level cut short, or a run from before levels were held for them), `ok`/`failed` the
    measured successes and failures, `cancelled` those the client closed on purpose. Rates are per second of the measured
    window; latencies are in seconds; `*_exact_share` is the share of successful measured
    requests with usage whose token count equals the requested one; `usage_missing` counts those
    without usage (their requested counts are used for throughput instead).
    """
    return measure_levels(requests, steps, streams).metrics
