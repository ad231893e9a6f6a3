"""Running vllm-load as a child process in tests (Locust must never be imported into pytest:
gevent would monkey-patch the test process)."""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest
import requests

from vllm_load.run_format.records import read_requests


def run_vllm_load(
    *args: str, timeout: float = 240, env: dict | None = None, expect: int | None = 0
) -> subprocess.CompletedProcess:
    """Run `vllm-load ARGS`; it must exit with `expect` (vllm_load.run.outcomes; None: the caller
    judges the exit status)."""
    proc = subprocess.run(
        [sys.executable, "-m", "vllm_load", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )
    if expect is not None and proc.returncode != expect:
        raise AssertionError(
            f"vllm-load {' '.join(args)} exited {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-4000:]}"
        )
    return proc


def only_run_dir(base) -> str:
    dirs = glob.glob(os.path.join(str(base), "*", "*"))
    assert len(dirs) == 1, dirs
    return dirs[0]


def load_run_files(run_dir: str):
    requests = read_requests(os.path.join(run_dir, "requests.csv"))
    steps = pd.read_csv(os.path.join(run_dir, "steps.csv"))
    with open(os.path.join(run_dir, "run.json")) as fh:
        run = json.load(fh)
    stats = pd.read_csv(os.path.join(run_dir, "locust_stats.csv"))
    return requests, steps, run, stats


def client_flags(run_dir: str) -> dict[int, str]:
    """{level: why} for the levels the run itself found its client busy (its client_health.csv):
    possibly client-bound (CPU, loop lag) or client-late by the run-queue wait, where a timing
    tolerance may not hold. Chunks merged in reads are left out: a fast stream merges them on
    a quiet machine too, and they say how a level's ITL is dated, not that its client was late."""
    from vllm_load.analysis.levels.client_side import (
        bound_levels,
        late_levels,
        level_client_health,
        read_client_health,
    )
    from vllm_load.analysis.levels.measure import level_metrics

    requests, steps, _, _ = load_run_files(run_dir)
    metrics = level_metrics(requests, steps)
    health = read_client_health(os.path.join(run_dir, "client_health.csv")).frame
    levels = level_client_health(health, metrics)  # without the records: no merged share
    flags = bound_levels(levels)
    for level, why in late_levels(levels).items():
        flags[level] = f"{flags[level]}; {why}" if level in flags else why
    return flags


def skip_where_flagged(misses: object, flags: dict, what: str) -> None:
    """A timing tolerance excused only where the run itself flagged its client (`client_flags`):
    nothing happens where `misses` (what did not hold, with its figures) is empty; a miss fails
    where the run flagged nothing, and is skipped naming the flags and the figures where it did."""
    if not misses:
        return
    assert flags, f"{what} not held with the client not flagged: {misses}"
    pytest.skip(f"{what} not held ({misses}) where the run flagged its client: {flags}")


def still_running(proc: subprocess.Popen, waiting_for: str) -> None:
    """Fail, with the end of what it printed where that was kept, if `proc` has exited."""
    if proc.poll() is not None:
        printed = proc.communicate()[0]
        kept = f":\n{printed[-3000:]}" if printed else " (its output was not kept)"
        raise AssertionError(f"the run exited {proc.returncode} before {waiting_for}{kept}")


def wait_for_rows(out: str, rows: int, proc: subprocess.Popen, timeout: float = 60.0) -> str:
    """The run directory once its requests.csv has `rows` records."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        still_running(proc, f"{rows} requests were recorded")
        for path in glob.glob(os.path.join(out, "*", "*", "requests.csv")):
            with open(path, encoding="utf-8") as fh:
                if sum(1 for _ in fh) > rows:
                    return os.path.dirname(path)
        time.sleep(0.2)
    raise AssertionError(f"no {rows} records within {timeout} s")


def wait_for_level(out: str, level: int, proc: subprocess.Popen, timeout: float = 60.0) -> str:
    """The run directory once its steps.csv says `level` has started."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        still_running(proc, f"level {level} started")
        for path in glob.glob(os.path.join(out, "*", "*", "steps.csv")):
            with open(path, encoding="utf-8") as fh:
                if sum(1 for _ in fh) > level + 1:  # the header, then a row per level started
                    return os.path.dirname(path)
        time.sleep(0.1)
    raise AssertionError(f"level {level} did not start within {timeout} s")


def terminate(proc: subprocess.Popen) -> None:
    """SIGTERM to a run's group (vllm-load forwards it: Locust closes the run and quits), then
    SIGKILL to the group if it lingers."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=15)
        except (ProcessLookupError, PermissionError, subprocess.TimeoutExpired):
            pass
    stop_group(proc)


def stop_group(proc: subprocess.Popen) -> None:
    """Kill whatever is left of a run started in its own session (its process group)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait(timeout=10)


def every_file_text(root) -> str:
    """The text of every file under `root`, joined (to look for what must not be written)."""
    texts = []
    for dirpath, _, files in os.walk(root):
        for name in files:
            with open(os.path.join(dirpath, name), "rb") as fh:
                texts.append(fh.read().decode("utf-8", "replace"))
    return "\n".join(texts)


def wait_for_ui(base: str, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    """Wait until the web UI at `base` answers (its login page), while `proc` is still running."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        still_running(proc, "its web UI answered")
        try:
            requests.get(base + "/login", timeout=2)
            return
        except requests.ConnectionError:
            time.sleep(0.1)
    raise AssertionError(f"the web UI did not answer within {timeout} s")


#: two short levels of short streams (4 then 8 users, 64 -> 20 tokens), 2 warm-up requests each
TWO_SHORT_LEVELS = (
    "--levels",
    "4,8",
    "--input-tokens",
    "64",
    "--output-tokens",
    "20",
    "--warmup-requests",
    "2",
)


def start_run(host: str, *args: str, env: dict | None = None, **popen) -> subprocess.Popen:
    """`vllm-load run --host HOST ARGS...` in a session of its own (end it with `stop_group`),
    with the stop signals at their defaults (`as_from_a_terminal`, then `popen`'s preexec_fn);
    `env` is added to ours, `popen` goes to Popen (where its output goes, and so on)."""
    then = popen.pop("preexec_fn", None)

    def setup() -> None:
        as_from_a_terminal()
        if then is not None:
            then()

    return subprocess.Popen(
        [sys.executable, "-m", "vllm_load", "run", "--host", host, *args],
        stdin=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
        start_new_session=True,
        preexec_fn=setup,
        **popen,
    )


def as_from_a_terminal() -> None:
    """(In a child, before exec.) SIGINT, SIGTERM and SIGHUP at their defaults, as a shell on a
    terminal starts a command. The test runner may have been started with some ignored (under
    `nohup`, SIGHUP), and an ignored signal stays ignored through exec, where vllm-load leaves
    it ignored as asked: a hangup test then waited for a run of minutes (CI, 30 s timeout)."""
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)


def start_web_run(host: str, port: int, *args: str, **kwargs) -> subprocess.Popen:
    """`start_run` with the web UI on `port`."""
    return start_run(host, "--web", "--web-port", str(port), *args, **kwargs)


def bench_results(module: str, out, *args: str, timeout: float = 1700) -> dict:
    """Run `python -m bench.realvllm.MODULE OUT ARGS` from the repository root and return its
    OUT/results.json, with `exit` (its exit status) and `output` (the end of what it printed)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    cmd = [sys.executable, "-m", f"bench.realvllm.{module}", str(out), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=root)
    output = proc.stdout[-3000:] + proc.stderr[-3000:]
    path = os.path.join(out, "results.json")
    assert os.path.exists(path), output
    with open(path, encoding="utf-8") as fh:
        found = json.load(fh)
    found["exit"], found["output"] = proc.returncode, output
    return found
