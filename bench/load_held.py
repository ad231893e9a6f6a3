#!/usr/bin/env python3
"""Load held: N concurrent streaming users on local workers against the simulator for a long
time, with flat memory per worker and every request accounted for.

Starts `vllm-load sim` (engine mode, `--max-num-seqs` and KV cache big enough to run every
user at once, `--time-scale` slowing the model so the box can write and read every token)
and `vllm-load run --workers W --levels N` with one level that only its time cap ends
(`--level-time-cap DURATION`, an unreachable `--requests-per-level`), printing progress while
it runs. Afterwards, from the run directory and the simulator:

- memory: RSS per worker from client_health.csv, at the first sample once all N users have a
  request in flight (the server first reports running + waiting >= N) and at the last sample;
  growth in MiB and %; its peak under load and its drift once settled; also each worker's CPU %
  of a core and event-loop lag over the held window;
- achieved concurrency: mean recorded requests in flight (client side) and mean running +
  waiting (server side, server_metrics.csv), against the users asked for;
- accounting: rows of requests.csv (ok + failed by category), Locust's own total (run.json
  `locust_totals`, locust_stats.csv), and what the server received: its
  `vllm:request_success_total` over every finished_reason (stop, length, abort), scraped once
  the server is idle, just before it is stopped. A request killed by the end of the test is in
  neither requests.csv nor Locust's counts (docs/run-format.md), and a closed-loop user always
  has exactly one request out, so `sent = requests.csv rows + users running at the stop`. The
  server's counts split the requests in flight at the stop into those it had finished but the
  client had not read yet, those it cut off (`abort`), and those sent moments before the stop
  that it never got to read; every request is accounted for when Locust agrees with
  requests.csv and no part of the split is negative (e.g. records lost on the way to the
  master would make the server have received more than was recorded plus in flight).

Prints a verdict line (memory flat: every worker's RSS, at its last sample and at its peak
under load, less than --growth-limit % above its start; every request accounted for) and exits 1 on FAIL, 2 when the run itself failed.

    python bench/load_held.py                                 # 1000 users, 2 workers, 300 s
    python bench/load_held.py --users 50 --duration 10        # a quick check that the bench works
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from vllm_load.analysis.levels.client_side import read_client_health  # noqa: E402
from vllm_load.analysis.levels.measure import measure_levels  # noqa: E402
from vllm_load.run_format.records import read_requests  # noqa: E402
from vllm_load.sim.child import SimulatorProcess  # noqa: E402

NEVER = 10**9  # requests per level: only the time cap ends the level
BLOCK_SIZE = 16  # the simulator's default KV block size
STARTUP_ALLOWANCE = (
    120.0  # seconds for Locust and its workers to start and to stop, beyond --duration
)
IDLE_WAIT = 20.0
CLK_TCK = os.sysconf("SC_CLK_TCK")  # seconds to wait for the server to see every connection closed


# --- arguments ---------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Hold N concurrent streaming users against the simulator and check that memory "
        "stays flat per worker and that every request is accounted for.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--users", type=int, default=1000, help="concurrent closed-loop streaming users"
    )
    parser.add_argument(
        "--duration",
        type=float,
        default=300.0,
        help="seconds to hold the load (the level's time cap)",
    )
    parser.add_argument("--workers", type=int, default=2, help="local Locust worker processes")
    parser.add_argument("--input-tokens", type=int, default=128, help="exact prompt length")
    parser.add_argument("--output-tokens", type=int, default=64, help="exact output length")
    parser.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        help="simulator --time-scale: with N running sequences a step takes about "
        "(0.01 + N * 5e-5) * F seconds, so every stream gets one token per step",
    )
    parser.add_argument(
        "--growth-limit",
        type=float,
        default=10.0,
        help="memory is flat when every worker's RSS, at its last sample and at its peak under "
        "load, is less than this %% above its start",
    )
    parser.add_argument(
        "--progress-interval", type=float, default=15.0, help="seconds between progress lines"
    )
    parser.add_argument(
        "--out",
        default="",
        help="keep the run directory under OUT (default: a temporary "
        "directory, removed at the end)",
    )
    args = parser.parse_args(argv)
    if args.users < 1 or args.workers < 1 or args.duration <= 0:
        parser.error("--users and --workers must be at least 1 and --duration positive")
    return args


# --- processes ---------------------------------------------------------------------------------------
def sim_args(args: argparse.Namespace) -> list[str]:
    """Simulator flags that run every user's sequence at once: batch and KV cache big enough."""
    per_seq_blocks = math.ceil(
        (args.input_tokens + 64 + args.output_tokens) / BLOCK_SIZE
    )  # 64: chat template
    blocks = max(24576, int(args.users * per_seq_blocks * 1.5))
    return [
        "--max-num-seqs",
        str(max(1024, args.users)),
        "--num-gpu-blocks",
        str(blocks),
        "--time-scale",
        repr(args.time_scale),
        "--seed",
        "7",
    ]


