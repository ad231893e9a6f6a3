"""Synthetic trace-replay run directories, for tests of the report's "Replay over time".

A run whose last level is of kind `trace` (docs/run-format.md), after a concurrency level of
`earlier` requests when there are some: every request is given (when it was
due, how late it was sent, its TTFT, E2E and tokens, its outcome), so a test can compute what
the report must show by hand. With `scrape_interval`, `server_metrics.csv` holds the counters a
server would have shown: prompt and generated tokens counted as the client's window rates count
them (each request's prompt evenly from its schedule to its first token, its first output token
then, the others evenly up to its end; `levels.window_rates`) times `server_scale` (1: exactly
the client's; 1.1: 10 % more, as other traffic would add), and the prefix cache's queries and
hits (each request's prompt and `server_hits`, halfway from its sending to its first token). `bursty_trace` draws a longer
schedule with bursts, for charts.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, fields

import numpy as np
import pandas as pd

from .files import SERVER_METRICS_CSV
from .histogram import LogHistogram
from .records import COLUMNS, STEPS_COLUMNS, RequestRecord

FETCH_S = 0.004  # how long each synthetic scrape took


@dataclass(frozen=True)
class TraceRequest:
    """One replayed request; times in seconds (`at` after the replay's start, the rest from its
    schedule, so `ttft` and `e2e` hold its lateness `queued`)."""

    at: float
    prompt_tokens: int = 512
    output_tokens: int = 16
    ttft: float = 0.1
    e2e: float = 0.5
    queued: float = 0.0
    ok: bool = True
    worker: str = "local"
    server_hits: int = 0  # prompt tokens the server found in its prefix cache


@dataclass
class TraceRun:
    """What to write: the requests, the trace they came from, and the server's view of them."""

    requests: tuple[TraceRequest, ...]
    cap: int = 64  # the level's users: the cap on requests in flight
    trace_path: str = "traces/sample.jsonl"
    trace_format: str = "mooncake"
    trace_start: float = 0.0  # trace seconds at the replay's start
    trace_duration: float | None = None  # default: the last request's schedule
    speed: float = 1.0
    predicted_cached_tokens: int | None = None
    scheduled: int | None = None  # requests the replay scheduled (default: all given)
    scrape_interval: float = 0.0  # server_metrics.csv every so many s; 0: none
    server_scale: float = 1.0
    start_ts: float = 1_790_000_000.0
    model: str = "synthetic/trace-model"
    settings: dict = field(default_factory=dict)  # added to run.json's settings
    earlier: tuple[TraceRequest, ...] = ()  # a concurrency level's, before the replay (at < 0)
    earlier_users: int = 4
    outcome: str = "completed"


def _row(
    i: int, r: TraceRequest, t0: float, level: int, users: int, trace_index: int | None
) -> dict:
    start = t0 + r.at
    gaps = max(r.output_tokens - 1, 0)
    gap = (r.e2e - r.ttft) / gaps if gaps and r.ok else 0.0
    values = np.full(gaps, gap)
    hist = LogHistogram.of(values).format() if gaps and r.ok else ""
    return {
        "request_id": f"0-{i + 1}",
        "worker": r.worker,
        "level": level,
        "users": users,
        "endpoint": "chat",
        "stream": 1,
        "start_ts": round(start, 7),
        "end_ts": round(start + r.e2e, 7),
        "ttft": round(r.ttft, 7) if r.ok else None,
        "e2e": round(r.e2e, 7),
        "tpot": round(gap, 7) if r.ok and gaps else None,
        "itl_mean": round(gap, 7) if r.ok and gaps else None,
        "itl_p50": round(gap, 7) if r.ok and gaps else None,
        "itl_p90": round(gap, 7) if r.ok and gaps else None,
        "itl_p99": round(gap, 7) if r.ok and gaps else None,
        "itl_max": round(gap, 7) if r.ok and gaps else None,
        "itl_hist": hist,
        "n_chunks": r.output_tokens if r.ok else 0,
        "chunks_merged": 0,
        "chunk_marks": "",
        "prompt_tokens": r.prompt_tokens if r.ok else None,
        "completion_tokens": r.output_tokens if r.ok else None,
        "requested_prompt_tokens": r.prompt_tokens,
        "requested_completion_tokens": r.output_tokens,
        "ok": int(r.ok),
        "status": 200 if r.ok else 500,
        "error": "" if r.ok else "http_status",
        "error_message": "" if r.ok else "HTTP 500: synthetic failure",
        "cached_tokens": r.server_hits if r.ok else None,
        "queued_s": round(r.queued, 7),
        "trace_index": trace_index,
    }


