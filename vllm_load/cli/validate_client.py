"""`vllm-load validate-client`: prove the load generator is not the bottleneck.

The same users and the same code path as `vllm-load run`, against an echo server (every token
exists on arrival, so the server costs next to nothing): what the client sustains there is its
capacity. The table gives req/s, tok/s, p50/p95/p99 latency and success per level, plus the concurrency
actually held. Against echo the client runs flat out, so the levels where achieved concurrency falls below
the users show where its CPU saturates. The client counts as *proven* when every request
succeeded and the median latency at the lowest level stayed under `--max-p50-ms` (an echo
answers in milliseconds; more means the client or the "echo" server is slow), and, given a run
directory, when its capacity is at least `--min-margin` times that run's peak request rate and
peak chunk rate, and when that run's own health samples marked none of its levels possibly
client-bound or client-late (`analysis.client_side`): a client with capacity to spare on the
echo server may still have been starved of a CPU during the run itself. The result is written as
`client_validation.json` (into the run directory when one is given), which the report shows.
"""

from __future__ import annotations

import argparse
import json
import math
import os
from dataclasses import asdict, dataclass, field

from ..run_format.files import CLIENT_HEALTH_CSV, CLIENT_VALIDATION_JSON
from ..settings import add_arguments
from ..sim.child import SimulatorProcess
from ..user_values import SettingsError, count_argument, parse_levels
from . import run as run_cli
from .common import add_host_argument, add_workers_argument
from .errors import CommandFailed

# the run's options validate-client offers, with its defaults (the echo run's test)
ECHO_DEFAULTS: dict = {
    "levels": "100,250,500,750,1000,1500,2000",
    "requests_per_level": 1000,
    "warmup_requests": None,
    "input_tokens": 64,
    "output_tokens": 100,
    "out": "validations",
}
RESULT_FILE = CLIENT_VALIDATION_JSON


@dataclass
class EchoLevel:
    users: int
    achieved_concurrency: float
    req_per_s: float
    tok_per_s: float
    chunks_per_s: float
    e2e_p50_ms: float
    e2e_p95_ms: float
    e2e_p99_ms: float
    success_rate: float


@dataclass
class Validation:
    """The verdict and the figures it rests on."""

    levels: list[EchoLevel]
    capacity_req_per_s: float
    capacity_chunks_per_s: float
    proven: bool
    reasons: list[str] = field(default_factory=list)
    run_peak_req_per_s: float | None = None
    run_peak_chunks_per_s: float | None = None
    margin_req: float | None = None
    margin_chunks: float | None = None
    run_health: list[str] = field(default_factory=list)  # the run's levels its own health marked
    settings: dict = field(default_factory=dict)


def echo_levels(metrics, chunk_rates: dict[int, float]) -> list[EchoLevel]:
    """Rows from `analysis.levels.measure.level_metrics` of the echo run."""
    out = []
    for row in metrics.to_dict("records"):
        users = int(row["users"])
        out.append(
            EchoLevel(
                users=users,
                achieved_concurrency=float(row["achieved_concurrency"]),
                req_per_s=float(row["req_per_s"]),
                tok_per_s=float(row["total_tok_per_s"]),
                chunks_per_s=chunk_rates.get(int(row["level"]), math.nan),
                e2e_p50_ms=float(row["e2e_p50"]) * 1000,
                e2e_p95_ms=float(row["e2e_p95"]) * 1000,
                e2e_p99_ms=float(row["e2e_p99"]) * 1000,
                success_rate=float(row["success_rate"]),
            )
        )
    return out


