#!/usr/bin/env python3
"""How much load ONE vllm-load process generates, against peer clients on the same core.

Starts `vllm-load sim --echo` (every token exists on arrival) pinned to the server cores, then per
concurrency runs, pinned to one other core, a single-process vllm-load (`vllm-load run --workers 0`),
the benchmark_serving-style `bench/reference_client.py` and (non-streaming only) Locust's own
`FastHttpUser` (`bench/locust_peer.py`): non-streaming requests with 8 output tokens, then
streaming 512-token responses. All are measured alike: one level of `--seconds`
(warm-up: the first `users` requests to finish; the requests in flight at its end finish before
the client stops), `vllm_load.analysis.levels.measure` over the run directory, and /proc samples (client
CPU and RSS, server CPU, every core's busy time; every 0.1 s) cut to the measured window. The
server is not the limit when its cores stay below 90 % busy (checked for every window).

This VM's speed drifts (the same client's CPU per request moved 50 % within minutes here), so two
back-to-back windows can disagree on their own. Each load is therefore measured in `--rounds`
rounds, the clients in turn and in alternating order (A B C, C B A, A B C, ...): a ratio is taken
within each round, from windows a few seconds apart, and the targets judge the median of those.

Prints, per client, the median over rounds of req/s, chunks/s, client CPU seconds per 1,000 chunks
(or requests), p99 E2E, achieved concurrency, and the peak RSS; the median of the rounds' ratios
vllm-load / each peer with each round's ratio; and the targets with PASS/FAIL.

    python bench/client_capacity.py                   # 100 and 1000 users, 3 rounds of 15 s per client
    python bench/client_capacity.py --quick           # 10 users, 2 rounds of 2 s: checks that the bench works
    python bench/client_capacity.py --modes plain --users 100 --seconds 8   # non-streaming, 3 clients
    python bench/client_capacity.py --modes stream --users 1000 --profile /tmp/stacks.txt   # py-spy, top level of the last mode
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from vllm_load.analysis.levels.measure import measure_levels  # noqa: E402
from vllm_load.cli.validate_client import chunk_rates  # noqa: E402
from vllm_load.run_format.records import read_requests  # noqa: E402
from vllm_load.sim.child import SimulatorProcess  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE_MIB = os.sysconf("SC_PAGE_SIZE") / 2**20
NEVER = 10**8  # requests per level: the time cap ends the level
PEERS = ("reference", "locust")  # what vllm-load is compared with; locust: non-streaming only
SERVER_BUSY_LIMIT = 90  # % busy of the server core above which the server may be the limit


# --- processes and /proc ---------------------------------------------------------------------------
def placement() -> tuple[set[int] | None, set[int] | None]:
    """(client core, server cores): the second allowed core for the client, every other one for the
    server; (None, None) when this process may use only one core (then nothing is pinned)."""
    cpus = sorted(os.sched_getaffinity(0))
    return ({cpus[1]}, set(cpus) - {cpus[1]}) if len(cpus) >= 2 else (None, None)


def _stat_fields(pid: int) -> list[str]:
    with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
        return fh.read().rpartition(")")[2].split()


def usage(pid: int) -> tuple[float, float]:
    """(user + system CPU seconds of all its threads, RSS in MiB) of a process; NaNs once it is gone."""
    try:
        f = _stat_fields(pid)
        return (int(f[11]) + int(f[12])) / CLK_TCK, int(f[21]) * PAGE_MIB
    except (OSError, IndexError, ValueError):
        return math.nan, math.nan


def group_pids(pgid: int) -> list[int]:
    """Every process of a process group (a simulator and its --workers)."""

    def pgrp(pid: str) -> int:
        try:
            return int(_stat_fields(int(pid))[2])
        except (OSError, IndexError, ValueError):
            return -1

    return [int(p) for p in os.listdir("/proc") if p.isdigit() and pgrp(p) == pgid]


def pin(pids: list[int], cpus: set[int] | None) -> None:
    """Pin every thread of these processes to `cpus` (no-op for None)."""
    for tid in [int(t) for pid in pids for t in os.listdir(f"/proc/{pid}/task")] if cpus else []:
        try:
            os.sched_setaffinity(tid, cpus)
        except OSError:
            pass


def child_pid(pid: int, timeout: float = 30.0) -> int:
    """The first child of `pid` (the Locust process under `vllm-load run`)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with (
            contextlib.suppress(OSError),
            open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as fh,
        ):
            if kids := fh.read().split():
                return int(kids[0])
        time.sleep(0.05)
    raise RuntimeError(f"process {pid} started no child within {timeout:g} s")


