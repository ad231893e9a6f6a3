#!/usr/bin/env python3
"""How exactly ONE vllm-load process measures TTFT and ITL: measured minus true, per concurrency.

Starts the simulator in fixed-latency mode (`vllm-load sim --ttft 0.2 --itl 0.02`: no batching,
no jitter, one chunk per token, every request's first token 0.2 s after its handler started and
one more every 0.02 s on an absolute schedule) pinned to one core, and runs one single-process
vllm-load pinned to the other at each concurrency (10, 100, 1000), measured the way
`bench/client_capacity.py` measures (one level of `--seconds`, warm-up = the first `users`
requests to finish, `vllm_load.analysis.levels.measure` over the run directory). Prints, per level,
TTFT and ITL at p50 and p99 against the nominal delays, then against the server's trace, and the
targets (|error| at p99 ≤ 1 ms at 100 users, ≤ 5 ms at 1000).

The truth is the simulator's own record: it runs with `--trace` and stamps every token as it
writes it, and vllm-load sends each request's `request_id` as `X-Request-Id`, so every measured
request is joined to the server's line for it. Printed per level: the client's first-chunk time
minus the server's write time (p50, p99, max, and p99 of its absolute value), the same for the
end of the stream, and measured vs true TTFT and ITL percentiles (true ITL = gaps between the
server's writes, put through the same 1 % log buckets). The targets are checked against
this truth: p99 of |first-chunk error| for TTFT, |measured p99 − true p99| for ITL.

The first table, measured − the nominal 0.2 s / 0.02 s, mixes client error with the server's own
lateness (a late server looks exactly like a slow client from the client's side); three figures
there separate them. (1) The server's own view: the simulator's `/metrics` histograms have exact sums,
so the mean TTFT and mean E2E it observed (scraped before and after each measurement) give its
mean lateness against 0.2 s and 0.2 + (n − 1) × 0.02 s; client mean TTFT − server mean TTFT is
the client's own mean TTFT overhead (loopback included). (2) The benchmark_serving-style
reference client (`bench/reference_client.py`) measures the same server at the same level on
the same core (skip with `--no-reference`): errors both clients share come from the server or
the machine. The server's core busy % is printed too: near 100 % the simulator is late.
ITL percentiles come from vllm-load's log histograms (buckets 1 % wide: ±0.1 ms at 20 ms).

    python bench/timing_accuracy.py                   # 10, 100, 1000 users, 60 s each, 512-token streams
    python bench/timing_accuracy.py --quick           # 10 users, 3 s: checks that the bench works
    python bench/timing_accuracy.py --users 1000 --no-reference --profile /tmp/stacks.txt   # py-spy
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from dataclasses import dataclass  # noqa: E402

import pandas as pd  # noqa: E402
from client_capacity import (  # noqa: E402
    Figures,
    Load,
    Sampler,
    group_pids,
    measure,
    output_dir,
    pin,
    placement,
    server_busy,
    start_profile,
)

from vllm_load.run_format.histogram import LogHistogram  # noqa: E402
from vllm_load.run_format.records import read_requests  # noqa: E402
from vllm_load.sim.child import SimulatorProcess  # noqa: E402
from vllm_load.sim.trace import TraceRecord, read_trace  # noqa: E402

PREMISE_TOGETHER = (
    0.01  # above this share of tokens written together, say the targets' premise did not hold
)
SERIES = {"ttft": "vllm:time_to_first_token_seconds", "e2e": "vllm:e2e_request_latency_seconds"}


def scrape(url: str) -> dict[str, float]:
    """The simulator's histogram sums and counts (`ttft_sum`, `ttft_count`, `e2e_sum`, `e2e_count`)."""
    with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
        text = resp.read().decode("utf-8", "replace")
    out = {}
    for key, name in SERIES.items():
        for part in ("sum", "count"):
            m = re.search(rf"^{re.escape(name)}_{part}(?:{{[^}}]*}})? (\S+)$", text, re.M)
            out[f"{key}_{part}"] = float(m.group(1)) if m else math.nan
    return out


