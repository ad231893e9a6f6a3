"""Synthetic run directories, for tests and benchmarks of the analysis and the report.

A made-up server (`ServerModel`) serves closed-loop users: up to `max_num_seqs` sequences
decode together, each decode step gets slower as the batch grows, and users beyond the batch
wait in a queue (their wait shows in TTFT). So throughput rises with concurrency and
flattens at `max_num_seqs`, as a real vLLM server does. Every file follows
docs/run-format.md. Generation is vectorised: a million requests take seconds.

With `personas`, each user is one persona (Locust user class) for the whole run: its requests
are slower or faster by the persona's `latency_scale`, and a persona with `turns` holds
conversations whose prompt grows by `turn_tokens` a turn (the earlier turns prefix-cached).
Without personas every request comes from one unnamed class: the persona columns stay at their defaults.

With `scrape_interval`, the server's `/metrics` scraped during the run too (`synthetic_server`).
"""

from __future__ import annotations

import json
import os
from dataclasses import MISSING, asdict, dataclass, field, fields

import numpy as np
import pandas as pd

from .files import SERVER_METRICS_CSV, safe_name
from .histogram import LogHistogram
from .records import COLUMNS, STEPS_COLUMNS, RequestRecord
from .synthetic_personas import Persona, PersonaShape, label_requests
from .synthetic_server import scrape, scrape_status

POOL = 48  # distinct per-request ITL patterns per level
#: segments of a stream's `chunk_marks`, as the client writes them (`client.sse.CHUNK_MARKS`;
#: run_format, the contract, imports nothing of the client)
CHUNK_MARKS = 16


@dataclass(frozen=True)
class ServerModel:
    """How the synthetic server behaves."""

    max_num_seqs: int = 100
    prefill_s_per_1k_tokens: float = 0.04
    base_itl_s: float = 0.012
    itl_growth_per_seq: float = 0.004  # relative ITL increase per sequence in the batch
    itl_sigma: float = 0.05  # log-normal spread of one request's gaps
    request_noise: float = 0.05  # relative per-request jitter of TTFT
    run_noise: float = 0.02  # relative speed difference between runs
    fail_rate: float = 0.0
    kv_blocks: int = 4096  # the KV cache, in blocks of `block_size` tokens (what /metrics shows)
    block_size: int = 128
    #: speculative decoding: per draft position, the share of drafts accepted there (K = its
    #: length; empty: the server does not speculate). One draft per running sequence per step.
    speculation: tuple[float, ...] = ()
    spec_restart_s: float | None = None  # its counters start again from 0 this long into the run


@dataclass
class SyntheticRun:
    """What to generate."""

    model: str = "synthetic/model-8b"
    levels: tuple[int, ...] = (10, 50, 100, 200)
    warmup_requests: int = 10
    requests_per_level: int = 100
    input_tokens: int = 2048
    output_tokens: int = 128
    server: ServerModel = field(default_factory=ServerModel)
    meta: dict = field(default_factory=lambda: {"gpus": "8", "hardware": "synthetic"})
    cooldown: float = 2.0
    seed: int = 0
    start_ts: float = 1_790_000_000.0
    personas: tuple[Persona, ...] = ()  # none: every request from one unnamed class
    scrape_interval: float = (
        0.0  # the server's /metrics every so many s (server_metrics.csv); 0: none
    )
    chunk_marks: bool = False  # write each stream's `chunk_marks`, as a real run does
    workers: int = 1  # > 1: users spread over this many load workers (`worker` column)