def core_ticks() -> dict[int, tuple[int, int]]:
    """Per core: (busy ticks, total ticks) from /proc/stat (idle and iowait are not busy)."""
    with open("/proc/stat", encoding="ascii") as fh:
        rows = [line.split() for line in fh if line.startswith("cpu") and line[3].isdigit()]
    return {
        int(r[0][3:]): (sum(map(int, r[1:])) - int(r[4]) - int(r[5]), sum(map(int, r[1:])))
        for r in rows
    }


class Sampler(threading.Thread):
    """Every `interval`: CPU seconds and RSS of named sets of processes, and every core's ticks."""

    def __init__(self, interval: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.interval, self.groups, self.rows = interval, {}, []
        self._halt, self._lock = threading.Event(), threading.Lock()

    def watch(self, name: str, pids: list[int]) -> None:
        with self._lock:
            self.groups[name] = list(pids)

    def run(self) -> None:
        while not self._halt.wait(self.interval):
            with self._lock:
                groups = dict(self.groups)
            cpu, rss = {}, {}
            for name, pids in groups.items():
                per = [usage(p) for p in pids]
                cpu[name], rss[name] = sum(c for c, _ in per), per[0][1] if per else math.nan
            self.rows.append((time.time(), cpu, rss, core_ticks()))

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=5)

    def cpu_between(self, name: str, t0: float, t1: float) -> float:
        """CPU seconds `name` used between two Unix times (interpolated between samples)."""
        pts = np.array(
            [(t, c[name]) for t, c, _, _ in self.rows if c.get(name, math.nan) == c.get(name)]
        )
        return (
            float(np.interp(t1, pts[:, 0], pts[:, 1]) - np.interp(t0, pts[:, 0], pts[:, 1]))
            if len(pts) > 1
            else math.nan
        )

    def rss_max(self, name: str, t0: float, t1: float) -> float:
        return max(
            (
                r[name]
                for t, _, r, _ in self.rows
                if t0 <= t <= t1 and r.get(name, math.nan) == r.get(name)
            ),
            default=math.nan,
        )

    def core_busy(self, t0: float, t1: float) -> dict[int, float]:
        """Per core, % of the time busy (anyone's work) between the first and last sample in [t0, t1]."""
        inside = [k for t, _, _, k in self.rows if t0 <= t <= t1]
        if len(inside) < 2:
            return {}
        a, b = inside[0], inside[-1]
        return {c: 100.0 * (b[c][0] - a[c][0]) / max(1, b[c][1] - a[c][1]) for c in a if c in b}


# --- the two clients -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Load:
    users: int
    stream: bool
    output_tokens: int
    input_tokens: int = 64
    seconds: float = 15.0

    def label(self) -> str:
        return f"{self.users} users, " + (
            f"streaming {self.output_tokens} tokens"
            if self.stream
            else f"non-streaming {self.output_tokens} tokens"
        )


@dataclass
class Figures:
    """One client's measured window at one load."""

    client: str
    load: Load
    run_dir: str
    req_per_s: float = math.nan
    chunks_per_s: float = math.nan
    e2e_p99: float = math.nan
    ttft_p50: float = math.nan
    ttft_p99: float = math.nan
    ttft_mean: float = math.nan
    itl_p50: float = math.nan
    itl_p99: float = math.nan
    achieved: float = math.nan
    success: float = math.nan
    measured: int = 0
    window: tuple[float, float] = (math.nan, math.nan)
    cpu_s: float = math.nan
    rss_max_mib: float = math.nan
    server_cpu_s: float = math.nan
    core_busy: dict[int, float] = field(default_factory=dict)

    @property
    def window_s(self) -> float:
        return self.window[1] - self.window[0]

    @property
    def cpu_per_1k(self) -> float:
        """Client CPU seconds per 1,000 chunks (streaming) or requests (non-streaming)."""
        per_s = self.chunks_per_s if self.load.stream else self.req_per_s
        return (
            1000.0 * self.cpu_s / (per_s * self.window_s)
            if per_s and self.window_s > 0
            else math.nan
        )