def server_means(before: dict[str, float], after: dict[str, float]) -> tuple[float, float]:
    """(mean TTFT, mean E2E) the server observed for the requests between two scrapes."""

    def mean(key: str) -> float:
        n = after[f"{key}_count"] - before[f"{key}_count"]
        return (after[f"{key}_sum"] - before[f"{key}_sum"]) / n if n > 0 else math.nan

    return mean("ttft"), mean("e2e")


@dataclass
class TraceFigures:
    """One vllm-load window against the simulator's --trace, joined request by request on X-Request-Id.

    first_err / last_err: the client's time for the first content chunk (start_ts + ttft) and for
    the end of the stream (end_ts) minus the time the server wrote those bytes, per request.
    ttft_* / itl_*: (measured, true) percentile pairs; true TTFT is the server's first write minus
    the client's start_ts, true ITL the gaps between the server's writes (one token each), both put
    through the same 1 % log buckets as the client's ITL.
    """

    matched: int
    requests: int
    written_together: (
        float  # share of tokens the server wrote in the same write() as the one before
    )
    first_err: tuple[float, float, float]  # p50, p99, max
    abs_first_err_p99: float
    last_err: tuple[float, float]  # p50, p99
    ttft_p50: tuple[float, float]
    ttft_p99: tuple[float, float]
    itl_p50: tuple[float, float]
    itl_p99: tuple[float, float]


def against_trace(fig: Figures, trace: dict[str, TraceRecord]) -> TraceFigures:
    """Join `fig`'s measured requests to the server's record of the same requests."""
    req = read_requests(os.path.join(fig.run_dir, "requests.csv"))
    start, end = fig.window
    # the measured requests: level 0's successes that ended inside its measured window (`analyse`)
    rows = req[
        (req["level"] == 0) & (req["ok"] == 1) & (req["end_ts"] > start) & (req["end_ts"] <= end)
    ]
    first_err, last_err, ttft_true, ttft_measured, itl_true = [], [], [], [], []
    together = 0
    itl_measured = LogHistogram()
    for rid, begin, finish, ttft, hist in zip(
        rows["request_id"], rows["start_ts"], rows["end_ts"], rows["ttft"], rows["itl_hist"]
    ):
        server = trace.get(rid)
        if server is None or not server.tokens:
            continue
        first_err.append(begin + ttft - server.tokens[0])
        last_err.append(finish - server.end)
        ttft_true.append(server.tokens[0] - begin)
        ttft_measured.append(ttft)
        gaps = [b - a for a, b in zip(server.tokens, server.tokens[1:])]
        itl_true.extend(gaps)
        together += gaps.count(0.0)
        if isinstance(hist, str):
            itl_measured.merge(LogHistogram.parse(hist))
    if not first_err:
        raise RuntimeError(f"no request of {fig.run_dir} is in the simulator's trace")
    first, last = pd.Series(first_err), pd.Series(last_err)
    pct = lambda s, q: float(s.quantile(q / 100, interpolation="higher"))  # noqa: E731
    ttft_m, ttft_t, itl_t = (
        LogHistogram.of(ttft_measured),
        LogHistogram.of(ttft_true),
        LogHistogram.of(itl_true),
    )
    pair = lambda m, t, q: (m.percentile(q), t.percentile(q))  # noqa: E731
    return TraceFigures(
        matched=len(first_err),
        requests=len(rows),
        written_together=together / max(1, len(itl_true)),
        first_err=(pct(first, 50), pct(first, 99), float(first.max())),
        abs_first_err_p99=pct(first.abs(), 99),
        last_err=(pct(last, 50), pct(last, 99)),
        ttft_p50=pair(ttft_m, ttft_t, 50),
        ttft_p99=pair(ttft_m, ttft_t, 99),
        itl_p50=pair(itl_measured, itl_t, 50),
        itl_p99=pair(itl_measured, itl_t, 99),
    )


def ms(seconds: float) -> str:
    return "-" if seconds != seconds else f"{seconds * 1000:+8.2f}"