def judge(
    levels: list[EchoLevel],
    max_p50_ms: float,
    min_margin: float,
    run_peak_req: float | None = None,
    run_peak_chunks: float | None = None,
    run_health: list[str] | None = None,
) -> Validation:
    """The verdict on echo-run levels, optionally against a run's peak rates and what the run's
    own health samples said about its levels (`client_side.health_problems`) (pure)."""
    reasons = []
    for lv in levels:
        if not lv.success_rate >= 1.0:
            reasons.append(f"{lv.users} users: success {lv.success_rate * 100:.1f}% (< 100%)")
    # against echo the client is CPU-bound at every level (that is its capacity), so latency says
    # something about overhead only at the lowest level
    if levels and not levels[0].e2e_p50_ms <= max_p50_ms:
        reasons.append(
            f"{levels[0].users} users: p50 latency {levels[0].e2e_p50_ms:.1f} ms against an echo server "
            f"(> {max_p50_ms:g} ms): the server is not an echo server, or the client is overloaded"
        )
    cap_req = max((lv.req_per_s for lv in levels if lv.req_per_s == lv.req_per_s), default=math.nan)
    cap_chunks = max(
        (lv.chunks_per_s for lv in levels if lv.chunks_per_s == lv.chunks_per_s), default=math.nan
    )
    result = Validation(
        levels=levels, capacity_req_per_s=cap_req, capacity_chunks_per_s=cap_chunks, proven=False
    )
    if run_peak_req:
        result.run_peak_req_per_s, result.margin_req = run_peak_req, cap_req / run_peak_req
        if not result.margin_req >= min_margin:
            reasons.append(
                f"client capacity {cap_req:,.0f} req/s is only {result.margin_req:.1f}x the run's peak "
                f"{run_peak_req:,.1f} req/s (< {min_margin:g}x)"
            )
    if run_peak_chunks:
        result.run_peak_chunks_per_s, result.margin_chunks = (
            run_peak_chunks,
            cap_chunks / run_peak_chunks,
        )
        if not result.margin_chunks >= min_margin:
            reasons.append(
                f"client capacity {cap_chunks:,.0f} chunks/s is only {result.margin_chunks:.1f}x the run's "
                f"peak {run_peak_chunks:,.0f} chunks/s (< {min_margin:g}x)"
            )
    result.run_health = list(run_health or ())
    reasons += [f"the run's own health: {problem}" for problem in result.run_health]
    result.reasons = reasons
    result.proven = not reasons and bool(levels)
    return result


def chunk_rates(requests, metrics) -> dict[int, float]:
    """SSE chunks per second of the measured window, per level (successful measured requests)."""
    # at call time: keeps pandas out of every command's start (cli.main imports this module)
    import numpy as np
    import pandas as pd

    out = {}
    end = pd.to_numeric(requests["end_ts"], errors="coerce")
    level = pd.to_numeric(requests["level"], errors="coerce")
    ok = pd.to_numeric(requests["ok"], errors="coerce") == 1
    chunks = pd.to_numeric(requests["n_chunks"], errors="coerce").fillna(0)
    for row in metrics.to_dict("records"):
        ws, we = row["window_start"], row["window_end"]
        if not (ws == ws and we == we and we > ws):
            continue
        mask = (level == row["level"]) & ok & (end > ws) & (end <= we)
        out[int(row["level"])] = float(np.sum(chunks[mask])) / (we - ws)
    return out


def run_peaks(run_dir: str) -> tuple[float, float, list[str]]:
    """The run's peak req/s and peak chunk rate over its levels, and the levels its own health
    marked possibly client-bound or client-late (one line each)."""
    # at call time: keeps pandas out of every command's start (cli.main imports this module)
    from ..analysis.levels.client_side import (
        health_problems,
        level_client_health,
        read_client_health,
    )
    from ..analysis.levels.measure import level_metrics
    from ..run_format.load import load_run

    data = load_run(run_dir)
    metrics = level_metrics(data.requests, data.steps, data.streams)
    rates = chunk_rates(data.requests, metrics)
    health = read_client_health(os.path.join(run_dir, CLIENT_HEALTH_CSV)).frame
    problems = health_problems(level_client_health(health, metrics, data.requests))
    return float(metrics["req_per_s"].max()), max(rates.values(), default=math.nan), problems