def _popen(cmd: list[str], log_path: str, cpus: set[int] | None) -> subprocess.Popen:
    log = open(log_path, "wb")
    try:
        return subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
        )
    finally:
        log.close()


def _stop(proc: subprocess.Popen, pids: list[int], wait: float = 0.0, grace: float = 60.0) -> None:
    """Wait up to `wait` s for an exit, then SIGINT (a clean, flushed end), then SIGKILL to these exact pids."""
    for targets, sig, timeout in (
        ([], None, wait),
        ([proc.pid], signal.SIGINT, grace),
        (pids, signal.SIGKILL, 10),
    ):
        if proc.poll() is not None:
            return
        for pid in targets:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=timeout)


def _level0_end(run_dir: str) -> float | None:
    """When level 0 of a run ended (None while it runs)."""
    with contextlib.suppress(OSError, ValueError, IndexError, KeyError, pd.errors.EmptyDataError):
        end = pd.read_csv(os.path.join(run_dir, "steps.csv")).set_index("level").loc[0, "end_ts"]
        return None if pd.isna(end) else float(end)
    return None


def vllm_load_cmd(url: str, load: Load, run_dir: str) -> list[str]:
    """`vllm-load run`, one process: level 0 of `load.seconds` is measured, level 1 (the same users)
    keeps the load on while level 0's requests in flight finish."""
    n = load.users
    return [
        sys.executable,
        "-m",
        "vllm_load",
        "run",
        "--host",
        url,
        "--workers",
        "0",
        "--levels",
        f"{n},{n}",
        "--input-tokens",
        str(load.input_tokens),
        "--output-tokens",
        str(load.output_tokens),
        "--warmup-requests",
        str(n),
        "--requests-per-level",
        str(NEVER),
        "--level-time-cap",
        f"{load.seconds:g}",
        "--spawn-rate-per-level",
        str(max(1000, n)),
        "--metrics-interval",
        "0",
        "--loglevel",
        "WARNING",
        "--approximate-prompts",
        "--run-dir",
        run_dir,
        "--meta",
        "purpose=bench",
    ] + ([] if load.stream else ["--no-stream"])


def reference_cmd(url: str, load: Load, run_dir: str) -> list[str]:
    """The benchmark_serving-style client (bench/reference_client.py): it drains by itself."""
    return [
        sys.executable,
        os.path.join(HERE, "reference_client.py"),
        "--url",
        url,
        "--concurrency",
        str(load.users),
        "--input-tokens",
        str(load.input_tokens),
        "--output-tokens",
        str(load.output_tokens),
        "--seconds",
        f"{load.seconds:g}",
        "--run-dir",
        run_dir,
    ] + ([] if load.stream else ["--no-stream"])


def locust_cmd(url: str, load: Load, run_dir: str) -> list[str]:
    """Locust's FastHttpUser (bench/locust_peer.py), headless, one process: it drains (the
    requests in flight finish, --stop-timeout) and exits by itself."""
    n = load.users
    return [
        sys.executable,
        "-m",
        "locust",
        "-f",
        os.path.join(HERE, "locust_peer.py"),
        "--headless",
        "--host",
        url,
        "--users",
        str(n),
        "--spawn-rate",
        str(max(1000, n)),
        "--run-time",
        f"{math.ceil(load.seconds)}s",
        "--stop-timeout",
        "60",
        "--only-summary",
        "--loglevel",
        "WARNING",
        "--peer-run-dir",
        run_dir,
        "--peer-input-tokens",
        str(load.input_tokens),
        "--peer-output-tokens",
        str(load.output_tokens),
        "--peer-warmup",
        str(n),
    ]


CLIENT_CMDS = {"vllm-load": vllm_load_cmd, "reference": reference_cmd, "locust": locust_cmd}


