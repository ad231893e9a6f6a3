"""Stopping `vllm-load run` with signals at chosen moments, and checking how it ended: one
try is a run with tiny levels, `count` stop signals sent at one phase of it, and what the
command said and left behind (`Try`)."""

from __future__ import annotations

import glob
import os
import random
import re
import signal
import subprocess
import time
from dataclasses import dataclass

import psutil

from support.runhelpers import start_run, stop_group

#: a run of a second or two: one level of one user, 2 measured requests of short streams
TINY_RUN = (
    "--levels",
    "1",
    "--requests-per-level",
    "2",
    "--input-tokens",
    "32",
    "--output-tokens",
    "8",
)

#: when in a run the signals are sent: before Locust starts (vllm-load's own checks), while
#: Locust starts (no run directory yet), during the level, and while the run closes and reports
PHASES = ("before", "startup", "level", "end")
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

FINAL_LINE = re.compile(r"^vllm-load run: ")


@dataclass
class Try:
    """One run stopped by signals, and how it ended."""

    phase: str
    signum: int
    count: int
    workers: int
    to_group: bool
    code: int | None = None
    stderr: str = ""
    sent: int = 0  # signals sent before the run exited (0: it ended first, the try tells nothing)
    #: whether the command had started Locust (a child) when its first signal was sent
    locust_started: bool = False

    def describe(self) -> str:
        where = "group" if self.to_group else "parent"
        name = signal.Signals(self.signum).name
        sent = "" if self.sent == self.count else f" ({self.sent} sent)"
        return f"{name} x{self.count}{sent} at {self.phase}, {self.workers} workers, to the {where}"

    def problems(self, out: str) -> list[str]:
        """What is wrong with how it ended (empty: exit 130, no traceback, one final line, and
        the directory it names exists)."""
        found = []
        if self.code != 130:
            found.append(f"exit {self.code}")
        if "Traceback" in self.stderr:
            found.append("a traceback")
        finals = [line for line in self.stderr.splitlines() if FINAL_LINE.match(line)]
        lines = [line for line in self.stderr.splitlines() if line.strip()]
        if len(finals) != 1 or not lines or lines[-1] != finals[0]:
            found.append(f"final lines {finals!r} (last: {lines[-1:]!r})")
        for final in finals:
            for path in re.findall(r"(" + re.escape(out) + r"/\S*?)(?=[;,:]?(?:\s|$))", final):
                if not os.path.isdir(path):
                    found.append(f"names {path}, which does not exist")
            if "nothing was written" in final and run_dirs(out):
                found.append(f"says nothing was written, but left {run_dirs(out)}")
        return found


def run_dirs(out: str) -> list[str]:
    return glob.glob(os.path.join(out, "*", "*"))


def _level_ended(out: str) -> bool:
    for path in glob.glob(os.path.join(out, "*", "*", "steps.csv")):
        with open(path, encoding="utf-8") as fh:
            rows = fh.read().splitlines()[1:]
        if rows and rows[-1].split(",")[5]:
            return True
    return False


def _wait(proc: subprocess.Popen, until, timeout: float = 60.0) -> bool:
    """Wait until `until()` holds; False if the run exited first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        if until():
            return True
        time.sleep(0.02)
    raise AssertionError(f"{until} did not happen within {timeout} s")


def _children(proc: subprocess.Popen) -> list[psutil.Process]:
    try:
        return psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _has_child(proc: subprocess.Popen) -> bool:
    try:
        return bool(psutil.Process(proc.pid).children())
    except psutil.NoSuchProcess:
        return False


def catches(pid: int, signum: int) -> bool:
    """Whether process `pid` has a handler of its own for `signum` (/proc's SigCgt)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as fh:
            mask = next(line.split()[1] for line in fh if line.startswith("SigCgt:"))
    except (OSError, StopIteration):
        return False
    return bool(int(mask, 16) >> (signum - 1) & 1)


#: the latest moment of the "before" phase drawn, in seconds after the command takes the signals
BEFORE_S = 0.05


def _sleep_while(seconds: float, holds) -> None:
    """Sleep `seconds`, or less where `holds()` stops holding first."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and holds():
        time.sleep(0.005)


def wait_for_phase(proc: subprocess.Popen, phase: str, out: str, rng: random.Random) -> None:
    """Return at a random moment of `phase` of the run `proc` (or when it has exited)."""
    if phase == "before":
        # vllm-load's imports and its checks of the target, from when the command takes the
        # stop signals (Python's own start-up before that runs none of its code) until it starts
        # Locust: 0.6 s and more on some hosts, 75 ms on an AMD EPYC one, so the moment is drawn
        # within BEFORE_S and ends early where Locust starts first
        if _wait(proc, lambda: catches(proc.pid, signal.SIGTERM)):
            _sleep_while(rng.uniform(0.0, BEFORE_S), lambda: not _has_child(proc))
        return
    if phase == "startup":
        if _wait(proc, lambda: _has_child(proc)):
            time.sleep(rng.uniform(0.0, 0.6))  # Locust importing, then starting the test
        return
    if phase == "level":
        if _wait(proc, lambda: bool(glob.glob(os.path.join(out, "*", "*", "requests.csv")))):
            time.sleep(rng.uniform(0.0, 0.3))
        return
    if _wait(proc, lambda: _level_ended(out)):  # the drain, the close, the report
        time.sleep(rng.uniform(0.0, 0.4))


def stop_a_run(host: str, out: str, attempt: Try, rng: random.Random, timeout: float = 90) -> Try:
    """Start a tiny run, send `attempt`'s signals at its phase, and record how it ended."""
    proc = start_run(
        host,
        *TINY_RUN,
        "--workers",
        str(attempt.workers),
        "--out",
        out,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    locust: list[psutil.Process] = []
    try:
        wait_for_phase(proc, attempt.phase, out, rng)
        locust = _children(proc)
        attempt.locust_started = bool(locust)
        for i in range(attempt.count):
            if i:
                time.sleep(rng.uniform(0.0, 0.3))
            if proc.poll() is not None:
                break
            if attempt.to_group:
                os.killpg(proc.pid, attempt.signum)
            else:
                proc.send_signal(attempt.signum)
            attempt.sent += 1
        locust += _children(proc)
        _, attempt.stderr = proc.communicate(timeout=timeout)
        attempt.code = proc.returncode
    finally:
        stop_group(proc)
        for child in locust:  # (in a process group of their own: left only by a failure)
            try:
                child.kill()
            except psutil.NoSuchProcess:
                pass
    return attempt


def random_tries(seed: int, n: int, phases=PHASES, signals=SIGNALS, workers=(0, 2)) -> list[Try]:
    """`n` tries over every phase, signal and worker count in turn, with random signal counts
    (1 to 3) and targets (the command's process group, as a terminal sends, or the command)."""
    rng = random.Random(seed)
    return [
        Try(
            phases[i % len(phases)],
            signals[i % len(signals)],
            rng.choice((1, 1, 2, 3)),
            workers[(i // len(phases)) % len(workers)],
            rng.random() < 0.5,
        )
        for i in range(n)
    ]