def run_command(args: argparse.Namespace, url: str, run_dir: str) -> list[str]:
    """`vllm-load run` with one level of --users that only its time cap (--duration) ends."""
    return [
        sys.executable,
        "-m",
        "vllm_load",
        "run",
        "--host",
        url,
        "--workers",
        str(args.workers),
        "--levels",
        str(args.users),
        "--requests-per-level",
        str(NEVER),
        "--warmup-requests",
        "10",
        "--level-time-cap",
        repr(args.duration),
        "--input-tokens",
        str(args.input_tokens),
        "--output-tokens",
        str(args.output_tokens),
        "--run-dir",
        run_dir,
        "--loglevel",
        "WARNING",
    ]


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (from /proc), deepest last."""
    children: dict[int, list[int]] = {}
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(stat, encoding="ascii", errors="replace") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.split("/")[2]))
        except (OSError, IndexError, ValueError):
            continue
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) a process has used so far, from /proc; NaN when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK
    except (OSError, IndexError, ValueError):
        return float("nan")


def stop_run(proc: subprocess.Popen, grace: float = 60.0) -> None:
    """Ask `vllm-load run` to stop (SIGINT, which it forwards to Locust), then kill what is left by PID."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
    for pid in [proc.pid, *descendants(proc.pid)] if proc.poll() is None else descendants(proc.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    if proc.poll() is None:
        proc.wait(timeout=10)


# --- the server's own counts -------------------------------------------------------------------------
@dataclass
class ServerCounts:
    """What the simulator's /metrics says: requests by finished_reason and what is in it now."""

    finished: dict[str, float] = field(default_factory=dict)
    running: float = float("nan")
    waiting: float = float("nan")

    @property
    def received(self) -> int:
        return int(sum(self.finished.values()))

    @property
    def in_flight(self) -> float:
        return self.running + self.waiting


def scrape(url: str) -> ServerCounts:
    """One scrape of the simulator's /metrics."""
    with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
        text = resp.read().decode("utf-8", "replace")
    counts = ServerCounts()
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "vllm:request_success_total":
                reason = s.labels.get("finished_reason", "")
                counts.finished[reason] = counts.finished.get(reason, 0.0) + s.value
            elif s.name == "vllm:num_requests_running":
                counts.running = s.value
            elif s.name == "vllm:num_requests_waiting":
                counts.waiting = s.value
    return counts


def scrape_when_idle(url: str, timeout: float = IDLE_WAIT) -> ServerCounts:
    """The final counts, once the server has noticed every client connection close (or after `timeout`)."""
    t0 = time.monotonic()
    counts = scrape(url)
    while counts.in_flight > 0 and time.monotonic() - t0 < timeout:
        time.sleep(0.5)
        counts = scrape(url)
    state = (
        "idle"
        if counts.in_flight == 0
        else f"NOT idle (running {counts.running:.0f}, waiting {counts.waiting:.0f})"
    )
    print(f"server {state} {time.monotonic() - t0:.1f} s after the run ended", flush=True)
    return counts


# --- progress ----------------------------------------------------------------------------------------
class RowCounter:
    """Counts requests.csv rows as the file grows, reading only what is new."""

    def __init__(self, path: str) -> None:
        self.path, self.offset, self.lines = path, 0, 0

    def rows(self) -> int:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except OSError:
            return 0
        self.offset += len(data)
        self.lines += data.count(b"\n")
        return max(self.lines - 1, 0)  # minus the header


def last_rss(run_dir: str) -> str:
    """The latest RSS of every worker so far, from client_health.csv."""
    try:
        health = pd.read_csv(os.path.join(run_dir, "client_health.csv"), dtype={"worker": "string"})
    except (OSError, ValueError, pd.errors.EmptyDataError):
        return "-"
    if health.empty:
        return "-"
    last = health.groupby("worker").tail(1)
    return " ".join(f"{short(w)} {r:.0f}" for w, r in zip(last["worker"], last["rss_mib"]))


def short(worker: str) -> str:
    """A worker's Locust client id is long (host_uuid); its last 8 characters tell them apart."""
    return str(worker)[-8:]


def follow(
    proc: subprocess.Popen, sim_pid: int, url: str, run_dir: str, args: argparse.Namespace
) -> int:
    """Print a progress line every --progress-interval s until the run exits (or overruns); its exit code.

    Each line: seconds since the start, requests recorded so far, what the server holds, the
    simulator's CPU over the interval, and the latest RSS of every worker.
    """
    t0 = time.monotonic()
    sim_cpu, sim_at = cpu_seconds(sim_pid), t0
    deadline = t0 + args.duration + STARTUP_ALLOWANCE
    counter = RowCounter(os.path.join(run_dir, "requests.csv"))
    next_line = t0 + args.progress_interval
    while proc.poll() is None:
        if time.monotonic() > deadline:
            print(
                f"the run overran {args.duration + STARTUP_ALLOWANCE:.0f} s: stopping it",
                flush=True,
            )
            stop_run(proc)
            return proc.returncode if proc.returncode is not None else -1
        time.sleep(0.25)
        if time.monotonic() >= next_line:
            next_line += args.progress_interval
            try:
                server = scrape(url)
                in_server = f"running {server.running:.0f} waiting {server.waiting:.0f}"
            except OSError as e:
                in_server = f"no /metrics ({e})"
            cpu, now = cpu_seconds(sim_pid), time.monotonic()
            sim_percent, sim_cpu, sim_at = 100.0 * (cpu - sim_cpu) / (now - sim_at), cpu, now
            print(
                f"[{now - t0:5.0f} s] recorded {counter.rows():>8,} | server {in_server}, CPU {sim_percent:3.0f}% | "
                f"worker RSS MiB {last_rss(run_dir)}",
                flush=True,
            )
    return proc.returncode


# --- analysis ----------------------------------------------------------------------------------------
@dataclass
class Held:
    """The level that held the load: its users, when all of them were in flight, when it ended."""

    users: int
    level_start: float
    full_at: float  # first moment every user had a request in flight
    level_end: float
    stop_reason: str


def held_level(run_dir: str, users: int) -> Held:
    """The single level from steps.csv, and when the server first held every user's request."""
    steps = pd.read_csv(os.path.join(run_dir, "steps.csv"))
    level = steps.drop_duplicates("level", keep="last").iloc[-1]
    start, end = float(level["start_ts"]), float(level["end_ts"])
    full_at = float("nan")
    metrics_path = os.path.join(run_dir, "server_metrics.csv")
    if os.path.exists(metrics_path):
        metrics = pd.read_csv(metrics_path)
        full = metrics[
            (metrics["running"] + metrics["waiting"] >= users) & (metrics["ts"] >= start)
        ]
        if len(full):
            full_at = float(full["ts"].iloc[0])
    if full_at != full_at:  # never seen full: from the first request to finish
        requests = read_requests(os.path.join(run_dir, "requests.csv"))
        full_at = float(requests["end_ts"].min()) if len(requests) else start
    return Held(int(level["users"]), start, full_at, end, str(level["stop_reason"]))


def worker_memory(health: pd.DataFrame, held: Held) -> pd.DataFrame:
    """Per worker: RSS at the first sample with every user in flight (start) and at the last
    (end, taken after the users stopped); under load, its peak and its value at the level's end,
    and the drift once settled (from min(60 s, a quarter of the level) in to the level's end);
    CPU and loop lag over the held window."""
    rows = []
    settle_at = held.full_at + min(60.0, (held.level_end - held.full_at) / 4)
    for worker, part in health.sort_values("ts").groupby("worker"):
        loaded = part[part["ts"] >= held.full_at]
        first = loaded.iloc[0] if len(loaded) else part.iloc[0]
        last = part.iloc[-1]
        window = part[(part["ts"] > held.full_at) & (part["ts"] <= held.level_end)]
        if window.empty:
            window = part.iloc[-1:]
        settled = window[window["ts"] >= settle_at]
        rows.append(
            {
                "worker": str(worker),
                "samples": len(part),
                "start_ts": float(first["ts"]),
                "end_ts": float(last["ts"]),
                "rss_start": float(first["rss_mib"]),
                "rss_end": float(last["rss_mib"]),
                "rss_peak_load": float(window["rss_mib"].max()),
                "rss_level_end": float(window["rss_mib"].iloc[-1]),
                "drift_mib": float(
                    window["rss_mib"].iloc[-1]
                    - (settled if len(settled) else window)["rss_mib"].iloc[0]
                ),
                "settled_s": float(settle_at - held.full_at),
                "cpu_mean": float(window["cpu_percent"].mean()),
                "cpu_max": float(window["cpu_percent"].max()),
                "lag_mean": float(window["loop_lag_mean_ms"].mean()),
                "lag_max": float(window["loop_lag_max_ms"].max()),
            }
        )
    out = pd.DataFrame(rows)
    out["growth_mib"] = out["rss_end"] - out["rss_start"]
    out["growth_pct"] = 100.0 * out["growth_mib"] / out["rss_start"]
    out["peak_growth_pct"] = 100.0 * (out["rss_peak_load"] - out["rss_start"]) / out["rss_start"]
    return out


def server_concurrency(run_dir: str, held: Held) -> float:
    """Mean running + waiting the server reported between all users in flight and the level's end."""
    path = os.path.join(run_dir, "server_metrics.csv")
    if not os.path.exists(path):
        return float("nan")
    metrics = pd.read_csv(path)
    window = metrics[(metrics["ts"] >= held.full_at) & (metrics["ts"] <= held.level_end)]
    return float((window["running"] + window["waiting"]).mean()) if len(window) else float("nan")


def client_concurrency(requests: pd.DataFrame, held: Held) -> tuple[float, float, float]:
    """Mean recorded requests in flight from all users in flight to one longest request before the
    stop (the requests cut by the stop are in no record, so later seconds would undercount);
    with that window's start and end."""
    start, end = requests["start_ts"].to_numpy(float), requests["end_ts"].to_numpy(float)
    longest = float(np.nanmax(end - start)) if len(requests) else 0.0
    ws, we = held.full_at, held.level_end - longest
    if we <= ws:
        return float("nan"), ws, we
    overlap = np.clip(np.minimum(end, we) - np.maximum(start, ws), 0.0, None)
    return float(overlap.sum() / (we - ws)), ws, we


def print_concurrency(
    requests: pd.DataFrame, steps: pd.DataFrame, held: Held, server_mean: float
) -> None:
    """Achieved concurrency vs the users asked for, client and server side, with req/s and E2E."""
    mean, ws, we = client_concurrency(requests, held)
    level = measure_levels(requests, steps).metrics.iloc[-1]
    ok = requests[requests["ok"] == 1]
    done = ok[(ok["end_ts"] > held.full_at) & (ok["end_ts"] <= held.level_end)]
    e2e = done["e2e"].to_numpy(float)
    rate = (
        len(done) / (held.level_end - held.full_at)
        if held.level_end > held.full_at
        else float("nan")
    )
    p50, p99 = np.percentile(e2e, [50, 99]) if len(e2e) else (float("nan"), float("nan"))
    print(
        f"achieved concurrency vs {held.users:,} users: mean in flight {mean:,.1f} client side (recorded requests, "
        f"{we - ws:,.0f} s from all users in flight to one longest request before the stop), "
        f"{server_mean:,.1f} server side (running + waiting); the run's own figure "
        f"{level['achieved_concurrency']:,.1f} (its measured window, recorded requests only)"
    )
    print(
        f"throughput: {rate:,.1f} req/s over the held window, E2E p50 {p50:.2f} s, p99 {p99:.2f} s"
    )


def locust_total(run_dir: str) -> tuple[int, int]:
    """Locust's own request count: run.json `locust_totals`, checked against locust_stats.csv."""
    with open(os.path.join(run_dir, "run.json"), encoding="utf-8") as fh:
        totals = json.load(fh).get("locust_totals") or {}
    stats = pd.read_csv(os.path.join(run_dir, "locust_stats.csv"))
    aggregated = stats[stats["Name"] == "Aggregated"]
    csv_total = int(aggregated["Request Count"].iloc[0]) if len(aggregated) else -1
    json_total = int(totals.get("requests", -1))
    if csv_total != json_total:
        print(f"  note: locust_stats.csv says {csv_total:,}, run.json locust_totals {json_total:,}")
    return json_total, int(totals.get("failures", -1))


# --- report ------------------------------------------------------------------------------------------
def print_memory(memory: pd.DataFrame, held: Held, limit: float) -> bool:
    """Per-worker RSS start/end/growth, CPU and loop lag; True when every worker stayed under the limit."""
    print(
        f"\nmemory per worker (start: first sample with all {held.users:,} users in flight, "
        f"{held.full_at - held.level_start:.1f} s into the level; end: last sample, after the users stopped):"
    )
    for w in memory.itertuples():
        print(
            f"  worker {short(w.worker)}  RSS start {w.rss_start:7.1f} MiB  end {w.rss_end:7.1f} MiB  "
            f"growth {w.growth_mib:+6.1f} MiB ({w.growth_pct:+5.1f}%)  over {w.end_ts - w.start_ts:5.0f} s, "
            f"{w.samples} samples"
        )
        print(
            f"    under load: peak {w.rss_peak_load:.1f} MiB ({w.peak_growth_pct:+.1f}% on start), at the level's end "
            f"{w.rss_level_end:.1f} MiB; drift from {w.settled_s:.0f} s in to the level's end {w.drift_mib:+.2f} MiB"
        )
    print("cpu per worker over the held window (% of one core; the machine is shared, so noisy):")
    for w in memory.itertuples():
        print(
            f"  worker {short(w.worker)}  CPU mean {w.cpu_mean:5.1f}%  max {w.cpu_max:5.1f}%  "
            f"loop lag mean {w.lag_mean:6.2f} ms  max {w.lag_max:7.1f} ms"
        )
    return (
        bool(len(memory))
        and bool((memory["growth_pct"] < limit).all())
        and bool((memory["peak_growth_pct"] < limit).all())
    )


@dataclass
class Books:
    """Every request the client sent, split by what became of it (see `balance`)."""

    rows: int  # requests.csv
    ok: int
    failed: int
    categories: str
    locust: tuple[int, int]  # Locust's (requests, failures)
    in_flight: int  # users running at the stop: a closed-loop user always has one request out
    server: ServerCounts

    @property
    def sent(self) -> int:
        return self.rows + self.in_flight

    @property
    def completed_unread(self) -> int:
        """Finished by the server, but the client was stopped before it had read the end."""
        completed = sum(n for reason, n in self.server.finished.items() if reason != "abort")
        return int(completed) - self.ok

    @property
    def aborted(self) -> int:
        """Taken in by the server and cut off by the stop (its `abort` count, less recorded failures)."""
        return int(self.server.finished.get("abort", 0)) - self.failed

    @property
    def never_read(self) -> int:
        """Sent, but not yet read by the server when the clients closed their connections."""
        return self.sent - self.server.received

    def balance(self) -> list[str]:
        """What does not add up (empty when every request is accounted for)."""
        problems = []
        if self.locust != (self.rows, self.failed):
            problems.append(
                f"Locust counted {self.locust[0]:,} requests ({self.locust[1]:,} failures), "
                f"requests.csv has {self.rows:,} ({self.failed:,})"
            )
        if self.completed_unread < 0:
            problems.append(
                f"{-self.completed_unread:,} more successes recorded than the server completed"
            )
        if self.aborted < 0:
            problems.append(f"{-self.aborted:,} more failures recorded than the server saw cut off")
        if self.never_read < 0:
            problems.append(
                f"the server received {-self.never_read:,} requests more than were sent "
                "(records lost, or users not running at the stop)"
            )
        return problems


def users_at_stop(run_dir: str, held: Held) -> int:
    """Users Locust was running when the level ended: the user count of the last row of
    locust_stats_history.csv written before the stop (its timestamps are whole seconds, and rows
    of the stop itself show workers already stopping); the level's users without it."""
    try:
        history = pd.read_csv(os.path.join(run_dir, "locust_stats_history.csv"))
    except (OSError, ValueError):
        return held.users
    before = history[history["Timestamp"] < math.floor(held.level_end)]
    return int(before["User Count"].iloc[-1]) if len(before) else held.users


def books(
    requests: pd.DataFrame, locust: tuple[int, int], server: ServerCounts, in_flight: int
) -> Books:
    """The accounting of one run: requests.csv, Locust's total and the server's counts."""
    ok = int((requests["ok"] == 1).sum())
    categories = requests.loc[requests["ok"] != 1, "error"].fillna("?").value_counts()
    return Books(
        rows=len(requests),
        ok=ok,
        failed=len(requests) - ok,
        categories=", ".join(f"{c} {n:,}" for c, n in categories.items()) or "none",
        locust=locust,
        in_flight=in_flight,
        server=server,
    )


def print_accounting(b: Books, stop_gauge: float) -> bool:
    """requests.csv, Locust and the server's count side by side; True when every request is accounted for."""
    reasons = " + ".join(f"{r} {n:,.0f}" for r, n in sorted(b.server.finished.items()))
    print("\naccounting (accounted vs sent):")
    print(
        f"  requests.csv rows      {b.rows:>9,}  (ok {b.ok:,}, failed {b.failed:,}: {b.categories})"
    )
    print(f"  Locust total           {b.locust[0]:>9,}  (failures {b.locust[1]:,})")
    print(
        f"  in flight at the stop  {b.in_flight:>9,}  (Locust's users when the level ended, one request each in a closed "
        f"loop; the server's running + waiting at its last scrape before: {stop_gauge:,.0f})"
    )
    print(
        f"  sent                   {b.sent:>9,}  (= {b.rows:,} recorded + {b.in_flight:,} in flight at the stop)"
    )
    print(
        f"  server received        {b.server.received:>9,}  (vllm:request_success_total: {reasons})"
    )
    print(
        f"  the {b.in_flight:,} in flight at the stop: {b.completed_unread:,} finished by the server but not yet "
        f"read by the client, {b.aborted:,} cut off (server: abort), {b.never_read:,} not yet read by the server"
    )
    problems = b.balance()
    print(
        f"  sent = recorded + in flight at stop: {b.sent:,} = {b.rows:,} + {b.completed_unread:,} + "
        f"{b.aborted:,} + {b.never_read:,}  {'OK' if not problems else 'FAIL: ' + '; '.join(problems)}"
    )
    return not problems


def stop_gauge_reading(run_dir: str, held: Held) -> float:
    """The server's running + waiting at its last scrape before the level ended."""
    path = os.path.join(run_dir, "server_metrics.csv")
    if not os.path.exists(path):
        return float("nan")
    metrics = pd.read_csv(path)
    before = metrics[metrics["ts"] <= held.level_end]
    return float((before["running"] + before["waiting"]).iloc[-1]) if len(before) else float("nan")


def analyse(run_dir: str, server: ServerCounts, args: argparse.Namespace) -> bool:
    """Print memory, CPU, concurrency and accounting from the run directory; True on PASS."""
    held = held_level(run_dir, args.users)
    requests = read_requests(os.path.join(run_dir, "requests.csv"))
    steps = pd.read_csv(os.path.join(run_dir, "steps.csv"))
    health = read_client_health(os.path.join(run_dir, "client_health.csv"))
    print(
        f"\nlevel: {held.users:,} users for {held.level_end - held.level_start:.1f} s "
        f"(ended: {held.stop_reason}), {len(requests):,} requests recorded"
    )
    if health is None:
        print("no client_health.csv: cannot judge memory")
        flat = False
    else:
        memory = worker_memory(health, held)
        flat = print_memory(memory, held, args.growth_limit)
    print_concurrency(requests, steps, held, server_concurrency(run_dir, held))
    in_flight = users_at_stop(run_dir, held)
    accounted = print_accounting(
        books(requests, locust_total(run_dir), server, in_flight), stop_gauge_reading(run_dir, held)
    )
    verdict = "PASS" if flat and accounted else "FAIL"
    print(
        f"\nVERDICT {verdict}: memory flat {'PASS' if flat else 'FAIL'} (every worker's RSS growth, to its "
        f"last sample and to its peak under load, under {args.growth_limit:g}%), every request accounted for {'PASS' if accounted else 'FAIL'}"
    )
    return verdict == "PASS"


# --- main --------------------------------------------------------------------------------------------
def _terminate(signum, frame) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    base = args.out or tempfile.mkdtemp(prefix="vllm-load-held-")
    os.makedirs(base, exist_ok=True)
    run_dir = os.path.join(base, f"load-held-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}")
    sim = SimulatorProcess(*sim_args(args))
    proc: subprocess.Popen | None = None
    log_path = os.path.join(base, f"{os.path.basename(run_dir)}.log")
    try:
        sim.start()
        print(
            f"load held: {args.users:,} streaming users on {args.workers} workers for {args.duration:g} s "
            f"against the simulator at {sim.url} ({' '.join(sim_args(args))}), "
            f"{args.input_tokens} prompt / {args.output_tokens} output tokens",
            flush=True,
        )
        with open(log_path, "w", encoding="utf-8") as log:
            proc = subprocess.Popen(
                run_command(args, sim.url, run_dir),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
            cpu0, t0 = cpu_seconds(sim.proc.pid), time.monotonic()
            code = follow(proc, sim.proc.pid, sim.url, run_dir, args)
            sim_percent = 100.0 * (cpu_seconds(sim.proc.pid) - cpu0) / (time.monotonic() - t0)
        print(
            f"vllm-load run exited {code} after {time.monotonic() - t0:.0f} s (simulator CPU {sim_percent:.0f}% "
            f"of a core over it); run directory {run_dir}",
            flush=True,
        )
        server = scrape_when_idle(sim.url)
        if code != 0 or not os.path.exists(os.path.join(run_dir, "requests.csv")):
            with open(log_path, encoding="utf-8", errors="replace") as fh:
                print(fh.read()[-4000:])
            print("VERDICT FAIL: the run did not complete")
            return 2
        return 0 if analyse(run_dir, server, args) else 1
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        return 130
    finally:
        if proc is not None:
            stop_run(proc)
        sim.stop()
        if not args.out:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