def run_client(
    client: str, url: str, load: Load, run_dir: str, cpus, sampler: Sampler, on_start=None
) -> None:
    """Run one client pinned to `cpus`, sampled under the name `run_dir`; bounded in time."""
    os.makedirs(run_dir, exist_ok=True)
    cmd = CLIENT_CMDS[client](url, load, run_dir)
    proc = _popen(cmd, os.path.join(run_dir, "bench.log"), cpus)
    pids = [proc.pid]
    try:
        if client != "vllm-load":
            sampler.watch(run_dir, pids)
            return _stop(proc, pids, wait=load.seconds + 150)  # it drains and exits by itself
        pids.insert(0, child_pid(proc.pid))  # Locust runs under `vllm-load run`
        sampler.watch(run_dir, pids[:1])
        if on_start:
            on_start(pids[0])
        deadline, ended = time.monotonic() + load.seconds + 90, None
        while ended is None and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
            ended = _level0_end(run_dir)
        if (
            ended is not None
        ):  # level 0's requests in flight count in its concurrency: let them finish
            e2e = pd.to_numeric(
                read_requests(os.path.join(run_dir, "requests.csv"))["e2e"], errors="coerce"
            )
            time.sleep(min(load.seconds + 5, 2 * (e2e.max() if len(e2e) else 1.0) + 1))
    finally:
        _stop(proc, pids)


def analyse(fig: Figures, sampler: Sampler) -> Figures:
    """Fill `fig` from its run directory (level 0's measured window) and the /proc samples."""
    req = read_requests(os.path.join(fig.run_dir, "requests.csv"))
    steps = pd.read_csv(os.path.join(fig.run_dir, "steps.csv"))
    lm = measure_levels(req, steps)
    row = lm.metrics.iloc[0]
    fig.window = (float(row["window_start"]), float(row["window_end"]))
    if not fig.window_s > 0:
        raise RuntimeError(f"{fig.client}: no measured window in {fig.run_dir} (raise --seconds)")
    for name in ("req_per_s", "e2e_p99", "ttft_p50", "ttft_p99", "itl_p50", "itl_p99"):
        setattr(fig, name, float(row[name]))
    fig.achieved, fig.success, fig.measured = (
        float(row["achieved_concurrency"]),
        float(row["success_rate"]),
        int(row["measured"]),
    )
    fig.ttft_mean = float(lm.measured.loc[lm.measured["level"] == row["level"], "ttft"].mean())
    fig.chunks_per_s = chunk_rates(req, lm.metrics.iloc[:1]).get(int(row["level"]), math.nan)
    t0, t1 = fig.window
    fig.cpu_s, fig.rss_max_mib = (
        sampler.cpu_between(fig.run_dir, t0, t1),
        sampler.rss_max(fig.run_dir, t0, t1),
    )
    fig.server_cpu_s, fig.core_busy = (
        sampler.cpu_between("server", t0, t1),
        sampler.core_busy(t0, t1),
    )
    return fig


def output_dir(path: str, prefix: str) -> str:
    """Where this run's directories go: `path` (created; it must be empty, since run
    directories and the simulator's trace would mix with an earlier run's), else a new
    temporary directory."""
    if not path:
        return tempfile.mkdtemp(prefix=prefix)
    os.makedirs(path, exist_ok=True)
    if os.listdir(path):
        sys.exit(
            f"--out {path}: not empty; give a new or empty directory (an earlier run's files would mix in)"
        )
    return path


def measure(
    client: str,
    url: str,
    load: Load,
    out: str,
    cpus,
    sampler: Sampler,
    on_start=None,
    round_no: int | None = None,
) -> Figures:
    """Run one client at one load and return its figures (progress on stdout); `round_no`, when
    given, names the round in the run directory and the progress line."""
    tag = f"{client}-{load.users}-{'stream' if load.stream else 'plain'}"
    run_dir = os.path.join(out, tag if round_no is None else f"{tag}-r{round_no}")
    when = "" if round_no is None else f"round {round_no}, "
    print(
        f"  {client:>9}  {load.label()}: {when}running ({load.seconds:g} s + warm-up and drain) ...",
        flush=True,
    )
    run_client(client, url, load, run_dir, cpus, sampler, on_start)
    fig = analyse(Figures(client, load, run_dir), sampler)
    busy = ", ".join(f"core {c} {b:.0f}%" for c, b in sorted(fig.core_busy.items()))
    print(
        f"  {client:>9}  {fig.req_per_s:,.0f} req/s"
        + (f", {fig.chunks_per_s:,.0f} chunks/s" if load.stream else "")
        + f", achieved {fig.achieved:,.1f}, p99 E2E {fig.e2e_p99 * 1000:,.1f} ms, client CPU "
        f"{100 * fig.cpu_s / fig.window_s:.0f}%, server CPU {100 * fig.server_cpu_s / fig.window_s:.0f}% ({busy}), "
        f"window {fig.window_s:.1f} s, {fig.measured} requests",
        flush=True,
    )
    return fig