def print_row(
    fig: Figures, ttft: float, itl: float, server: tuple[float, float], server_cores
) -> None:
    expected_e2e = ttft + (fig.load.output_tokens - 1) * itl
    busy = server_busy(fig, server_cores)
    print(
        f"  {fig.load.users:>6}  {fig.client:<10}{ms(fig.ttft_p50 - ttft)}{ms(fig.ttft_p99 - ttft)}"
        f"{ms(fig.itl_p50 - itl)}{ms(fig.itl_p99 - itl)}  {ms(fig.ttft_mean - ttft)} {ms(server[0] - ttft)}"
        f" {ms(server[1] - expected_e2e)} {ms(fig.ttft_mean - server[0])}"
        f"{busy:>8.0f}%{100 * fig.cpu_s / fig.window_s:>8.0f}%{fig.success * 100:>7.1f}%"
    )


HEADER = (
    "   users  client    TTFT p50 TTFT p99  ITL p50  ITL p99   TTFT mean  srv TTFT  srv E2E  client-srv"
    "  srv core  client  success\n"
    "                    (measured − true, ms)                   (mean, ms) (server lateness)  (TTFT ms)"
    "     busy     CPU"
)


TRACE_HEADER = (
    "   users  matched     first-chunk error      |err|   end error     TTFT p50       TTFT p99"
    "        ITL p50        ITL p99       written\n"
    "                     p50     p99      max   p99    p50    p99   measured/true  measured/true"
    "  measured/true  measured/true  together   (ms)"
)


def print_trace_row(fig: Figures, tf: TraceFigures) -> None:
    m = lambda v: f"{v * 1000:.2f}"  # noqa: E731
    print(
        f"  {fig.load.users:>6}  {tf.matched:>5}/{tf.requests:<5}{ms(tf.first_err[0])}{ms(tf.first_err[1])}"
        f" {ms(tf.first_err[2])}{tf.abs_first_err_p99 * 1000:>7.2f}{ms(tf.last_err[0])}{ms(tf.last_err[1])}"
        f"   {m(tf.ttft_p50[0]):>6}/{m(tf.ttft_p50[1]):<7} {m(tf.ttft_p99[0]):>6}/{m(tf.ttft_p99[1]):<7}"
        f" {m(tf.itl_p50[0]):>6}/{m(tf.itl_p50[1]):<7} {m(tf.itl_p99[0]):>6}/{m(tf.itl_p99[1]):<7}"
        f"{100 * tf.written_together:>7.2f}%"
    )


