"""Two runs started at once on one new --run-dir: the second is refused before it changes
anything there (`run_format.claim`), and never closes the first's live run."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from support.runhelpers import start_run, stop_group
from support.stop_signals import TINY_RUN

from vllm_load.cli import run as cli_run
from vllm_load.cli.run import prepare, run_options
from vllm_load.run.recorder import RunRecorder
from vllm_load.run_format.claim import CLAIM_ENV, CLAIMED, claim
from vllm_load.sim.child import SimulatorProcess
from vllm_load.user_values import SettingsError


def snapshot(path) -> dict[str, bytes]:
    return {name: (path / name).read_bytes() for name in sorted(os.listdir(path))}


def test_the_second_of_two_runs_prepared_at_once_is_refused_before_it_touches_the_directory(
    tmp_path, monkeypatch
):
    """The second is refused whether it checks for a run after the first has claimed the
    directory, or checked before (both found nothing: the race the claim closes, made
    deterministic here by passing the second's early check)."""
    run_dir = tmp_path / "run"
    with SimulatorProcess() as sim:
        first = prepare(run_options(sim.url, run_dir=str(run_dir)))
        assert first.claim is not None and first.env[CLAIM_ENV] == first.claim.token
        before = snapshot(run_dir)
        assert json.loads(before["run.json"])["outcome"] == CLAIMED
        with pytest.raises(SettingsError, match="already holds a run"):
            prepare(run_options(sim.url, run_dir=str(run_dir)))
        monkeypatch.setattr(cli_run, "refuse_existing_run", lambda run_dir: None)
        with pytest.raises(SettingsError, match="another run started at the same time"):
            prepare(run_options(sim.url, run_dir=str(run_dir)))
    assert snapshot(run_dir) == before  # the first run's claim, as it was
    first.claim.give_back()  # its Locust never started: nothing is left
    assert not run_dir.exists()


def test_a_claim_is_taken_over_by_its_own_writer_and_refuses_any_other(tmp_path, monkeypatch):
    run_dir = str(tmp_path / "run")
    claimed = claim(run_dir)
    monkeypatch.delenv(CLAIM_ENV, raising=False)
    with pytest.raises(SettingsError, match="already holds a run"):
        RunRecorder(run_dir, {"format": 1})  # a writer started on its own (`locust -f`)
    monkeypatch.setenv(CLAIM_ENV, "another-token")
    with pytest.raises(SettingsError, match="already holds a run"):
        RunRecorder(run_dir, {"format": 1})
    monkeypatch.setenv(CLAIM_ENV, claimed.token)
    recorder = RunRecorder(run_dir, {"format": 1})  # the Locust the claiming command started
    assert not claimed.held()
    claimed.give_back()  # taken over: not the claim's to remove any more
    recorder.close("completed")
    with open(os.path.join(run_dir, "run.json"), encoding="utf-8") as fh:
        assert json.load(fh)["outcome"] == "completed"


@pytest.mark.slow
def test_two_runs_started_at_once_on_one_run_dir(tmp_path):
    """The race itself: one run completes, the other is refused in one line, exit 2, and the
    winner's run.json is never closed by the loser."""
    run_dir = str(tmp_path / "run")
    with SimulatorProcess("--ttft", "0.02", "--itl", "0.01") as sim:
        procs = [
            start_run(
                sim.url,
                *TINY_RUN,
                "--run-dir",
                run_dir,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        try:
            errs = [proc.communicate(timeout=120)[1] for proc in procs]
        finally:
            for proc in procs:
                stop_group(proc)
    codes = sorted(proc.returncode for proc in procs)
    assert codes == [0, 2], errs
    loser = errs[[proc.returncode for proc in procs].index(2)]
    (line,) = loser.strip().splitlines()
    assert line.startswith(f"vllm-load run: error: --run-dir {run_dir} already holds a run")
    with open(os.path.join(run_dir, "run.json"), encoding="utf-8") as fh:
        run = json.load(fh)
    assert run["outcome"] == "completed" and "closed_by" not in run
