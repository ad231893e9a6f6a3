"""Issue 39's acceptance for --prometheus: a real Prometheus (Debian's `prometheus` package, run
here as a plain process: its own config and data directory, 127.0.0.1 only, a 1 s scrape
interval) scrapes the master through a test, and its `histogram_quantile` of TTFT, ITL and E2E
agrees with the p99 the report computes from requests.csv over the same requests, within the
histograms' resolution (`prometheus_tallies.BUCKET_GROWTH`, 12.2 %); promtool lints what was
served, and every query of the Grafana dashboard runs.

Not in the default suite, which needs no Prometheus: `pytest -m prometheus` (about 40 s). Run so,
it fails, never skips, where the binary is missing: `apt-get install -y prometheus` (the package
starts no service where there is no systemd; this test starts its own)."""

from __future__ import annotations

import math
import re
import shutil
import subprocess
import time

import numpy as np
import pytest
import requests
from support.prometheus_scrape import dashboard, phase, queries, scrape, wait_until_refused
from support.runhelpers import load_run_files, only_run_dir, start_web_run, terminate, wait_for_ui

from vllm_load.run.prometheus_tallies import BUCKET_GROWTH, LATENCY_BOUNDS
from vllm_load.run_format.histogram import LogHistogram
from vllm_load.sim.child import SimulatorProcess, free_port

pytestmark = [pytest.mark.prometheus, pytest.mark.timeout(300)]

SCRAPE_INTERVAL = 1.0
#: a wide TTFT spread: 16 users on a server that runs 4 sequences at a time queue for turns
LEVELS = ("--levels", "2,16", "--input-tokens", "256", "--output-tokens", "32")
COUNTS = ("--warmup-requests", "4", "--requests-per-level", "80")


def start_prometheus(tmp_path, target_port: int) -> tuple[subprocess.Popen, str]:
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("the prometheus binary is not installed: apt-get install -y prometheus")
    config = tmp_path / "prometheus.yml"
    config.write_text(
        f"global:\n  scrape_interval: {SCRAPE_INTERVAL:g}s\n  scrape_timeout: {SCRAPE_INTERVAL:g}s\n"
        f"scrape_configs:\n  - job_name: vllm-load\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{target_port}']\n"
    )
    port = free_port()
    proc = subprocess.Popen(
        [
            binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn",
        ],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    api = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        try:
            if requests.get(api + "/-/ready", timeout=2).status_code == 200:
                return proc, api
        except requests.ConnectionError:
            pass
        assert time.monotonic() < deadline, "prometheus did not become ready within 30 s"
        time.sleep(0.2)


def results(api: str, promql: str, at: float) -> list:
    answer = requests.get(api + "/api/v1/query", params={"query": promql, "time": at}, timeout=10)
    body = answer.json()
    assert body["status"] == "success", (promql, body)
    return body["data"]["result"]


def query(api: str, promql: str, at: float) -> float:
    (result,) = results(api, promql, at)
    return float(result["value"][1])


def grafana_to_promql(expr: str) -> str:
    """A dashboard query as Grafana sends it with every variable at All, over 5 s windows."""
    expr = expr.replace("$__rate_interval", "5s")
    return re.sub(r"\$(job|target|user_class)\b", ".*", expr)


def bucket_index(seconds: float) -> int:
    return int(np.searchsorted(LATENCY_BOUNDS, seconds, side="left"))


def test_prometheus_histogram_quantile_agrees_with_the_reports_p99(tmp_path):
    exporter, web = free_port(), free_port()
    url = f"http://127.0.0.1:{exporter}/metrics"
    prometheus, api = start_prometheus(tmp_path, exporter)
    out = str(tmp_path / "runs")
    try:
        with SimulatorProcess("--time-scale", "0.5", "--max-num-seqs", "4") as sim:
            proc = start_web_run(
                sim.url, web, *LEVELS, *COUNTS, "--prometheus", str(exporter), "--out", out,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            )  # fmt: skip
            try:
                wait_for_ui(f"http://127.0.0.1:{web}", proc)
                swarm = requests.post(
                    f"http://127.0.0.1:{web}/swarm", data={"host": sim.url}, timeout=10
                )
                assert swarm.json()["success"] is True
                deadline = time.monotonic() + 180
                while (samples := scrape(url)) is None or phase(samples) != "stopped":
                    assert proc.poll() is None and time.monotonic() < deadline
                    time.sleep(0.2)
                # the test is over; its run is closed 5 s later: two scrapes of the last counts
                time.sleep(0.5 + 2.5 * SCRAPE_INTERVAL)
                served = requests.get(url, timeout=5).text
                at = time.time()
                wait_until_refused(url, timeout=20)
            finally:
                terminate(proc)
        # Prometheus' own linter finds nothing to say of what was served
        lint = subprocess.run(
            [shutil.which("promtool") or "promtool", "check", "metrics"],
            input=served, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert lint.returncode == 0 and not lint.stdout + lint.stderr, lint
        rows, steps, _, _ = load_run_files(only_run_dir(out))
        ok = rows[rows["ok"] == 1]
        assert len(ok) == len(rows) >= 160
        # the last scrape, where the whole-run `increase` ends: Prometheus extrapolates a range
        # that ends later to its end, by each series' own slope, which bends the quantile
        at = query(api, "timestamp(vllm_load_users)", at)
        # Prometheus holds every request: its last scrape came after the last row
        assert query(api, "sum(vllm_load_ttft_seconds_count)", at) == len(ok)
        itl = LogHistogram()
        for text in ok["itl_hist"]:
            itl.add_text(str(text))
        exact = {  # the report's rule: numpy's interpolated percentile; ITL from the histograms
            "ttft": float(np.percentile(ok["ttft"], 99)),
            "e2e": float(np.percentile(ok["e2e"], 99)),
            "itl": itl.percentile(99),
        }
        figures = [f"{len(ok)} requests, every one successful"]
        for name, report_p99 in exact.items():
            bucket = f"vllm_load_{name}_seconds_bucket"
            for promql in (
                f"histogram_quantile(0.99, sum by (le) ({bucket}))",
                f"histogram_quantile(0.99, sum by (le) (increase({bucket}[10m])))",
            ):
                from_prometheus = query(api, promql, at)
                ratio = from_prometheus / report_p99
                figures.append(
                    f"{name} p99: report {report_p99 * 1000:.3f} ms, Prometheus "
                    f"{from_prometheus * 1000:.3f} ms ({(ratio - 1) * 100:+.2f} %) from {promql}"
                )
                assert 1 / BUCKET_GROWTH < ratio < BUCKET_GROWTH, figures[-1]
                assert abs(bucket_index(from_prometheus) - bucket_index(report_p99)) <= 1
        print("\n".join(figures))
        # every query of the Grafana dashboard runs on this Prometheus; all but the failures'
        # have data (this run had none), over the last 5 s of the test
        for expr in queries(dashboard()):
            if expr.startswith("label_values("):
                continue  # Grafana's own function, for its variables
            found = results(api, grafana_to_promql(expr), at - 2 * SCRAPE_INTERVAL)
            assert found or 'outcome!="ok"' in expr, expr
        assert math.isfinite(exact["ttft"]) and exact["ttft"] > 5 * LATENCY_BOUNDS[0]
    finally:
        prometheus.terminate()
        try:
            prometheus.wait(timeout=20)
        except subprocess.TimeoutExpired:
            prometheus.kill()
            prometheus.wait(timeout=10)