def _served_by(t: float, start, first, end, prompt, output) -> tuple[float, float]:
    """Prompt and output tokens the requests were served by `t`: each prompt evenly from its
    schedule to its first token, the first output token then, the others evenly to its end."""
    with np.errstate(invalid="ignore", divide="ignore"):
        prefill = np.clip((t - start) / (first - start), 0.0, 1.0)
        decode = np.clip((t - first) / (end - first), 0.0, 1.0)
    first_token = np.minimum(output, 1.0) * (t >= first)
    return float((prompt * prefill).sum()), float((first_token + (output - 1) * decode).sum())


def server_metrics(frame: pd.DataFrame, spec: TraceRun) -> pd.DataFrame:
    """server_metrics.csv's rows for the requests of `frame`, in `spec`'s order (the module
    doc)."""
    ok = frame["ok"].to_numpy() == 1
    start = frame["start_ts"].to_numpy(np.float64)
    end = frame["end_ts"].to_numpy(np.float64)
    first = start + frame["ttft"].to_numpy(np.float64, na_value=np.nan)
    served = [
        column[ok]
        for column in (
            start,
            first,
            end,
            frame["prompt_tokens"].to_numpy(np.float64, na_value=0.0),
            frame["completion_tokens"].to_numpy(np.float64, na_value=0.0),
        )
    ]
    sent = start + frame["queued_s"].to_numpy(np.float64)
    # the prefix cache is looked up when the prefill is scheduled: halfway to the first token
    looked_up = np.where(np.isnan(first), sent, (sent + first) / 2)
    prompt = frame["requested_prompt_tokens"].to_numpy(np.float64)
    hits = np.array([r.server_hits for r in (*spec.earlier, *spec.requests)], dtype=np.float64)
    step = spec.scrape_interval
    t0 = spec.start_ts
    before = int(np.floor((min(start.min(), t0) - t0) / step))  # scrapes aligned on t0
    ts = t0 + step * np.arange(before - 2, int(np.ceil((end.max() - t0) / step)) + 3)
    rows = []
    for t in ts:
        prompt_served, output_served = _served_by(float(t), *served)
        done = looked_up <= t
        rows.append(
            {
                "ts": t,
                "running": int(((sent <= t) & (end > t)).sum()),
                "waiting": 0,
                "prompt_tokens_total": prompt_served * spec.server_scale,
                "generation_tokens_total": output_served * spec.server_scale,
                "prefix_cache_hits": float(hits[done].sum()),
                "prefix_cache_queries": float(prompt[done].sum()),
                "fetch_s": FETCH_S,
            }
        )
    return pd.DataFrame(rows)


