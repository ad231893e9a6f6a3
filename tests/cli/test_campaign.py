"""`vllm-load campaign`: n runs with the server restarted between them, resume, refinement."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from support.runhelpers import run_vllm_load

from vllm_load.cli.campaign import _compared_options, _nice_step, configure_parser, refine_levels
from vllm_load.sim.child import free_port

RUN_ARGS = (
    "--levels",
    "2,8",
    "--input-tokens",
    "128",
    "--output-tokens",
    "16",
    "--requests-per-level",
    "16",
    "--warmup-requests",
    "2",
    "--loglevel",
    "WARNING",
)


def test_the_slos_may_change_on_resume_as_they_change_nothing_in_a_run():
    parser = argparse.ArgumentParser()
    configure_parser(parser, "campaign")
    first = parser.parse_args(["--host", "http://127.0.0.1:9"])
    again = parser.parse_args(["--host", "http://127.0.0.1:9", "--slo", "ttft<=1s"])
    assert _compared_options(first) == _compared_options(again)


def test_resume_with_another_locustfile_is_a_different_campaign(tmp_path):
    mine = tmp_path / "mine.py"
    mine.write_text("from vllm_load.api import LLMUser\n", encoding="utf-8")
    parser = argparse.ArgumentParser()
    configure_parser(parser, "campaign")
    built_in = parser.parse_args(["--host", "http://127.0.0.1:9"])
    own = parser.parse_args(["--host", "http://127.0.0.1:9", "-f", str(mine)])
    assert "locustfile" not in _compared_options(built_in)  # as campaigns before -f recorded
    assert _compared_options(own)["locustfile"] == str(mine)
    assert _compared_options(own) != _compared_options(built_in)


def test_refine_levels_bracket_the_knee():
    coarse = [10, 50, 100, 200, 500, 750, 1000]
    assert refine_levels(coarse, 750) == list(range(500, 1001, 50))  # the methodology's fine sweep
    assert refine_levels(coarse, 100) == [*range(50, 200, 20), 200]
    assert refine_levels(coarse, None) == list(
        range(750, 1001, 25)
    )  # not saturated: the top two levels
    assert refine_levels([10, 50], 10) == [10, 15, 20, 25, 30, 35, 40, 45, 50]
    assert _nice_step(150, 10) == 20 and _nice_step(250, 10) == 25 and _nice_step(3, 10) == 1


@pytest.fixture
def restartable_sim(tmp_path):
    """A restart script for a simulator on a fixed port, as an operator would write one."""
    port = free_port()
    pidfile = tmp_path / "sim.pid"
    script = tmp_path / "restart-sim.sh"
    script.write_text(
        textwrap.dedent(f"""\
        #!/bin/sh
        if [ -f {pidfile} ]; then
          pid=$(cat {pidfile}); kill $pid 2>/dev/null
          while kill -0 $pid 2>/dev/null; do sleep 0.05; done
        fi
        echo restart >> {tmp_path}/restarts.log
        {sys.executable} -m vllm_load sim --port {port} --time-scale 0.02 --max-num-seqs 8 >> {tmp_path}/sim.log 2>&1 &
        echo $! > {pidfile}
        """)
    )
    script.chmod(0o755)
    subprocess.run([str(script)], check=True, timeout=30)
    try:
        yield f"http://127.0.0.1:{port}", str(script), tmp_path / "restarts.log"
    finally:
        if pidfile.exists():
            try:
                os.kill(int(pidfile.read_text()), signal.SIGTERM)
            except ProcessLookupError:
                pass


def _state(directory):
    with open(os.path.join(directory, "campaign.json")) as fh:
        return json.load(fh)


def test_campaign_restarts_between_runs_resumes_after_interrupt_and_reports_n2(
    tmp_path, restartable_sim
):
    host, restart, restarts_log = restartable_sim
    argv = [
        "campaign",
        "--host",
        host,
        "--runs",
        "2",  # the fewest that restart between runs, resume a missing one, and average n runs
        "--run-cooldown",
        "0.2",  # a rest between runs, still, but not a second of one
        "--restart-cmd",
        restart,
        "--ready-timeout",
        "30",
        "--out",
        str(tmp_path / "c"),
        "--name",
        "t",
        *RUN_ARGS,
    ]
    directory = tmp_path / "c" / "t"
    # first attempt: interrupted once the first run has completed
    proc = subprocess.Popen(
        [sys.executable, "-m", "vllm_load", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if (directory / "campaign.json").exists() and any(
                r["outcome"] == "completed" for r in _state(directory)["runs"]
            ):
                break
            time.sleep(0.2)
        os.kill(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, out
    first = [r for r in _state(directory)["runs"] if r["outcome"] == "completed"]
    assert len(first) == 1  # a run takes seconds; the interrupt came within 0.2 s of the first

    # second attempt: only the missing runs
    done = run_vllm_load(*argv, timeout=300)
    assert "already completed" in done.stdout
    state = _state(directory)
    completed = [r["run_dir"] for r in state["runs"] if r["outcome"] == "completed"]
    assert len(completed) == 2 and completed[: len(first)] == [r["run_dir"] for r in first]
    assert len(restarts_log.read_text().splitlines()) >= 1 + 1  # the fixture's start + between runs
    summary = json.loads((directory / "report.summary.json").read_text())
    (series,) = summary["series"]
    assert series["n_runs"] == 2
    assert all(level["total_tok_per_s_n"] == 2 for level in series["levels"])


def test_resume_with_other_options_is_refused(tmp_path, restartable_sim):
    host, _, _ = restartable_sim
    base = [
        "campaign",
        "--host",
        host,
        "--runs",
        "1",
        "--run-cooldown",
        "0",
        "--out",
        str(tmp_path / "c"),
        "--name",
        "x",
        "--no-report",
    ]
    run_vllm_load(*base, *RUN_ARGS, timeout=120)
    refused = subprocess.run(
        [sys.executable, "-m", "vllm_load", *base, *RUN_ARGS[:-2], "--output-tokens", "32"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2 and "different options (output_tokens)" in refused.stderr


@pytest.mark.slow  # ~30 s of runs; the refined levels' rule is unit-tested (test_refine_levels_bracket_the_knee)
def test_refine_runs_a_fine_sweep_around_the_knee(tmp_path):
    from vllm_load.sim.child import SimulatorProcess

    with SimulatorProcess("--time-scale", "0.02", "--max-num-seqs", "8") as sim:
        run_vllm_load(
            "campaign",
            "--host",
            sim.url,
            "--runs",
            "1",
            "--run-cooldown",
            "0",
            "--out",
            str(tmp_path),
            "--name",
            "r",
            "--levels",
            "2,8,32",
            "--input-tokens",
            "128",
            "--output-tokens",
            "16",
            "--requests-per-level",
            "24",
            "--warmup-requests",
            "4",
            "--refine",
            "--refine-runs",
            "1",
            "--refine-requests",
            "16",
            "--refine-output-tokens",
            "8",
            timeout=300,
        )
    state = _state(tmp_path / "r")
    assert state["refine_levels"][0] in (2, 8) and state["refine_levels"][-1] in (8, 32)
    refine = [r for r in state["runs"] if r["phase"] == "refine"]
    assert len(refine) == 1 and refine[0]["outcome"] == "completed"
    with open(os.path.join(refine[0]["run_dir"], "run.json")) as fh:
        run = json.load(fh)
    assert (
        run["settings"]["levels"] == state["refine_levels"]
        and run["settings"]["output_tokens"] == 8
    )
    assert run["meta"]["campaign_phase"] == "refine"


def test_a_trace_is_refused_in_one_line_before_any_run(tmp_path, capsys):
    from vllm_load.cli.main import main

    code = main(
        ["campaign", "--host", "http://127.0.0.1:9", "--trace", "sample:mooncake_60s"]
        + ["--out", str(tmp_path / "c")]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "a trace replays its own schedule" in err and "vllm-load run --trace" in err
    assert not (tmp_path / "c").exists()
