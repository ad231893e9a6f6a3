"""The traffic: vllm-load's stepped test (through `vllm-load run` or `locust -f`) and
`vllm bench serve`, each bounded in time, each talking to the local server only.

vLLM's CPU engine busy-polls a core and the machine may have only two, so vllm-load runs as a
single load process (no `--workers`) and nothing else runs beside a measurement.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

from . import StepError
from .server import get_text

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LOCUSTFILE = os.path.join(REPO, "locustfiles", "chat_stepped.py")


@dataclass
class Load:
    """What every level sends: concurrency levels, exact token lengths, requests per level."""

    levels: list[int]
    input_tokens: int
    output_tokens: int
    requests_per_level: int
    warmup_requests: int
    level_time_cap: float


def _run_bounded(
    cmd: list[str],
    log: str,
    timeout: float,
    what: str,
    cwd: str | None = None,
    progress=None,
    every: float = 30.0,
) -> int:
    """Run `cmd` in its own process group with output to `log`, calling `progress()` every
    `every` seconds; on timeout (or Ctrl-C) the group gets SIGINT, then SIGKILL. Returns the exit code."""
    t0 = time.monotonic()
    with open(log, "w", encoding="utf-8") as fh:
        fh.write("$ " + " ".join(cmd) + "\n")
        fh.flush()
        proc = subprocess.Popen(
            cmd,
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=cwd,
            process_group=0,
        )
        try:
            while True:
                left = timeout - (time.monotonic() - t0)
                if left <= 0:
                    _stop_group(proc)
                    raise StepError(f"{what} did not finish within {timeout:.0f} s; see {log}")
                try:
                    return proc.wait(timeout=min(left, every))
                except subprocess.TimeoutExpired:
                    if progress is not None:
                        print(f"  {time.monotonic() - t0:.0f} s: {progress()}", flush=True)
        finally:
            if proc.poll() is None:
                _stop_group(proc)


def _run_progress(run_dir: str) -> str:
    """The current level and how many requests the run has recorded (from its files)."""
    try:
        with open(os.path.join(run_dir, "steps.csv"), encoding="utf-8") as fh:
            last = fh.read().strip().splitlines()[-1].split(",")
        with open(os.path.join(run_dir, "requests.csv"), encoding="utf-8") as fh:
            rows = sum(1 for _ in fh) - 1
        return f"level {last[0]} ({last[1]} users), {rows} requests recorded"
    except (OSError, IndexError):
        return "starting (calibrating prompts)"


def _stop_group(proc: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGINT, 20.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
            proc.wait(timeout=wait)
            return
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue


def stepped_test(
    via: str, url: str, load: Load, run_dir: str, log: str, extra: tuple[str, ...] = ()
) -> str:
    """vllm-load's stepped test into `run_dir`, `via` "run" (`vllm-load run`) or "locust"
    (`locust -f locustfiles/chat_stepped.py --headless`), with `extra` options. Returns
    `run_dir`."""
    options = [
        "--levels",
        ",".join(map(str, load.levels)),
        "--input-tokens",
        str(load.input_tokens),
        "--output-tokens",
        str(load.output_tokens),
        "--requests-per-level",
        str(load.requests_per_level),
        "--warmup-requests",
        str(load.warmup_requests),
        "--level-time-cap",
        f"{load.level_time_cap:g}",
        "--run-dir",
        run_dir,
        *extra,
    ]
    if via == "run":
        cmd = [
            sys.executable,
            "-m",
            "vllm_load",
            "run",
            "--host",
            url,
            "--loglevel",
            "WARNING",
            *options,
        ]
    else:
        cmd = [
            sys.executable,
            "-m",
            "locust",
            "-f",
            LOCUSTFILE,
            "--headless",
            "--host",
            url,
            "--loglevel",
            "WARNING",
            *options,
        ]
    timeout = len(load.levels) * load.level_time_cap + 300
    label = "vllm-load run" if via == "run" else "locust -f locustfiles/chat_stepped.py"
    print(
        f"[real-vllm] {label}: levels {','.join(map(str, load.levels))}, {load.input_tokens}/{load.output_tokens} "
        f"tokens, {load.requests_per_level} requests per level (log: {log})",
        flush=True,
    )
    t0 = time.monotonic()
    code = _run_bounded(cmd, log, timeout, label, cwd=REPO, progress=lambda: _run_progress(run_dir))
    if not os.path.exists(os.path.join(run_dir, "requests.csv")):
        raise StepError(f"{label} exited {code} without writing {run_dir}/requests.csv; see {log}")
    print(
        f"[real-vllm] {label} done in {time.monotonic() - t0:.0f} s (exit {code}): {run_dir}",
        flush=True,
    )
    return run_dir


def server_counters(url: str) -> dict[str, float]:
    """The /metrics counters vllm-load scrapes, read once (for before/after deltas)."""
    from vllm_load.run.server_metrics import parse_metrics

    return parse_metrics(get_text(url + "/metrics"))


def vllm_bench(
    venv: str, url: str, model: str, model_dir: str, load: Load, level: int, seed: int, out_dir: str
) -> dict:
    """`vllm bench serve` at `--max-concurrency level` with the same token lengths and request
    count, a seed of its own (the default seed re-sends the prompts of the previous level, and the
    prefix cache then flatters it); the /metrics counters are read before and after."""
    name = f"vllm-bench-c{level}"
    cmd = [
        os.path.join(venv, "bin", "vllm"),
        "bench",
        "serve",
        "--backend",
        "openai-chat",
        "--base-url",
        url,
        "--endpoint",
        "/v1/chat/completions",
        "--model",
        model,
        "--tokenizer",
        model_dir,
        "--dataset-name",
        "random",
        "--random-input-len",
        str(load.input_tokens),
        "--random-output-len",
        str(load.output_tokens),
        "--ignore-eos",
        "--max-concurrency",
        str(level),
        "--num-prompts",
        str(load.requests_per_level),
        "--seed",
        str(seed),
        "--save-result",
        "--result-dir",
        out_dir,
        "--result-filename",
        name + ".json",
        "--disable-tqdm",
    ]
    print(
        f"[real-vllm] vllm bench serve --max-concurrency {level} --num-prompts {load.requests_per_level} "
        f"--seed {seed}",
        flush=True,
    )
    before = server_counters(url)
    code = _run_bounded(
        cmd,
        os.path.join(out_dir, name + ".log"),
        load.level_time_cap + 300,
        "vllm bench serve",
        cwd=out_dir,
        progress=lambda: "vllm bench serve still running",
    )
    after = server_counters(url)
    path = os.path.join(out_dir, name + ".json")
    if code != 0 or not os.path.exists(path):
        raise StepError(
            f"vllm bench serve at concurrency {level} failed (exit {code}); see {out_dir}/{name}.log"
        )
    with open(path, encoding="utf-8") as fh:
        result = json.load(fh)
    delta = {
        k: after[k] - before[k]
        for k in ("prefix_cache_hits", "prefix_cache_queries", "generation_tokens_total")
    }
    return {
        "level": level,
        "seed": seed,
        "completed": result.get("completed"),
        "failed": result.get("failed"),
        "output_tok_per_s": result.get("output_throughput"),
        "mean_ttft_ms": result.get("mean_ttft_ms"),
        "total_input_tokens": result.get("total_input_tokens"),
        "total_output_tokens": result.get("total_output_tokens"),
        "duration_s": result.get("duration"),
        "prefix_cache_hits": delta["prefix_cache_hits"],
        "prefix_cache_queries": delta["prefix_cache_queries"],
        "server_generation_tokens": delta["generation_tokens_total"],
        "result_file": path,
    }
