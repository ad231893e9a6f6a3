"""Hold ONE `vllm serve` for a series of checks, run them in its session, scrape its /metrics.

    python -m bench.realvllm.hold OUT_DIR [--serve-arg=--enable-prompt-tokens-details] [--hold 3600]

Starts the tiny model's server (`server.VllmServer`, from the cached venv and model), writes its
URL to OUT/url, scrapes `/metrics` every second into OUT/metrics.csv (wall time and the counters
the checks compare against, including `vllm:request_success_total`, which vllm-load's own
scraper does not keep), then runs every shell script dropped into OUT/queue/ (in name order,
one at a time, as children of this process: the same session as vLLM, as bench/README.md says
a load generator must be), moving each to OUT/done/ with its exit code. A file OUT/STOP, the
`--hold` limit or Ctrl-C stops the server by its process group.

Why a queue rather than one fixed script: vLLM takes 60-100 s to start on this CPU, so one server
serves every check (Locust CSVs, datasets, rates, SLOs), each decided after seeing the last.
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))

from bench.realvllm import StepError, env  # noqa: E402
from bench.realvllm.server import VllmServer, get_text  # noqa: E402
from vllm_load.run.server_metrics import parse_metrics  # noqa: E402

#: counters kept per scrape, beyond vllm-load's own COLUMNS
EXTRA = {
    "request_success_total": "vllm:request_success_total",
    "prompt_tokens_hist_sum": "vllm:request_prompt_tokens_sum",
    "prompt_tokens_hist_count": "vllm:request_prompt_tokens_count",
}


def scrape_row(url: str) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    text = get_text(url + "/metrics", timeout=5.0)
    row = parse_metrics(text)
    sums: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            sums[s.name] = sums.get(s.name, 0.0) + float(s.value)
    for col, name in EXTRA.items():
        row[col] = sums.get(name, float("nan"))
    return row


def scraper(url: str, path: str, stop: threading.Event) -> None:
    header = None
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        while not stop.is_set():
            t = time.time()
            try:
                row = scrape_row(url)
            except Exception as exc:  # a scrape may fail under load; note it and go on
                print(f"[hold] scrape failed: {exc}", flush=True)
                stop.wait(1.0)
                continue
            if header is None:
                header = ["ts", *row]
                w.writerow(header)
            w.writerow([f"{t:.3f}", *(f"{row[k]:.6g}" for k in header[1:])])
            fh.flush()
            stop.wait(max(0.0, 1.0 - (time.time() - t)))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--serve-arg", action="append", default=[])
    ap.add_argument("--hold", type=float, default=3600.0)
    a = ap.parse_args()
    out = os.path.abspath(a.out)
    for d in ("queue", "done"):
        os.makedirs(os.path.join(out, d), exist_ok=True)
    # the cached venv and model, built first on a machine that has none (as real_vllm.py does)
    venv = os.path.join(env.CACHE, "venv")
    model_dir = env.ensure_model(env.ensure_venv(venv), os.path.join(env.CACHE, "model"))
    server = VllmServer(
        venv,
        model_dir,
        os.path.join(out, "vllm.log"),
        extra_args=a.serve_arg,
    )
    stop = threading.Event()
    with server:
        with open(os.path.join(out, "url"), "w") as fh:
            fh.write(server.url + "\n")
        with open(os.path.join(out, "pid"), "w") as fh:
            fh.write(f"{server.proc.pid}\n")
        th = threading.Thread(
            target=scraper, args=(server.url, os.path.join(out, "metrics.csv"), stop), daemon=True
        )
        th.start()
        t0 = time.monotonic()
        try:
            while time.monotonic() - t0 < a.hold and not os.path.exists(os.path.join(out, "STOP")):
                jobs = sorted(
                    f for f in os.listdir(os.path.join(out, "queue")) if f.endswith(".sh")
                )
                if not jobs:
                    time.sleep(1.0)
                    continue
                job = jobs[0]
                src = os.path.join(out, "queue", job)
                dst = os.path.join(out, "done", job)
                os.rename(src, dst)
                print(f"[hold] {time.strftime('%H:%M:%S')} running {job}", flush=True)
                with open(dst + ".log", "w") as log:
                    rc = subprocess.call(
                        ["bash", dst],
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL,
                        env=dict(os.environ, VLLM_URL=server.url),
                    )
                with open(dst + ".rc", "w") as fh:
                    fh.write(f"{rc}\n")
                print(f"[hold] {time.strftime('%H:%M:%S')} {job} exited {rc}", flush=True)
        finally:
            stop.set()
            th.join(5.0)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except StepError as e:  # the venv or the model could not be built: one line, and its log
        sys.exit(f"hold: {e}")