def write_trace_run(base_dir: str, spec: TraceRun) -> str:
    """Write the run under `base_dir/<run id>/` and return its path."""
    run_id = f"{pd.Timestamp(spec.start_ts, unit='s'):%Y%m%dT%H%M%SZ}-trace"
    run_dir = os.path.join(base_dir, run_id)
    os.makedirs(run_dir, exist_ok=True)
    t0 = spec.start_ts
    replay = 1 if spec.earlier else 0
    rows = [_row(i, r, t0, 0, spec.earlier_users, None) for i, r in enumerate(spec.earlier)]
    rows += [_row(len(rows) + i, r, t0, replay, spec.cap, i) for i, r in enumerate(spec.requests)]
    frame = pd.DataFrame(rows)
    for f in fields(RequestRecord):  # the columns a synthetic request leaves at their defaults
        if f.name not in frame:
            frame[f.name] = f.default
    for c in ("prompt_tokens", "completion_tokens", "cached_tokens", "ttft", "tpot"):
        frame[c] = frame[c].astype("Float64" if c in ("ttft", "tpot") else "Int64")
    frame = frame.sort_values("end_ts", kind="mergesort")  # arrival order
    frame[list(COLUMNS)].to_csv(os.path.join(run_dir, "requests.csv"), index=False)
    last_end = float(frame["end_ts"].max())
    steps_columns = [*STEPS_COLUMNS, *(c for c in ("kind", "value") if c not in STEPS_COLUMNS)]
    steps: list[dict[str, object]] = []
    if spec.earlier:
        steps.append(
            {
                **dict.fromkeys(steps_columns, ""),
                **dict(level=0, users=spec.earlier_users, warmup_requests=0, time_cap=1200.0),
                **dict(start_ts=t0 + min(r.at for r in spec.earlier), end_ts=t0),
                **dict(target_requests=len(spec.earlier), stop_reason="target_reached"),
                **dict(kind="concurrency", value=spec.earlier_users),
            }
        )
    steps.append(
        {
            **dict.fromkeys(steps_columns, ""),
            **dict(level=replay, users=spec.cap, start_ts=t0, end_ts=last_end + 0.01),
            **dict(warmup_requests=0, target_requests=len(spec.requests), time_cap=1200.0),
            **dict(stop_reason="target_reached", kind="trace", value=spec.trace_start),
        }
    )
    pd.DataFrame(steps, columns=steps_columns).to_csv(
        os.path.join(run_dir, "steps.csv"), index=False
    )
    if spec.scrape_interval > 0:
        server_metrics(frame.sort_index(), spec).to_csv(
            os.path.join(run_dir, SERVER_METRICS_CSV), index=False
        )
    duration = spec.trace_duration
    if duration is None:
        duration = max(r.at for r in spec.requests) * spec.speed
    iso = lambda ts: pd.Timestamp(ts, unit="s").strftime("%Y-%m-%dT%H:%M:%SZ")  # noqa: E731
    run = {
        "format": 1,
        "run_id": run_id,
        "vllm_load_version": "synthetic",
        "locust_version": "n/a",
        "target": {"host": "synthetic://server", "models": None},
        "model": spec.model,
        "settings": {"model": spec.model, "stream": True, **spec.settings},
        "meta": {},
        "client": {"hostname": "synthetic", "workers": 1, "mode": "local"},
        "started_at": iso(t0 + min([0.0, *(r.at for r in spec.earlier)])),
        "ended_at": iso(last_end),
        "outcome": spec.outcome,
        "workers_seen": sorted({r.worker for r in (*spec.earlier, *spec.requests)}),
        "workers_lost": [],
        "requests_recorded": len(frame),
        "trace": {
            "path": spec.trace_path,
            "format": spec.trace_format,
            "start": spec.trace_start,
            "duration": duration,
            "speed": spec.speed,
            "requests": len(spec.requests) if spec.scheduled is None else spec.scheduled,
            "prompt_tokens": int(sum(r.prompt_tokens for r in spec.requests)),
            "predicted_cached_tokens": spec.predicted_cached_tokens,
            "block_tokens": 512,
        },
        **(
            {
                "server_metrics": {
                    "url": "synthetic://server/metrics",
                    "interval": spec.scrape_interval,
                }
            }
            if spec.scrape_interval > 0
            else {}
        ),
    }
    with open(os.path.join(run_dir, "run.json"), "w", encoding="utf-8") as fh:
        json.dump(run, fh, indent=2)
    return run_dir


def bursty_trace(
    seed: int = 0, duration: float = 60.0, base_rate: float = 4.0
) -> tuple[TraceRequest, ...]:
    """A schedule of `duration` s at `base_rate` requests/s with a burst of 4× that rate in its
    second quarter and another in its last: prompts of 1-4 blocks of 512 tokens, half sharing
    their first block with the request before (what the server's prefix cache would hit)."""
    rng = np.random.default_rng(seed)
    out: list[TraceRequest] = []
    t = 0.0
    while True:
        burst = duration / 4 <= t < duration / 2 or t >= 0.85 * duration
        t += rng.exponential(1.0 / (base_rate * (4.0 if burst else 1.0)))
        if t >= duration:
            return tuple(out)
        blocks = int(rng.integers(1, 5))
        shared = bool(out) and rng.random() < 0.5
        ttft = 0.05 + 0.02 * blocks * (2.0 if burst else 1.0)
        tokens = int(rng.integers(16, 64))
        out.append(
            TraceRequest(
                at=round(t, 4),
                prompt_tokens=512 * blocks,
                output_tokens=tokens,
                ttft=round(ttft, 4),
                e2e=round(ttft + tokens * (0.02 if burst else 0.012), 4),
                queued=round(float(rng.exponential(0.0005)), 6),
                server_hits=512 if shared else 0,
            )
        )
