"""`vllm-load tune` over a 2 x 2 matrix of simulator settings."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pandas as pd
import pytest
from support.runhelpers import client_flags, run_vllm_load, skip_where_flagged

from vllm_load.cli.tuning.matrix import combinations, format_table, parse_matrix, rank
from vllm_load.cli.tuning.runs import ConfigResult
from vllm_load.sim.child import free_port
from vllm_load.user_values import SettingsError


def test_matrix_parsing_and_ranking():
    matrix = parse_matrix(["max_num_seqs=4,16", "max_num_batched_tokens=2048,8192"])
    assert len(combinations(matrix)) == 4
    for bad in (["max_num_seqs"], ["=1,2"], ["a-b=1"], ["x=1", "x=2"]):
        with pytest.raises(SettingsError):
            parse_matrix(bad)
    a = ConfigResult({"s": "4"}, ["a"], "completed", peak_tok_per_s=100, mean_e2e_p99=1.0)
    b = ConfigResult({"s": "16"}, ["b"], "completed", peak_tok_per_s=300, mean_e2e_p99=2.0)
    c = ConfigResult({"s": "64"}, ["c"], "failed")
    assert rank([a, b, c]) == (b, a)


def test_ranking_by_goodput():
    a = ConfigResult({"s": "4"}, ["a"], "completed", peak_tok_per_s=300, goodput_peak=2.0)
    b = ConfigResult({"s": "16"}, ["b"], "completed", peak_tok_per_s=200, goodput_peak=3.0)
    c = ConfigResult({"s": "64"}, ["c"], "completed", peak_tok_per_s=400)  # measured without SLOs
    b.slo_value = 8.0
    assert rank([a, b, c])[0] is c
    assert rank([a, b, c], "goodput")[0] is b
    table = format_table([a, b, c], "goodput", slo=True)
    assert "peak goodput req/s" in table and "meets SLOs up to" in table
    line = next(row for row in table.splitlines() if row.startswith("s=16"))
    assert "3.00" in line and line.endswith("goodput")


def test_rank_by_goodput_needs_an_slo():
    done = subprocess.run(
        [sys.executable, "-m", "vllm_load", "tune", "--server-cmd", "sim {a}", "--matrix", "a=1"]
        + ["--host", "http://127.0.0.1:9", "--rank-by", "goodput"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "--rank-by goodput" in done.stderr and "--slo" in done.stderr


def test_tune_ranks_larger_max_num_seqs_first_on_throughput(tmp_path):
    port = free_port()
    server = (
        f"{sys.executable} -m vllm_load sim --port {port} --time-scale 0.1 "
        "--max-num-seqs {max_num_seqs} --max-num-batched-tokens {max_num_batched_tokens}"
    )
    # the same tuning both times: server, matrix, levels, where it goes
    tuning = (
        "--server-cmd",
        server,
        "--host",
        f"http://127.0.0.1:{port}",
        "--matrix",
        "max_num_seqs=4,16",
        "--matrix",
        "max_num_batched_tokens=8192",
        "--levels",
        "4,16,32",
        "--input-tokens",
        "128",
        "--output-tokens",
        "32",
        "--requests-per-level",
        "24",
        "--warmup-requests",
        "4",
        # a configuration's run lasts 2-3 s here: scrapes every second read its running gauge
        # 3 times, at 4 where the cap was 16 (a loaded host); five a second see the batch full
        "--metrics-interval",
        "0.2",
        "--out",
        str(tmp_path),
        "--name",
        "t",
    )
    done = run_vllm_load(
        "tune",
        *tuning,
        "--ready-timeout",
        "30",
        "--slo",
        "e2e_p99<=100s",  # met everywhere: goodput is measured, throughput still ranks
        timeout=400,
    )
    assert "configuration" in done.stdout and "best for" in done.stdout
    assert "peak goodput req/s" in done.stdout
    state = json.loads((tmp_path / "t" / "tune.json").read_text())
    results = state["results"]
    assert len(results) == 2 and all(r["outcome"] == "completed" for r in results)
    by_seqs, dirs = {}, {}
    for r in results:
        by_seqs.setdefault(r["config"]["max_num_seqs"], []).append(r["peak_tok_per_s"])
        dirs.setdefault(r["config"]["max_num_seqs"], []).extend(r["run_dirs"])
    # each configuration ran as set: the server's own count of the requests it ran at once
    running = {seqs: max(most_running(d) for d in found) for seqs, found in dirs.items()}
    assert running["4"] <= 4 < running["16"] <= 16, running
    # the simulator's model: 16 sequences per step serve ~4x the tokens of 4 at 32 users
    ratio = min(by_seqs["16"]) / max(by_seqs["4"])
    print(f"peak tok/s by max_num_seqs: {by_seqs} (x{ratio:.2f}); most running: {running}")
    # the ranking follows what was measured, on any machine; that 16 measured more is checked
    # below, excused only where the run flagged its client (a coverage run beside another suite,
    # load ~7: x0.91, and tune rightly ranked 4 first)
    measured_best = max(by_seqs, key=lambda seqs: sum(by_seqs[seqs]) / len(by_seqs[seqs]))
    assert state["best"]["throughput"]["max_num_seqs"] == measured_best
    for r in results:  # every request good: the goodput peak is at the highest level
        assert r["goodput_peak"] > 0 and r["slo_value"] == 32
    summary = json.loads((tmp_path / "t" / "report.summary.json").read_text())
    assert len(summary["series"]) == 2  # one series per configuration
    # a second invocation resumes: nothing runs again, nor is the report or the page redrawn
    again = run_vllm_load("tune", *tuning, "--slo", "e2e_p99<=100s", timeout=120)
    assert again.stdout.count("already completed") == 2
    assert "Report unchanged" in again.stdout and "Page unchanged" in again.stdout
    if ratio <= 1.5:  # a client the run found busy caps what it could measure of the 16
        flags = {d: f for d in dirs["16"] if (f := client_flags(d))}
        miss = f"peak tok/s x{ratio:.2f} ({by_seqs}), not > 1.5"
        skip_where_flagged(miss, flags, "max_num_seqs 16 over 2")
    assert measured_best == "16"


def most_running(run_dir: str) -> float:
    """The most requests the server said it ran at once (its /metrics, scraped by the run)."""
    return float(pd.read_csv(os.path.join(run_dir, "server_metrics.csv"))["running"].max())


def test_template_fields_must_match_the_matrix(tmp_path):
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "vllm_load",
            "tune",
            "--server-cmd",
            "sim --max-num-seqs {seqs}",
            "--host",
            "http://127.0.0.1:9",
            "--matrix",
            "max_num_seqs=1,2",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "no --matrix values: seqs" in bad.stderr


def test_tune_runs_each_configuration_n_times_as_one_series(tmp_path):
    # (the rounds' order, A B A B, is test_tune_advice's: the same machinery)
    port = free_port()
    done = run_vllm_load(
        "tune",
        "--server-cmd",
        f"{sys.executable} -m vllm_load sim --port {port} --time-scale 0.1 --max-num-seqs {{s}}",
        "--host",
        f"http://127.0.0.1:{port}",
        "--matrix",
        "s=2",
        "--runs",
        "2",
        "--levels",
        "1",
        "--input-tokens",
        "64",
        "--output-tokens",
        "16",
        "--requests-per-level",
        "4",
        "--warmup-requests",
        "1",
        "--ready-timeout",
        "30",
        "--out",
        str(tmp_path),
        "--name",
        "t",
        timeout=300,
    )
    started = [line for line in done.stdout.splitlines() if line.endswith("starting the server")]
    assert [line.split("] ")[1].split(": starting")[0] for line in started] == [
        "s=2: run 1/2",
        "s=2: run 2/2",
    ]
    state = json.loads((tmp_path / "t" / "tune.json").read_text())
    assert state["format"] == 2 and state["mode"] == "matrix" and len(state["runs"]) == 2
    assert [len(r["run_dirs"]) for r in state["results"]] == [2]
    summary = json.loads((tmp_path / "t" / "report.summary.json").read_text())
    assert [s["n_runs"] for s in summary["series"]] == [2]
    table = (tmp_path / "t" / "configurations.md").read_text()
    assert [line.split()[0] for line in table.splitlines() if line.startswith("s=")] == ["s=2"]
    assert "means of its 2 runs" in (tmp_path / "t" / "configurations.md").read_text()


def test_a_tune_directory_of_the_first_format_resumes(tmp_path, capsys):
    """tune.json from before --runs (one run per configuration, in its result) is read as
    completed runs: nothing is run again; an --advice loop is refused there, not mixed in."""
    from vllm_load.cli.main import main
    from vllm_load.run_format.synthetic import SyntheticRun, write_synthetic_run

    run_dir = write_synthetic_run(
        str(tmp_path / "t" / "runs"), SyntheticRun(levels=(4, 8), requests_per_level=20)
    )
    old = {"config": {"s": "2"}, "run_dir": run_dir, "outcome": "completed", "peak_tok_per_s": 1}
    (tmp_path / "t" / "tune.json").write_text(json.dumps({"format": 1, "results": [old]}))
    tuning = ["tune", "--host", "http://127.0.0.1:9", "--out", str(tmp_path), "--name", "t"]
    code = main([*tuning, "--server-cmd", "no-such-server {s}", "--matrix", "s=2"])
    out = capsys.readouterr().out
    assert code == 0 and "[1/1] s=2: run 1/1 already completed" in out
    assert "starting the server" not in out
    state = json.loads((tmp_path / "t" / "tune.json").read_text())
    assert state["runs"] == [{"config": {"s": "2"}, "run_dir": run_dir, "outcome": "completed"}]
    assert state["results"][0]["run_dirs"] == [run_dir] and state["best"]["throughput"]
    summary = {"series": [{"label": "m", "diagnosis": {"kind": "max_num_seqs", "advice": [
        {"flag": "--max-num-seqs", "from": "2", "to": "8"}]}}]}  # fmt: skip
    (tmp_path / "s.json").write_text(json.dumps(summary))
    advice = ["--advice", str(tmp_path / "s.json"), "--server-cmd", "sim --max-num-seqs 2"]
    assert main([*tuning, *advice]) == 2
    assert "holds a tuning of another kind (matrix, this is advice)" in capsys.readouterr().err
