"""Where a run is written and what of its command line is kept: an existing run is never
appended to, a model id or a name never leaves its parent directory, and the API key is hidden
however its flag was spelled."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from support import ROOT
from support.runhelpers import every_file_text, only_run_dir, run_vllm_load

from vllm_load.cli.campaign import _campaign_name
from vllm_load.run.recorder import RunRecorder, new_run_dir, redacted_argv
from vllm_load.run_format.files import safe_name
from vllm_load.run_format.synthetic import SyntheticRun, write_synthetic_run
from vllm_load.sim.child import SimulatorProcess
from vllm_load.user_values import SettingsError

KEY = "sk-test-9e1d7c3b5a2f4860"


def test_run_dir_on_an_existing_run_is_refused_in_one_line(tmp_path):
    run = write_synthetic_run(str(tmp_path), SyntheticRun(levels=(2,), requests_per_level=10))
    before = open(f"{run}/requests.csv").read()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "vllm_load",
            "run",
            "--host",
            "http://127.0.0.1:9",
            "--run-dir",
            run,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line == (
        f"vllm-load run: error: --run-dir {run} already holds a run (run.json, requests.csv, "
        "steps.csv): a second run would append to it and mix the two; name a new directory, or "
        "leave --run-dir out (each run then gets its own under --out)"
    )
    assert open(f"{run}/requests.csv").read() == before
    # plain Locust (`locust -f ... --run-dir`) reaches the recorder: the same refusal, nothing written
    with pytest.raises(SettingsError, match="already holds a run"):
        RunRecorder(run, {"format": 1})
    assert open(f"{run}/requests.csv").read() == before
    empty = tmp_path / "made-for-it"
    empty.mkdir()
    RunRecorder(str(empty), {"format": 1}).close("completed")  # an empty directory is fine


@pytest.mark.parametrize("model", ["..", ".", "../../etc", "/", "", ".hidden", "a/../../b"])
def test_run_directories_stay_under_out_whatever_the_model_id(tmp_path, model):
    out = tmp_path / "runs"
    run_dir = new_run_dir(str(out), model)
    parts = os.path.relpath(run_dir, out).split(os.sep)
    assert len(parts) == 2 and not any(p in ("", ".", "..") or p.startswith(".") for p in parts)
    assert os.path.realpath(run_dir).startswith(str(out) + os.sep)


def test_safe_names():
    assert safe_name("Qwen/Qwen3-8B", "x") == "Qwen__Qwen3-8B"
    assert safe_name("..", "x") == "__" and safe_name("", "x") == "x"
    long_a, long_b = "m" * 300 + "a", "m" * 300 + "b"
    assert len(safe_name(long_a, "x")) == 120 and safe_name(long_a, "x") != safe_name(long_b, "x")
    for name in ("..", "../x", ""):
        args = type("Args", (), {"name": name, "model": ""})()
        assert _campaign_name(args) not in ("", ".", "..") and "/" not in _campaign_name(args)


def test_the_key_is_hidden_by_its_value_whatever_the_spelling():
    argv = ["locust", "--api-k", KEY, "--api=" + KEY, "--api-key=" + KEY, "--levels", "2"]
    assert redacted_argv(argv, KEY) == [
        "locust",
        "--api-k",
        "***",
        "--api=***",
        "--api-key=***",
        "--levels",
        "2",
    ]
    assert redacted_argv(argv[:2], "") == argv[:2]


@pytest.mark.parametrize("spelling", [("--api-k", KEY), ("--api=" + KEY,)], ids=["api-k", "api="])
def test_an_abbreviated_key_flag_is_not_written_to_run_json_or_the_report(tmp_path, spelling):
    """Locust's parser takes any unambiguous abbreviation of --api-key: `--api-k KEY` was written
    to run.json's command line, and from there to the report."""
    with SimulatorProcess("--api-key", KEY, "--time-scale", "0.02") as sim:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "locust",
                "-f",
                os.path.join(ROOT, "vllm_load", "locustfile.py"),
                "--headless",
                "--only-summary",
                "--host",
                sim.url,
                *spelling,
                *("--levels", "2", "--input-tokens", "64", "--output-tokens", "4"),
                *("--requests-per-level", "6", "--warmup-requests", "1"),
                *("--out", str(tmp_path / "runs")),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = only_run_dir(tmp_path / "runs")
    with open(os.path.join(run_dir, "run.json")) as fh:
        run = json.load(fh)
    assert run["outcome"] == "completed" and run["settings"]["api_key_set"] is True
    assert "***" in run["client"]["command"]  # the key was on the command line, and is hidden
    report = run_vllm_load("report", run_dir, "-o", str(tmp_path / "rep" / "r.html"), "--quiet")
    assert KEY not in every_file_text(tmp_path) + report.stdout + report.stderr