def _itl_pool(
    rng: np.random.Generator, itl: float, sigma: float, gaps: int
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """POOL histograms of `gaps` ITL gaps each, with per-pattern (sum, mean, p50, p90, p99, max)
    and the share of the decode time at which each chunk mark (`sse.chunk_marks`) arrived."""
    texts, stats, shares = [], [], []
    segments = min(CHUNK_MARKS, gaps)
    at = np.round(np.arange(segments + 1) * gaps / max(segments, 1)).astype(np.int64)
    for _ in range(POOL):
        values = itl * rng.lognormal(0.0, sigma, size=gaps)
        texts.append(LogHistogram.of(values).format() if gaps else "")
        elapsed = np.concatenate(([0.0], np.cumsum(values)))
        shares.append(elapsed[at] / elapsed[-1] if gaps else np.zeros(segments + 1))
        if gaps:
            stats.append(
                [values.sum(), values.mean(), *np.percentile(values, [50, 90, 99]), values.max()]
            )
        else:
            stats.append([0.0] + [np.nan] * 5)
    return texts, np.asarray(stats), np.asarray(shares)


def _format_marks(ms: np.ndarray) -> np.ndarray:
    """Rows of chunk-mark times (ms) as requests.csv writes them: `%.1f`, `;`-joined (formatted
    on whole columns: a million rows' marks in seconds)."""
    tenths = np.round(ms * 10.0).astype(np.int64)
    whole, frac = np.divmod(tenths, 10)
    text = np.strings.add(np.strings.add(whole.astype(str), "."), frac.astype(str))
    out = text[:, 0]
    for j in range(1, text.shape[1]):
        out = np.strings.add(np.strings.add(out, ";"), text[:, j])
    return out.astype(object)


def level_warmup(spec: SyntheticRun, users: int) -> int:
    """A level's warm-up, as a real run's steps.csv records it: at least one request per user."""
    return max(spec.warmup_requests, users)


def _level_requests(
    rng: np.random.Generator, spec: SyntheticRun, level: int, users: int, start: float, speed: float
) -> tuple[pd.DataFrame, float]:
    """The requests of one level (closed loop, all users starting at `start`) and the level's end:
    when its first W + K requests to start have all ended."""
    srv = spec.server
    persona = PersonaShape.of(spec.personas, users)
    batch = min(users, srv.max_num_seqs)
    itl = srv.base_itl_s * (1.0 + srv.itl_growth_per_seq * batch) * speed
    prefill = (
        srv.prefill_s_per_1k_tokens * spec.input_tokens / 1000.0 * speed * (1.0 + 0.01 * batch)
    )
    gaps = max(spec.output_tokens - 1, 0)
    texts, pool, mark_shares = _itl_pool(rng, itl, srv.itl_sigma, gaps)

    need = level_warmup(spec, users) + spec.requests_per_level
    first = start + rng.uniform(0.0, 0.01, size=users)  # users do not start in the same microsecond

    def decode_jitter(size: int | tuple[int, ...]) -> np.ndarray:
        return rng.lognormal(0.0, srv.request_noise, size=size)

    if users <= srv.max_num_seqs:
        # every request is served at once: each user's requests follow one another
        per_user = -(-need // users) + 2
        shape = (users, per_user)
        pick = rng.integers(0, POOL, size=shape)
        ttft = prefill * decode_jitter(shape)
        decode = pool[pick, 0]
        user, k = np.indices(shape)
        if persona is not None:
            ttft = ttft * persona.prompt(user, k, spec.input_tokens) / spec.input_tokens
            ttft, decode = ttft * persona.scale[user], decode * persona.scale[user]
        e2e = ttft + decode
        starts = first[:, None] + np.cumsum(e2e, axis=1) - e2e
        pick, ttft, e2e, starts = pick.ravel(), ttft.ravel(), e2e.ravel(), starts.ravel()
        user, k = user.ravel(), k.ravel()
    else:
        # max_num_seqs slots serve a FIFO queue: request g goes to slot g % slots and waits for it;
        # a user's next request (g + users) starts when its previous one is done
        slots = srv.max_num_seqs
        total = need + 2 * users
        rows = -(-total // slots)
        pick = rng.integers(0, POOL, size=rows * slots)
        prefill_g = prefill * decode_jitter(rows * slots)
        k, user = np.divmod(np.arange(rows * slots), users)  # request g = k * users + user
        decode = pool[pick, 0]
        if persona is not None:
            prefill_g = prefill_g * persona.prompt(user, k, spec.input_tokens) / spec.input_tokens
            prefill_g, decode = prefill_g * persona.scale[user], decode * persona.scale[user]
        service = prefill_g + decode
        done = start + np.cumsum(service.reshape(rows, slots), axis=0).ravel()
        served_from = done - service
        starts = np.full(done.size, start)
        starts[users:] = done[:-users]
        starts[:users] = first
        served_from = np.maximum(served_from, starts)
        ttft = served_from - starts + prefill_g
        e2e = served_from + service - starts
    failed = rng.random(e2e.shape) < srv.fail_rate
    ends = starts + e2e
    # the level holds until its first `need` requests to start have all ended (run.steps)
    first_started = np.argsort(starts, kind="stable")[:need]
    level_end = float(ends[first_started].max()) + 0.05
    keep = starts < level_end
    n = int(keep.sum())
    pk, fl = pick[keep], failed[keep]
    ok = ~fl
    out_tok = np.where(ok, spec.output_tokens, np.nan)
    marks: np.ndarray | str = ""
    if spec.chunk_marks and gaps:
        first_s = ttft[keep][:, None]
        at_ms = (first_s + mark_shares[pk] * (e2e[keep][:, None] - first_s)) * 1000.0
        marks = np.where(ok, _format_marks(at_ms), "")
    worker = (
        np.char.add("worker-", (user[keep] % spec.workers).astype(str)).astype(object)
        if spec.workers > 1
        else "local"
    )
    frame = pd.DataFrame(
        {
            "worker": worker,
            "level": level,
            "users": users,
            "endpoint": "chat",
            "stream": 1,
            "start_ts": starts[keep],
            "end_ts": ends[keep],
            "ttft": np.where(ok, ttft[keep], np.nan),
            "e2e": e2e[keep],
            "tpot": np.where(
                ok & (spec.output_tokens >= 2),
                (e2e[keep] - ttft[keep]) / max(spec.output_tokens - 1, 1),
                np.nan,
            ),
            "itl_mean": np.where(ok, pool[pk, 1], np.nan),
            "itl_p50": np.where(ok, pool[pk, 2], np.nan),
            "itl_p90": np.where(ok, pool[pk, 3], np.nan),
            "itl_p99": np.where(ok, pool[pk, 4], np.nan),
            "itl_max": np.where(ok, pool[pk, 5], np.nan),
            "itl_hist": np.where(ok, np.asarray(texts, dtype=object)[pk], ""),
            "n_chunks": np.where(ok, spec.output_tokens, 0),
            "chunks_merged": 0,
            "chunk_marks": marks,
            "prompt_tokens": np.where(ok, spec.input_tokens, np.nan),
            "completion_tokens": out_tok,
            "requested_prompt_tokens": spec.input_tokens,
            "requested_completion_tokens": spec.output_tokens,
            "ok": ok.astype(np.int64),
            "status": np.where(ok, 200, 500),
            "error": np.where(ok, "", "http_status"),
            "error_message": np.where(ok, "", "HTTP 500: synthetic failure"),
        },
        index=np.arange(n),
    )
    if persona is not None:
        label_requests(frame, persona, spec.input_tokens, level, user[keep], k[keep])
    return frame, level_end


def _history(requests: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """Locust's stats history (aggregated rows, one per second), from the requests."""
    t0 = int(np.floor(steps["start_ts"].min()))
    t1 = int(np.ceil(requests["end_ts"].max())) if len(requests) else t0 + 1
    seconds = np.arange(t0, t1 + 1)
    sec_of = (requests["end_ts"].to_numpy() - t0).astype(np.int64)
    done = np.bincount(sec_of, minlength=len(seconds))[: len(seconds)]
    fails = np.bincount(sec_of[requests["ok"].to_numpy() == 0], minlength=len(seconds))[
        : len(seconds)
    ]
    lvl = np.searchsorted(steps["start_ts"].to_numpy(), seconds, side="right") - 1
    users = np.where(lvl >= 0, steps["users"].to_numpy()[np.clip(lvl, 0, None)], 0)
    rate = pd.Series(done).rolling(10, min_periods=1).mean().to_numpy()
    median_ms = float(requests["e2e"].median() * 1000) if len(requests) else 0.0
    frame = pd.DataFrame(
        {
            "Timestamp": seconds,
            "User Count": users,
            "Type": "",
            "Name": "Aggregated",
            "Requests/s": np.round(rate, 6),
            "Failures/s": np.round(pd.Series(fails).rolling(10, min_periods=1).mean(), 6),
        }
    )
    for pct in ("50%", "66%", "75%", "80%", "90%", "95%", "98%", "99%", "99.9%", "99.99%", "100%"):
        frame[pct] = round(median_ms)
    frame["Total Request Count"] = np.cumsum(done)
    frame["Total Failure Count"] = np.cumsum(fails)
    frame["Total Median Response Time"] = median_ms
    frame["Total Average Response Time"] = median_ms
    frame["Total Min Response Time"] = median_ms
    frame["Total Max Response Time"] = median_ms
    frame["Total Average Content Size"] = 0.0
    return frame


def write_synthetic_run(base_dir: str, spec: SyntheticRun | None = None) -> str:
    """Write one synthetic run under `base_dir/<model>/<run id>/` and return its path."""
    spec = spec or SyntheticRun()
    rng = np.random.default_rng(spec.seed)
    speed = float(rng.lognormal(0.0, spec.server.run_noise))
    run_id = f"{pd.Timestamp(spec.start_ts, unit='s'):%Y%m%dT%H%M%SZ}-syn{spec.seed:03d}"
    run_dir = os.path.join(base_dir, safe_name(spec.model, "unknown-model"), run_id)
    os.makedirs(run_dir, exist_ok=True)

    frames, steps, t = [], [], spec.start_ts
    for level, users in enumerate(spec.levels):
        frame, end = _level_requests(rng, spec, level, users, t, speed)
        frames.append(frame)
        steps.append(
            (
                level,
                "concurrency",
                float(users),
                users,
                t,
                end,
                level_warmup(spec, users),
                level_warmup(spec, users) + spec.requests_per_level,
                1200.0,
                "target_reached",
            )
        )
        # the next level starts once this one's requests have drained, plus the cooldown
        t = max(end, float(frame["end_ts"].max())) + spec.cooldown
    requests = pd.concat(frames, ignore_index=True)
    requests = requests.sort_values("end_ts", kind="mergesort").reset_index(
        drop=True
    )  # arrival order
    requests.insert(0, "request_id", "0-" + pd.Series(np.arange(1, len(requests) + 1)).astype(str))
    steps_frame = pd.DataFrame(steps, columns=list(STEPS_COLUMNS))
    for col in ("prompt_tokens", "completion_tokens"):
        requests[col] = requests[col].astype("Int64")
    floats = [c for c in requests.columns if requests[c].dtype == np.float64]
    requests[floats] = requests[floats].round(7)  # as records.py writes them
    for f in fields(RequestRecord):  # the columns a synthetic request leaves at their defaults
        if f.name not in requests and f.default is not MISSING:
            requests[f.name] = f.default
    requests[list(COLUMNS)].to_csv(os.path.join(run_dir, "requests.csv"), index=False)
    steps_frame.to_csv(os.path.join(run_dir, "steps.csv"), index=False)
    _history(requests, steps_frame).to_csv(
        os.path.join(run_dir, "locust_stats_history.csv"), index=False
    )

    scraped = None
    if spec.scrape_interval > 0:
        scraped = scrape(
            requests,
            spec.server,
            spec.input_tokens,
            spec.output_tokens,
            speed,
            spec.scrape_interval,
        )
        scraped.to_csv(os.path.join(run_dir, SERVER_METRICS_CSV), index=False)

    iso = lambda ts: pd.Timestamp(ts, unit="s").strftime("%Y-%m-%dT%H:%M:%SZ")  # noqa: E731
    settings = {
        "model": spec.model,
        "levels": list(spec.levels),
        "input_tokens": spec.input_tokens,
        "output_tokens": spec.output_tokens,
        "requests_per_level": spec.requests_per_level,
        "warmup_requests": spec.warmup_requests,
        "level_time_cap": 1200.0,
        "cooldown": spec.cooldown,
        "endpoint": "chat",
        "stream": True,
        "out": base_dir,
        "run_dir": run_dir,
        "meta": spec.meta,
        "api_key_set": False,
    }
    run = {
        "format": 1,
        "run_id": run_id,
        "vllm_load_version": "synthetic",
        "locust_version": "n/a",
        "target": {
            "host": "synthetic://server",
            "models": {
                "object": "list",
                "data": [{"id": spec.model, "object": "model", "max_model_len": 32768}],
            },
            "version": {"version": "synthetic"},
            "server_model": asdict(spec.server),
        },
        "model": spec.model,
        "settings": settings,
        "meta": spec.meta,
        "client": {
            "hostname": "synthetic",
            "platform": "synthetic",
            "python": "3.11",
            "cpus": 2,
            "workers": spec.workers,
            "mode": "local" if spec.workers == 1 else "distributed",
        },
        "prompts": {"method": "synthetic", "chat_overhead_tokens": 0},
        **({"user_classes": {p.name: p.weight for p in spec.personas}} if spec.personas else {}),
        "started_at": iso(spec.start_ts),
        "ended_at": iso(t),
        "outcome": "completed",
        "workers_seen": sorted(requests["worker"].unique().tolist()),
        "workers_lost": [],
        "requests_recorded": int(len(requests)),
        **(
            {"server_metrics": scrape_status(len(scraped), spec.scrape_interval, spec.server)}
            if scraped is not None
            else {}
        ),
    }
    with open(os.path.join(run_dir, "run.json"), "w", encoding="utf-8") as fh:
        json.dump(run, fh, indent=2)
    return run_dir
