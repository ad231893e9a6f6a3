"""Secrets stay secret, server strings are escaped, bad input is refused before any load."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request

import pytest
from support.runhelpers import every_file_text, only_run_dir, run_vllm_load
from support.shared_runs import shared_run

from vllm_load.run.server_metrics import parse_metrics
from vllm_load.sim.child import SimulatorProcess

KEY = "sk-test-4f9c2e7d1b8a6053"
#: one short level: where a key or a name goes does not depend on the users
SMALL = (
    "--levels",
    "2",
    "--input-tokens",
    "128",
    "--output-tokens",
    "8",
    "--requests-per-level",
    "10",
    "--warmup-requests",
    "2",
)


#: the model name the simulator serves: markup, which every file and the report must show as text
SCRIPT_MODEL = "<script>alert('x')</script>"


def key_run(folder, how: str) -> None:
    """A run against a simulator that answers 401 to any request without KEY (given by `how`)
    and names its model SCRIPT_MODEL, in folder/runs, its report in folder/rep/r.html, and what
    both commands printed in folder/output.txt."""
    args, env = (("--api-key", KEY), {}) if how == "flag" else ((), {"OPENAI_API_KEY": KEY})
    sim_args = ("--api-key", KEY, "--served-model-name", SCRIPT_MODEL, "--time-scale", "0.02")
    with SimulatorProcess(*sim_args) as sim:
        done = run_vllm_load(
            "run",
            "--host",
            sim.url,
            *SMALL,
            "--workers",
            "2",
            "--out",
            str(folder / "runs"),
            *args,
            env=env,
        )
    run_dir = only_run_dir(folder / "runs")
    report = run_vllm_load("report", run_dir, "-o", str(folder / "rep" / "r.html"), "--quiet")
    printed = done.stdout + done.stderr + report.stdout + report.stderr
    (folder / "output.txt").write_text(printed, encoding="utf-8")


def shared_key_run(how: str):
    """`key_run`'s folder, made once for the session (the key test and the escaping test read
    the same run: a server string and a key travel the same files)."""
    return shared_run(f"security-key-{how}", lambda folder: key_run(folder, how))


@pytest.mark.parametrize("how", ["flag", "environment"])
def test_api_key_is_sent_only_as_the_authorization_header(how):
    folder = shared_key_run(how)
    # the simulator answers 401 to any request without the right Bearer token: a completed
    # run with every request successful proves the key was sent
    run_dir = only_run_dir(folder / "runs")
    with open(os.path.join(run_dir, "run.json")) as fh:
        run = json.load(fh)
    assert run["outcome"] == "completed" and run["settings"]["api_key_set"] is True
    assert KEY not in every_file_text(folder)  # the run, its report, and what was printed
    assert (folder / "rep" / "r.html").exists() and "requests.csv" in os.listdir(run_dir)


def test_server_strings_are_escaped_in_the_report():
    folder = shared_key_run("flag")
    run_dir = only_run_dir(folder / "runs")
    assert "<" not in os.path.basename(os.path.dirname(run_dir))  # a safe directory name
    html = (folder / "rep" / "r.html").read_text()
    assert "<script" not in html and "&lt;script&gt;alert(" in html


def test_the_simulator_binds_loopback_by_default():
    with SimulatorProcess("--echo") as sim:
        assert sim.url.startswith("http://127.0.0.1:")
    from vllm_load.cli.main import build_parser  # noqa: PLC0415

    assert build_parser().parse_args(["sim"]).host == "127.0.0.1"


@pytest.fixture(scope="module")
def small_model_sim():
    with SimulatorProcess("--max-model-len", "4096", "--time-scale", "0.02") as sim:
        yield sim


@pytest.mark.parametrize(
    "args, message",
    [
        (("--levels", "10,0"), "levels"),
        (("--levels", "ten"), "levels"),
        (("--input-tokens", "0"), "--input-tokens"),
        (("--output-tokens", "-5"), "--output-tokens"),
        (("--input-tokens", "4000", "--output-tokens", "200"), "max_model_len 4096"),
        (("--requests-per-level", "0"), "--requests-per-level"),
        # found by calibrating the prompts on the target, before Locust starts
        (("--input-tokens", "16"), "--input-tokens 16 is too short: the chat template"),
    ],
)
def test_bad_input_is_one_line_and_sends_no_load(tmp_path, args, message, small_model_sim):
    sim = small_model_sim  # (shared: its counters must still read 0 after every case)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "vllm_load",
            "run",
            "--host",
            sim.url,
            *args,
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    with urllib.request.urlopen(sim.url + "/metrics") as resp:
        served = parse_metrics(resp.read().decode())
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and message in lines[0], proc.stderr
    assert served["prompt_tokens_total"] == 0 and served["generation_tokens_total"] == 0
    assert not os.listdir(tmp_path)
