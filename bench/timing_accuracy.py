#!/usr/bin/env python3
"""How exactly ONE vllm-load process measures TTFT and ITL: measured minus true, per concurrency.

Starts the simulator in fixed-latency mode (`vllm-load sim --ttft 0.2 --itl 0.02`: no batching,
no jitter, one chunk per token, every request's first token 0.2 s after its handler started and
one more every 0.02 s on an absolute schedule) pinned to one core, and runs one single-process
vllm-load pinned to the other at each concurrency (10, 100, 1000), measured the way
`bench/client_capacity.py` measures (one level of `--seconds`, warm-up = the first `users`
requests to finish, `vllm_load.analysis.levels` over the run directory). Prints, per level,
measured − true for TTFT and ITL at p50 and p99 and the issue-8 targets (|error| at p99 ≤ 1 ms at
100 users, ≤ 5 ms at 1000).

A late server looks exactly like a slow client from the client's side, so two more figures
separate them. (1) The server's own view: the simulator's `/metrics` histograms have exact sums,
so the mean TTFT and mean E2E it observed (scraped before and after each measurement) give its
mean lateness against 0.2 s and 0.2 + (n − 1) × 0.02 s; client mean TTFT − server mean TTFT is
the client's own mean TTFT overhead (loopback included). (2) The benchmark_serving-style
reference client (`bench/reference_client.py`) measures the same server at the same level on
the same core (skip with `--no-reference`): errors both clients share come from the server or
the machine. The server's core busy % is printed too: near 100 % the simulator is late.
ITL percentiles come from vllm-load's log histograms (buckets 1 % wide: ±0.1 ms at 20 ms).

    python bench/timing_accuracy.py                   # 10, 100, 1000 users, 20 s each
    python bench/timing_accuracy.py --quick           # 10 users, 3 s: checks that the bench works
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from client_capacity import Figures, Load, Sampler, group_pids, measure, pin, placement, server_busy  # noqa: E402
from vllm_load.sim.process import SimulatorProcess  # noqa: E402

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


def ms(seconds: float) -> str:
    return "-" if seconds != seconds else f"{seconds * 1000:+8.2f}"


def print_row(fig: Figures, ttft: float, itl: float, server: tuple[float, float], server_cores) -> None:
    expected_e2e = ttft + (fig.load.output_tokens - 1) * itl
    busy = server_busy(fig, server_cores)
    print(f"  {fig.load.users:>6}  {fig.client:<10}{ms(fig.ttft_p50 - ttft)}{ms(fig.ttft_p99 - ttft)}"
          f"{ms(fig.itl_p50 - itl)}{ms(fig.itl_p99 - itl)}  {ms(fig.ttft_mean - ttft)} {ms(server[0] - ttft)}"
          f" {ms(server[1] - expected_e2e)} {ms(fig.ttft_mean - server[0])}"
          f"{busy:>8.0f}%{100 * fig.cpu_s / fig.window_s:>8.0f}%{fig.success * 100:>7.1f}%")


HEADER = ("   users  client    TTFT p50 TTFT p99  ITL p50  ITL p99   TTFT mean  srv TTFT  srv E2E  client-srv"
          "  srv core  client  success\n"
          "                    (measured − true, ms)                   (mean, ms) (server lateness)  (TTFT ms)"
          "     busy     CPU")


def targets(results: list[Figures], ttft: float, itl: float) -> list[tuple[str, bool]]:
    """Issue-8 targets for vllm-load: |p99 error| of TTFT and ITL, 1 ms at 100 users, 5 ms at 1000."""
    out = []
    for fig in results:
        limit = {100: 0.001, 1000: 0.005}.get(fig.load.users)
        if fig.client != "vllm-load" or limit is None:
            continue
        for name, value, true in (("TTFT", fig.ttft_p99, ttft), ("ITL", fig.itl_p99, itl)):
            err = value - true
            out.append((f"{name} p99 error at {fig.load.users} users: {err * 1000:+.2f} ms (|error| <= "
                        f"{limit * 1000:g} ms)", abs(err) <= limit))
    return out


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--users", default="10,100,1000", help="concurrency levels to measure")
    parser.add_argument("--seconds", type=float, default=20.0, help="length of each measured level (warm-up included)")
    parser.add_argument("--ttft", type=float, default=0.2, help="the simulator's true TTFT (s)")
    parser.add_argument("--itl", type=float, default=0.02, help="the simulator's true ITL (s)")
    parser.add_argument("--output-tokens", type=int, default=32, help="tokens (= chunks) per response")
    parser.add_argument("--input-tokens", type=int, default=64, help="prompt tokens")
    parser.add_argument("--sim-workers", type=int, default=1,
                        help="simulator processes on the server cores (the server's own means need 1)")
    parser.add_argument("--no-reference", action="store_true", help="measure vllm-load only")
    parser.add_argument("--out", default="", help="where run directories go (default: a new temporary directory)")
    parser.add_argument("--quick", action="store_true", help="10 users, 3 s, 16 tokens: a smoke test")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.quick:
        args.users, args.seconds, args.output_tokens = "10", 3.0, 16
    users = [int(u) for u in args.users.split(",")]
    out = args.out or tempfile.mkdtemp(prefix="vllm-load-timing-")
    client_cpus, server_cpus = placement()
    clients = ("vllm-load",) if args.no_reference else ("vllm-load", "reference")
    print(f"client cores {sorted(client_cpus) if client_cpus else 'any'}, server cores "
          f"{sorted(server_cpus) if server_cpus else 'any'}; run directories in {out}", flush=True)
    sampler = Sampler()
    rows = []
    sim_args = ("--ttft", f"{args.ttft:g}", "--itl", f"{args.itl:g}", "--tokens-per-chunk", "1", "--step-jitter", "0",
                "--workers", str(args.sim_workers))
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
                    fig = measure(client, sim.url, load, out, client_cpus, sampler)
                    # each scrape reaches one worker: with several, the differences mean nothing
                    means = server_means(before, scrape(sim.url)) if args.sim_workers == 1 else (math.nan, math.nan)
                    rows.append((fig, means))
        finally:
            sampler.stop()
    print("\n" + HEADER)
    for fig, server in rows:
        print_row(fig, args.ttft, args.itl, server, server_cpus)
    print("  (srv TTFT / srv E2E: the simulator's own mean TTFT and E2E minus the true ones, from its /metrics;"
          " client-srv: client mean TTFT − server mean TTFT)")
    checks = targets([fig for fig, _ in rows], args.ttft, args.itl)
    print("\nTargets (issue 8):")
    for text, ok in checks:
        print(f"  {'PASS' if ok else 'FAIL'}  {text}")
    if not checks:
        print("  (none at these levels: the targets are at 100 and 1000 users)")
    return 1 if args.strict and not all(ok for _, ok in checks) else 0


if __name__ == "__main__":
    sys.exit(main())