def format_table(levels: list[EchoLevel]) -> str:
    header = (
        "Concurrency",
        "Achieved",
        "Requests/sec",
        "Tokens/sec",
        "Chunks/sec",
        "p50 (ms)",
        "p95 (ms)",
        "p99 (ms)",
        "Success Rate",
    )
    rows = [header] + [
        (
            f"{lv.users:,}",
            f"{lv.achieved_concurrency:,.0f}",
            f"{lv.req_per_s:,.0f}",
            f"{lv.tok_per_s:,.0f}",
            f"{lv.chunks_per_s:,.0f}",
            f"{lv.e2e_p50_ms:,.2f}",
            f"{lv.e2e_p95_ms:,.2f}",
            f"{lv.e2e_p99_ms:,.2f}",
            f"{lv.success_rate * 100:.1f}%",
        )
        for lv in levels
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def configure_parser(parser: argparse.ArgumentParser, name: str) -> None:
    add_host_argument(
        parser, "an echo server to use (default: start `vllm-load sim --echo`)", required=False
    )
    parser.add_argument(
        "--server-workers", type=int, default=2, help="processes of the echo server started for you"
    )
    add_workers_argument(parser, "local Locust worker processes (as in your runs)")
    add_arguments(
        parser,
        only=(*ECHO_DEFAULTS, "stream"),
        defaults=ECHO_DEFAULTS,
        helps={
            "warmup_requests": "discarded requests per level (default: the level's users, at most 100)",
            "stream": "validate non-streaming requests instead",
            "out": "where the echo run directory goes",
        },
    )
    parser.add_argument(
        "--run", default="", metavar="RUN_DIR", help="a run to compare the client's capacity with"
    )
    parser.add_argument(
        "--min-margin",
        type=float,
        default=2.0,
        help="capacity must be this many times the run's peak",
    )
    parser.add_argument(
        "--max-p50-ms",
        type=float,
        default=50.0,
        help="largest acceptable median latency against echo",
    )
    parser.add_argument(
        "--strict", action="store_true", help="exit 1 when the client is not proven"
    )


def _echo_run(args: argparse.Namespace, host: str) -> str:
    run_args = run_cli.run_options(
        host,
        levels=args.levels,
        input_tokens=args.input_tokens,
        output_tokens=args.output_tokens,
        requests_per_level=args.requests_per_level,
        warmup_requests=args.warmup_requests,
        no_stream=args.no_stream,
        workers=args.workers,
        out=args.out,
        loglevel="WARNING",
        approximate_prompts=True,
        meta=["purpose=client-validation"],
    )
    launch = run_cli.prepare(run_args)
    run_dir = launch.run_dir
    code = launch.run()
    if code != 0 or not run_dir or not os.path.exists(os.path.join(run_dir, "run.json")):
        raise CommandFailed(f"the echo run failed (exit code {code})")
    return run_dir


def main(args: argparse.Namespace) -> int:
    levels = parse_levels(args.levels)
    args.requests_per_level = count_argument("--requests-per-level")(args.requests_per_level)
    if (args.requests_per_level or 1) < 1 or args.min_margin <= 0 or args.max_p50_ms <= 0:
        raise SettingsError("--requests-per-level, --min-margin and --max-p50-ms must be positive")
    if args.run and not os.path.isfile(os.path.join(args.run, "run.json")):
        raise SettingsError(f"--run {args.run}: not a run directory (no run.json)")
    if args.warmup_requests is None:
        args.warmup_requests = min(max(levels), 100)
    # at call time: keeps pandas out of every command's start (cli.main imports this module)
    from ..analysis.levels.measure import level_metrics
    from ..report.summary_files import clean
    from ..run_format.load import load_run

    try:  # first: a run directory whose files are not what they claim is one line, before any load
        peak_req, peak_chunks, run_health = run_peaks(args.run) if args.run else (None, None, [])
    except ValueError as e:
        raise SettingsError(f"--run: {e}") from None
    # an unusable target is a usage error (SettingsError, 2), a failed echo run is not (1)
    if args.host:
        run_dir = _echo_run(args, args.host)
    else:
        with SimulatorProcess("--echo", "--server-workers", str(args.server_workers)) as sim:
            print(f"Echo server ({args.server_workers} processes) at {sim.url}", flush=True)
            run_dir = _echo_run(args, sim.url)
    data = load_run(run_dir)
    metrics = level_metrics(data.requests, data.steps, data.streams)
    levels_out = echo_levels(metrics, chunk_rates(data.requests, metrics))
    result = judge(levels_out, args.max_p50_ms, args.min_margin, peak_req, peak_chunks, run_health)
    result.settings = {
        "echo_run": run_dir,
        "levels": levels,
        "input_tokens": args.input_tokens,
        "output_tokens": args.output_tokens,
        "stream": not args.no_stream,
        "workers": args.workers,
        "echo_host": args.host or "built-in echo simulator",
        "min_margin": args.min_margin,
        "max_p50_ms": args.max_p50_ms,
    }
    print("\n" + format_table(levels_out) + "\n")
    print(
        f"Client capacity: {result.capacity_req_per_s:,.0f} req/s, {result.capacity_chunks_per_s:,.0f} chunks/s"
    )
    if result.margin_req is not None:
        print(
            f"Run {args.run}: peak {result.run_peak_req_per_s:,.2f} req/s, {result.run_peak_chunks_per_s or 0:,.0f} "
            f"chunks/s: margin {result.margin_req:,.1f}x (requests), {result.margin_chunks or math.nan:,.1f}x (chunks)"
        )
    if result.proven:
        print("Verdict: the client is NOT the bottleneck (proven).")
    else:
        print("Verdict: NOT proven:\n  - " + "\n  - ".join(result.reasons))
    target = os.path.join(args.run or run_dir, RESULT_FILE)
    with open(target, "w", encoding="utf-8") as fh:
        json.dump(clean(asdict(result)), fh, indent=2)
    print(f"Written: {target}")
    return 1 if (args.strict and not result.proven) else 0
