"""`vllm-load validate-client`: the per-level table, the verdict, the margin against a run."""

from __future__ import annotations

import json
import subprocess
import sys

from support.runhelpers import run_vllm_load

from vllm_load.cli.validate_client import EchoLevel, judge
from vllm_load.sim.child import SimulatorProcess

ARGS = ("--levels", "10,40", "--requests-per-level", "150", "--output-tokens", "32")


def level(users, rps=1000.0, chunks=100000.0, p50=5.0, success=1.0):
    return EchoLevel(users, users * 0.9, rps, rps * 100, chunks, p50, p50 * 2, p50 * 3, success)


def test_judge_by_hand():
    ok = judge([level(100), level(1000, rps=900)], max_p50_ms=50, min_margin=2)
    assert ok.proven and ok.capacity_req_per_s == 1000 and ok.reasons == []
    slow = judge([level(100, p50=210.0)], max_p50_ms=50, min_margin=2)
    assert not slow.proven and "p50 latency 210.0 ms" in slow.reasons[0]
    failing = judge([level(100, success=0.99)], max_p50_ms=50, min_margin=2)
    assert not failing.proven and "success 99.0%" in failing.reasons[0]
    tight = judge(
        [level(100)], max_p50_ms=50, min_margin=2, run_peak_req=600.0, run_peak_chunks=20000.0
    )
    assert tight.margin_req == 1000 / 600 and tight.margin_chunks == 5.0 and not tight.proven
    assert "only 1.7x the run's peak" in tight.reasons[0]


def test_validate_client_prints_the_table_and_compares_with_a_run(tmp_path):
    # 20 ms between tokens, as a GPU server streams: a client with a CPU dates every chunk apart
    # (a 1 ms ITL merges chunks in reads at the least delay, and the run is rightly client-late)
    with SimulatorProcess("--ttft", "0.05", "--itl", "0.02") as sim:
        run_vllm_load(
            "run",
            "--host",
            sim.url,
            "--levels",
            "4",
            "--input-tokens",
            "128",
            "--output-tokens",
            "16",
            "--requests-per-level",
            "20",
            "--warmup-requests",
            "2",
            "--out",
            str(tmp_path / "runs"),
        )
    (run_dir,) = (tmp_path / "runs").glob("*/*")
    done = run_vllm_load(
        "validate-client", *ARGS, "--run", str(run_dir), "--out", str(tmp_path / "v"), timeout=300
    )
    assert "Requests/sec" in done.stdout and "Success Rate" in done.stdout
    result = json.loads((run_dir / "client_validation.json").read_text())
    # the run's own health is the machine's to decide (a shared box can starve it of a CPU);
    # the capacity judgement is not
    assert result["proven"] == ("(proven)" in done.stdout) == (not result["run_health"]), (
        done.stdout
    )
    assert all(reason.startswith("the run's own health: ") for reason in result["reasons"]), result[
        "reasons"
    ]
    assert [lv["users"] for lv in result["levels"]] == [10, 40]
    assert result["margin_req"] > 2 and result["capacity_req_per_s"] > 100
    assert all(lv["success_rate"] == 1.0 for lv in result["levels"])


def test_a_slow_server_is_not_proof(tmp_path):
    with SimulatorProcess("--ttft", "0.2", "--itl", "0.001") as slow:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "vllm_load",
                "validate-client",
                "--host",
                slow.url,
                *ARGS,
                "--requests-per-level",
                "40",
                "--strict",
                "--out",
                str(tmp_path),
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "NOT proven" in proc.stdout and "p50 latency" in proc.stdout


def test_the_report_shows_a_validation_result(tmp_path):
    from support.reports import synthetic_runs

    from vllm_load.cli.validate_client import RESULT_FILE
    from vllm_load.report.render import build_report

    (run,) = synthetic_runs(tmp_path, 1)
    result = judge(
        [level(100), level(1000, rps=900)],
        max_p50_ms=50,
        min_margin=2,
        run_peak_req=40.0,
        run_peak_chunks=5000.0,
    )
    from dataclasses import asdict

    with open(f"{run}/{RESULT_FILE}", "w") as fh:
        json.dump(asdict(result), fh)
    paths = build_report([run], str(tmp_path / "r.html"), progress=False)
    html = open(paths.html).read()
    assert "Client overhead validation" in html and "The client is not the bottleneck" in html
    assert (
        "25x this run&#39;s peak request rate" in html or "25x this run's peak request rate" in html
    )
    assert json.loads(open(paths.json).read())["runs"][0]["client_validation"]["proven"] is True
