"""On the simulator: `tune --matrix num_speculative_tokens=0,3` finds where speculation stops
paying (verification costs a millisecond a draft token, so K = 3 wins at 2 users and loses at
16), and `tune --advice` carries that verdict's K out and finds it paid off."""

from __future__ import annotations

import json
import sys

import pytest
from support.runhelpers import run_vllm_load

from vllm_load.sim.child import free_port

#: the verification share makes the crossover a small batch (docs/simulator.md's cost model:
#: K = 3, P = 0.6 stops paying above ~4 sequences); the scrapes fit inside each level
SIM = f"{sys.executable} -m vllm_load sim --time-scale 0.3 --verify-cost 0.001 --acceptance 0.6"
TEST = (
    "--levels", "2,16", "--input-tokens", "64", "--output-tokens", "128",
    "--requests-per-level", "32", "--warmup-requests", "2", "--metrics-interval", "0.2",
    "--ready-timeout", "30", "--loglevel", "WARNING",
)  # fmt: skip


@pytest.mark.slow
@pytest.mark.alone  # a significance test across runs: another test's load beside it spreads them
def test_tune_finds_where_k_stops_paying_and_the_advice_loop_proves_it(tmp_path, monkeypatch):
    monkeypatch.setenv("VLLM_LOAD_ADVICE_RECORD", str(tmp_path / "record.jsonl"))
    port = free_port()
    server = f"{SIM} --port {port}"
    where = ("--host", f"http://127.0.0.1:{port}", *TEST, "--out", str(tmp_path))
    tune = run_vllm_load(
        "tune", "--server-cmd", server, "--matrix", "num_speculative_tokens=0,3", *where,
        "--name", "k", timeout=400,
    )  # fmt: skip
    table = tune.stdout[tune.stdout.index("configuration  ") :]
    assert "accept len at peak" in table.splitlines()[0]
    row = next(line for line in table.splitlines() if line.startswith("num_speculative_tokens=3"))
    length = float(row.split()[3])
    assert 1.6 < length < 2.8, row  # 1 + 0.6 + 0.36 + 0.216 = 2.18 expected
    summary_path = tmp_path / "k" / "report.summary.json"
    summary = json.loads(summary_path.read_text())
    by_label = {s["label"]: s for s in summary["series"]}
    three = next(s for label, s in by_label.items() if label.endswith("=3)"))
    d = three["diagnosis"]
    assert d["kind"] == "speculation" and d["value"] == 16.0, d
    assert "stops paying at 16 users" in d["sentence"] and "acceptance length" in d["sentence"]
    assert [(a["flag"], a["from"], a["to"]) for a in d["advice"]] == [
        ("num_speculative_tokens", "3", "0")
    ]
    findings = " ".join(summary["comparison_findings"])
    assert "K = 3 at 2 users; no speculation at 16 users" in findings

    advice = run_vllm_load(
        "tune", "--advice", str(summary_path), "--series", three["label"], "--server-cmd",
        f"{server} --speculative-tokens 3", *where, "--runs", "2", timeout=400,
    )  # fmt: skip
    out = advice.stdout
    assert f"B (advised): {server} --speculative-tokens 0" in out
    peak = next(line for line in out.splitlines() if "peak total tok/s: A" in line)
    assert peak.endswith(": B better"), out
    verdict = json.loads((tmp_path / "advice" / "verdict.json").read_text())
    assert verdict["configurations"]["B"]["config"] == {"num_speculative_tokens": "0"}