def targets(results: list[tuple[Figures, TraceFigures]]) -> list[tuple[str, bool]]:
    """The targets for vllm-load against the server's trace: 1 ms at 100 users, 5 ms at 1000.

    TTFT: the 99th percentile of |client's first-chunk time − server's write time| over the
    window's requests. ITL: |measured p99 − true p99| (the client keeps ITL as histograms, so
    gaps are compared as distributions).
    """
    out = []
    for fig, tf in results:
        limit = {100: 0.001, 1000: 0.005}.get(fig.load.users)
        if limit is None:
            continue
        itl_err = tf.itl_p99[0] - tf.itl_p99[1]
        out.append(
            (
                f"TTFT at {fig.load.users} users: p99 of |first-chunk error| {tf.abs_first_err_p99 * 1000:.2f} ms"
                f" (<= {limit * 1000:g} ms)",
                tf.abs_first_err_p99 <= limit,
            )
        )
        out.append(
            (
                f"ITL at {fig.load.users} users: measured p99 − true p99 {itl_err * 1000:+.2f} ms"
                f" (|error| <= {limit * 1000:g} ms)",
                abs(itl_err) <= limit,
            )
        )
    return out


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--users", default="10,100,1000", help="concurrency levels to measure")
    parser.add_argument(
        "--seconds",
        type=float,
        default=60.0,
        help="length of each measured level (warm-up included: the first `users` requests)",
    )
    parser.add_argument("--ttft", type=float, default=0.2, help="the simulator's true TTFT (s)")
    parser.add_argument("--itl", type=float, default=0.02, help="the simulator's true ITL (s)")
    parser.add_argument(
        "--output-tokens",
        type=int,
        default=512,
        help="tokens (= chunks) per response (512: the methodology's output length)",
    )
    parser.add_argument("--input-tokens", type=int, default=64, help="prompt tokens")
    parser.add_argument(
        "--sim-workers",
        type=int,
        default=1,
        help="simulator processes on the server cores (the server's own means need 1)",
    )
    parser.add_argument("--no-reference", action="store_true", help="measure vllm-load only")
    parser.add_argument(
        "--out", default="", help="where run directories go (default: a new temporary directory)"
    )
    parser.add_argument(
        "--profile",
        default="",
        metavar="PATH",
        help="py-spy the vllm-load process (collapsed stacks, --nonblocking) at the highest level",
    )
    parser.add_argument(
        "--quick", action="store_true", help="10 users, 3 s, 16 tokens: a smoke test"
    )
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.quick:
        args.users, args.seconds, args.output_tokens = "10", 3.0, 16
    users = [int(u) for u in args.users.split(",")]
    out = output_dir(args.out, "vllm-load-timing-")
    client_cpus, server_cpus = placement()
    clients = ("vllm-load",) if args.no_reference else ("vllm-load", "reference")
    print(
        f"client cores {sorted(client_cpus) if client_cpus else 'any'}, server cores "
        f"{sorted(server_cpus) if server_cpus else 'any'}; run directories in {out}",
        flush=True,
    )
    sampler = Sampler()
    rows = []
    trace_path = os.path.join(out, "sim-trace.jsonl")
    sim_args = (
        "--ttft",
        f"{args.ttft:g}",
        "--itl",
        f"{args.itl:g}",
        "--tokens-per-chunk",
        "1",
        "--step-jitter",
        "0",
        "--server-workers",
        str(args.sim_workers),
        "--trace",
        trace_path,
    )
    with SimulatorProcess(*sim_args) as sim:
        time.sleep(0.5 * args.sim_workers)
        pids = group_pids(sim.proc.pid)
        pin(pids, server_cpus)
        sampler.watch("server", pids)
        sampler.start()
        print(f"simulator `vllm-load sim {' '.join(sim_args)}` at {sim.url}", flush=True)
        try:
            for n in users:
                load = Load(n, True, args.output_tokens, args.input_tokens, args.seconds)
                for client in clients:
                    before = scrape(sim.url)
                    profile = (
                        start_profile(args.profile, args.seconds)
                        if (args.profile and client == "vllm-load" and n == max(users))
                        else None
                    )
                    fig = measure(client, sim.url, load, out, client_cpus, sampler, profile)
                    # each scrape reaches one worker: with several, the differences mean nothing
                    means = (
                        server_means(before, scrape(sim.url))
                        if args.sim_workers == 1
                        else (math.nan, math.nan)
                    )
                    rows.append((fig, means))
        finally:
            sampler.stop()
    print("\n" + HEADER)
    for fig, server in rows:
        print_row(fig, args.ttft, args.itl, server, server_cpus)
    print(
        "  (srv TTFT / srv E2E: the simulator's own mean TTFT and E2E minus the true ones, from its /metrics;"
        " client-srv: client mean TTFT − server mean TTFT)"
    )
    trace = read_trace(trace_path)  # complete now: the simulator wrote its last lines as it stopped
    traced = [(fig, against_trace(fig, trace)) for fig, _ in rows if fig.client == "vllm-load"]
    print(
        "\nvllm-load against the simulator's own record of when it wrote each token (--trace, joined on "
        "X-Request-Id);\nerrors are client time − server time, per request (ms):\n" + TRACE_HEADER
    )
    for fig, tf in traced:
        print_trace_row(fig, tf)
    checks = targets(traced)
    print(
        "  (written together: tokens the server wrote in one write() with the token before, because it"
        " was late;\n   the targets assume one chunk per token, and such a pair reaches the client as one read)"
    )
    print("\nTargets (true = the server's trace):")
    for text, ok in checks:
        print(f"  {'PASS' if ok else 'FAIL'}  {text}")
    if not checks:
        print("  (none at these levels: the targets are at 100 and 1000 users)")
    for fig, tf in traced:
        if tf.written_together > PREMISE_TOGETHER:
            print(
                f"  NOTE  at {fig.load.users} users the simulator wrote {100 * tf.written_together:.1f} % of tokens in"
                " one write() with the token before (it ran late): the targets assume one chunk per token.\n"
                "        Late writes come in bursts, and a burst lengthens the client's hub turns: a first chunk"
                " read after the next token arrived is dated by it (see bench/README.md)."
            )
    return 1 if args.strict and not all(ok for _, ok in checks) else 0


if __name__ == "__main__":
    sys.exit(main())
