"""A run against `vllm-load sim --disagg` with --role-metrics: the proxy has no /metrics, its
prefill and decode servers are scraped into their own files, and each level gets the KV
transfer and TTFT split the decode server's NIXL metrics give (tiny levels)."""

from __future__ import annotations

import json
import os

from support.runhelpers import only_run_dir, run_vllm_load

from vllm_load.analysis.measured_run import measure_run
from vllm_load.sim.child import SimulatorProcess, free_port


def test_a_run_scrapes_each_role_and_measures_the_transfer(tmp_path):
    prefill, decode = free_port(), free_port()
    argv = ("--disagg", "--prefill-port", str(prefill), "--decode-port", str(decode),
            "--time-scale", "0.2", "--kv-transfer-cost", "0.002")  # fmt: skip
    with SimulatorProcess(*argv) as sim:
        roles = f"prefill=http://127.0.0.1:{prefill},decode=http://127.0.0.1:{decode}"
        run_vllm_load(
            "run", "--host", sim.url, "--role-metrics", roles, "--levels", "1,2",
            "--requests-per-level", "8", "--warmup-requests", "1", "--input-tokens", "512",
            "--output-tokens", "32", "--metrics-interval", "0.1", "--store", "none",
            "--out", str(tmp_path), "--loglevel", "WARNING",
        )  # fmt: skip
    run_dir = only_run_dir(tmp_path)
    with open(os.path.join(run_dir, "run.json"), encoding="utf-8") as fh:
        run = json.load(fh)
    assert run["roles"]["decode"]["scrape"]["samples"] > 0
    assert "404" in run["server_metrics"]["note"]  # the proxy, like vLLM's, has no /metrics
    metrics = measure_run(run_dir).metrics
    # ~32 blocks of a ~512-token prompt, 2 ms each at --time-scale 0.2: ~13 ms, one at a time
    assert (metrics["kv_transfers"] > 0).all(), metrics["pd_unknown"].tolist()
    assert metrics["kv_xfer_ms"].between(10.0, 200.0).all()
    assert (metrics["kv_xfer_mib"] > 60).all()  # ~32 blocks of 2 MiB
    assert metrics["pd_prefill_ms"].notna().all() and metrics["pd_first_decode_ms"].notna().all()
