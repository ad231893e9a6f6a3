"""Running vllm-load as a child process in tests (Locust must never be imported into pytest:
gevent would monkey-patch the test process)."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

import pandas as pd

from vllm_load.records import read_requests


def run_vllm_load(*args: str, timeout: float = 240, env: dict | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, "-m", "vllm_load", *args],
        capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})},
    )
    if proc.returncode != 0:
        raise AssertionError(f"vllm-load {' '.join(args)} exited {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-4000:]}")
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