def start_profile(path: str, level_seconds: float):
    """A callback that runs `py-spy record` (collapsed stacks) on the pid it is given, from a third
    of the level on for half of it (start-up and warm-up left out). Its own CPU is not pinned."""

    def record(pid: int) -> None:
        time.sleep(2 + level_seconds / 3)  # Locust start-up, then the first third of the level
        subprocess.run(
            [
                shutil.which("py-spy") or "py-spy",
                "record",
                "--pid",
                str(pid),
                "--duration",
                f"{max(1, round(level_seconds / 2))}",
                "--rate",
                "100",
                "--nonblocking",
                "--format",
                "raw",
                "-o",
                path,
            ],
            capture_output=True,
            timeout=level_seconds + 60,
        )

    def start(pid: int) -> None:
        print(f"  profiling pid {pid} with py-spy into {path}", flush=True)
        threading.Thread(target=record, args=(pid,), daemon=True).start()

    return start


# --- the report ------------------------------------------------------------------------------------
def cell(value: float, spec: str, width: int) -> str:
    """A right-aligned table cell; `-` for a missing (NaN) figure."""
    return (format(value, spec) if value == value else "-").rjust(width)


def server_busy(fig: Figures, server_cores) -> float:
    """Mean % busy of the server cores during the window (NaN when nothing is pinned)."""
    busy = [b for c, b in fig.core_busy.items() if server_cores and c in server_cores]
    return sum(busy) / len(busy) if busy else math.nan


@dataclass(frozen=True)
class Rounds:
    """One load measured round by round: each client's figures, in round order."""

    load: Load
    figures: dict[str, list[Figures]]

    def rate(self, fig: Figures) -> float:
        """The throughput compared: chunks/s when streaming, req/s otherwise."""
        return fig.chunks_per_s if self.load.stream else fig.req_per_s

    def ratios(self, peer: str = "reference") -> list[float]:
        """vllm-load / `peer` throughput, within each round."""
        pairs = zip(self.figures.get("vllm-load", []), self.figures.get(peer, []))
        return [self.rate(v) / self.rate(r) for v, r in pairs]

    def cpu_ratios(self, peer: str = "reference") -> list[float]:
        """`peer` / vllm-load client CPU per 1k, within each round."""
        pairs = zip(self.figures.get("vllm-load", []), self.figures.get(peer, []))
        return [r.cpu_per_1k / v.cpu_per_1k for v, r in pairs]

    def peers(self) -> list[str]:
        """The peers measured at this load."""
        return [p for p in PEERS if self.figures.get(p)]

    def median(self, client: str, name: str) -> float:
        """The median over rounds of one figure (a Figures attribute or property)."""
        values = [getattr(f, name) for f in self.figures[client]]
        return statistics.median(values) if values else math.nan

    def every_figure(self) -> list[Figures]:
        return [f for figs in self.figures.values() for f in figs]


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else math.nan


