"""`vllm-load compare` end to end: three short runs against a simulator batching 16 sequences
(A), three against one batching 64 (B); at 48 users B's higher throughput is significant.

The modelled token rate (--time-scale 0.5: ~6,500 output tok/s for B at 48 users) stays well
below what a Locust client on two CPUs can read, so the server, not the client, sets it
(docs/simulator.md, "Choosing --time-scale"). About 45 s.
"""

import json

import pytest
from support.runhelpers import run_vllm_load

from vllm_load.cli.main import main
from vllm_load.sim.child import SimulatorProcess

RUN_ARGS = (
    "--levels",
    "16,48",
    "--input-tokens",
    "64",
    "--output-tokens",
    "32",
    "--requests-per-level",
    "96",
    "--warmup-requests",
    "8",
)


def _three_runs(out: str, max_num_seqs: int) -> None:
    with SimulatorProcess("--time-scale", "0.5", "--max-num-seqs", str(max_num_seqs)) as sim:
        for _ in range(3):
            run_vllm_load("run", "--host", sim.url, *RUN_ARGS, "--out", out, timeout=60)


@pytest.mark.slow  # ~45 s: six runs; the statistics are unit-tested, the CLI on synthetic runs (test_compare.py)
def test_compare_finds_the_bigger_batch_faster_against_the_simulator(tmp_path, capsys):
    a, b = str(tmp_path / "seqs16"), str(tmp_path / "seqs64")
    _three_runs(a, 16)
    _three_runs(b, 64)
    out = str(tmp_path / "ab.html")
    assert main(["compare", a, b, "-o", out]) == 0
    data = json.load(open(str(tmp_path / "ab.json")))
    assert [lv["level"] for lv in data["levels"]] == [16, 48]
    at48 = {f["figure"]: f for f in data["levels"][1]["figures"]}
    tok = at48["total_tok_per_s"]
    assert tok["a"]["n"] == tok["b"]["n"] == 3
    assert tok["test"] == "Welch's t-test across runs" and tok["verdict"] == "B better", tok
    assert tok["rel_diff"] > 0.3 and tok["ci_low"] > 0
    capsys.readouterr()
    # the other way round, B is the worse one: the gate fails, on the throughput at 48 users
    assert main(["compare", b, a, "-o", str(tmp_path / "ba.html"), "--fail-if-worse", "5%"]) == 1
    worse = json.load(open(str(tmp_path / "ba.json")))["worse"]
    assert {"level": 48.0, "figure": "total_tok_per_s"} in [
        {"level": w["level"], "figure": w["figure"]} for w in worse
    ]