def print_table(results: dict[tuple[int, bool], Rounds], server_cores) -> None:
    print(
        f"\n{'load':<36}{'client':<11}{'req/s':>9}{'chunks/s':>11}{'ratio':>7}{'CPU s/1k':>10}{'CPU ratio':>11}"
        f"{'p99 E2E ms':>12}{'achieved':>10}{'RSS MiB':>9}{'server core':>13}  ratio by round"
    )
    for (_users, stream), rounds in sorted(results.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        for client, figs in rounds.figures.items():
            if not figs:
                continue
            peer = client in PEERS  # its row holds vllm-load's ratio to it
            med = functools.partial(rounds.median, client)
            by_round = "/".join(f"{r:.2f}" for r in rounds.ratios(client)) if peer else "-"
            print(
                f"{rounds.load.label():<36}{client:<11}{cell(med('req_per_s'), ',.0f', 9)}"
                f"{cell(med('chunks_per_s') if stream else math.nan, ',.0f', 11)}"
                f"{cell(_median(rounds.ratios(client)) if peer else math.nan, '.2f', 7)}"
                f"{cell(med('cpu_per_1k'), '.4f', 10)}"
                f"{cell(_median(rounds.cpu_ratios(client)) if peer else math.nan, '.2f', 11)}"
                f"{cell(med('e2e_p99') * 1000, ',.1f', 12)}{cell(med('achieved'), ',.1f', 10)}"
                f"{cell(max(f.rss_max_mib for f in figs), ',.0f', 9)}"
                f"{cell(_median([server_busy(f, server_cores) for f in figs]), '.0f', 12)}%"
                f"  {by_round}"
            )
    print(
        "(medians over the rounds; ratio, on a peer's row: vllm-load / that peer's throughput within a round,\n"
        " median over the rounds; CPU s/1k: client CPU seconds per 1,000 chunks when streaming, per 1,000\n"
        " requests otherwise; CPU ratio: the peer's CPU per 1k / vllm-load's; RSS: the peak; server core: % busy)"
    )
    busy = [
        (f.client, f.load.label(), server_busy(f, server_cores))
        for rounds in results.values()
        for f in rounds.every_figure()
    ]
    hot = [f"{c} at {label} ({b:.0f}%)" for c, label, b in busy if b >= SERVER_BUSY_LIMIT]
    if not server_cores:
        print("Server limit: not checked (nothing pinned: only one core available)")
    elif hot:
        print(
            f"Server limit: the server core was >= {SERVER_BUSY_LIMIT}% busy for "
            + "; ".join(hot)
            + ": those throughput figures may be server-bound (CPU s/1k and CPU ratio are not)"
        )
    else:
        print(
            f"Server limit: the server core stayed below {SERVER_BUSY_LIMIT}% busy in every window: it was not the limit"
        )


def targets(results: dict[tuple[int, bool], Rounds]) -> list[tuple[str, bool]]:
    """The targets as (description with the figures, passed); 1000-user ones at the top level.
    Throughput ratios are the median of the rounds' ratios; other figures the median over rounds."""
    out = []
    top = max(u for u, _ in results)
    for (users, stream), rounds in sorted(results.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        kind = "streaming" if stream else "non-streaming"
        what, floor = ("chunks/s", 2.0) if stream else ("req/s", 1.5)
        for peer in rounds.peers():
            ratio, each = (
                _median(rounds.ratios(peer)),
                ", ".join(f"{r:.2f}" for r in rounds.ratios(peer)),
            )
            out.append(
                (
                    f"{kind} {what} at {users} users >= {floor:g}x {peer}: {ratio:.2f}x "
                    f"(median of rounds: {each})",
                    ratio >= floor,
                )
            )
        if users != top or "reference" not in rounds.peers():
            continue
        v_p99, r_p99 = rounds.median("vllm-load", "e2e_p99"), rounds.median("reference", "e2e_p99")
        out.append(
            (
                f"{kind} p99 E2E at {users} users <= reference's: {v_p99 * 1000:,.1f} ms vs "
                f"{r_p99 * 1000:,.1f} ms",
                v_p99 <= r_p99,
            )
        )
        v_ach, r_ach = (
            rounds.median("vllm-load", "achieved"),
            rounds.median("reference", "achieved"),
        )
        out.append(
            (
                f"{kind} achieved concurrency at {users} users >= 95%: {v_ach:,.1f} "
                f"({100 * v_ach / users:.1f}%; reference {r_ach:,.1f})",
                v_ach >= 0.95 * users,
            )
        )
        if stream:
            rss = max(f.rss_max_mib for f in rounds.figures["vllm-load"])
            out.append(
                (
                    f"RSS of vllm-load at {users} streaming users <= 300 MiB: {rss:,.0f} MiB",
                    rss <= 300,
                )
            )
    return out


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--users", default="100,1000", help="concurrency levels to measure")
    parser.add_argument(
        "--seconds",
        type=float,
        default=15.0,
        help="length of each measured level (warm-up included)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="measurements per client and load, the clients in alternating order; targets judge "
        "the median of the rounds' ratios",
    )
    parser.add_argument(
        "--server-workers",
        type=int,
        default=0,
        help="echo simulator processes (default: one per server core, at least 2)",
    )
    parser.add_argument(
        "--plain-tokens", type=int, default=8, help="output tokens of non-streaming requests"
    )
    parser.add_argument(
        "--stream-tokens", type=int, default=512, help="output tokens of streaming requests"
    )
    parser.add_argument("--input-tokens", type=int, default=64, help="prompt tokens")
    parser.add_argument(
        "--modes", default="plain,stream", help="plain (non-streaming) and/or stream, in that order"
    )
    parser.add_argument(
        "--out", default="", help="where run directories go (default: a new temporary directory)"
    )
    parser.add_argument(
        "--profile",
        default="",
        metavar="PATH",
        help="py-spy (raw collapsed stacks) of vllm-load at the top level of the last of --modes into PATH",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="10 users, 2 rounds of 2 s, 64 streamed tokens: a smoke test",
    )
    parser.add_argument(
        "--clients",
        default="vllm-load,reference,locust",
        help="which clients to measure: vllm-load and its peers (reference, locust: Locust's "
        "FastHttpUser, non-streaming only)",
    )
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.quick:
        args.users, args.seconds, args.stream_tokens, args.rounds = "10", 2.0, 64, 2
    if args.rounds < 1:
        sys.exit(f"--rounds {args.rounds}: give at least 1")
    users = [int(u) for u in args.users.split(",")]
    clients = args.clients.split(",")
    unknown = sorted(set(clients) - {"vllm-load", *PEERS})
    if unknown or "vllm-load" not in clients or len(clients) < 2:
        sys.exit(f"--clients {args.clients}: give vllm-load and at least one of {', '.join(PEERS)}")
    out = output_dir(args.out, "vllm-load-capacity-")
    client_cpus, server_cpus = placement()
    print(
        f"client cores {sorted(client_cpus) if client_cpus else 'any'}, server cores "
        f"{sorted(server_cpus) if server_cpus else 'any'}; {os.cpu_count()} CPUs; run directories in {out}",
        flush=True,
    )
    args.server_workers = args.server_workers or max(2, len(server_cpus or ()))
    sampler = Sampler()
    results: dict[tuple[int, bool], Rounds] = {}
    with SimulatorProcess("--echo", "--server-workers", str(args.server_workers)) as sim:
        time.sleep(0.5 * args.server_workers)  # every worker bound
        pids = group_pids(sim.proc.pid)
        pin(pids, server_cpus)
        sampler.watch("server", pids)
        sampler.start()
        print(f"echo simulator at {sim.url}: {args.server_workers} worker processes", flush=True)
        try:
            modes = args.modes.split(",")
            for mode in modes:
                stream = mode == "stream"
                for n in users:
                    load = Load(
                        n,
                        stream,
                        args.stream_tokens if stream else args.plain_tokens,
                        args.input_tokens,
                        args.seconds,
                    )
                    order = tuple(c for c in clients if not (stream and c == "locust"))
                    rounds = results[(n, stream)] = Rounds(load, {c: [] for c in order})
                    for r in range(1, args.rounds + 1):
                        profile = (
                            start_profile(args.profile, args.seconds)
                            if args.profile and (mode, n, r) == (modes[-1], max(users), args.rounds)
                            else None
                        )
                        for client in order if r % 2 else order[::-1]:
                            rounds.figures[client].append(
                                measure(
                                    client,
                                    sim.url,
                                    load,
                                    out,
                                    client_cpus,
                                    sampler,
                                    profile if client == "vllm-load" else None,
                                    round_no=r,
                                )
                            )
        finally:
            sampler.stop()
    print_table(results, server_cpus)
    checks = targets(results)
    print("\nTargets:")
    for text, ok in checks:
        print(f"  {'PASS' if ok else 'FAIL'}  {text}")
    return 1 if args.strict and not all(ok for _, ok in checks) else 0


if __name__ == "__main__":
    sys.exit(main())
