"""The summary a finished run prints."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys

import pytest
from support.reports import synthetic_runs

from vllm_load.cli.run_end import failed_levels
from vllm_load.run.end_summary import print_summary
from vllm_load.run_format.synthetic import ServerModel
from vllm_load.server.loss import final_streak

#: prints the summary of the run directory argv[1], then whether scipy was imported for it
_SUMMARY_AND_SCIPY = (
    "import sys; from vllm_load.run.end_summary import print_summary; print_summary(sys.argv[1]); "
    "print('scipy imported:', 'scipy' in sys.modules)"
)


def test_summary_of_a_run_without_slos_prints_the_table_without_importing_scipy(tmp_path):
    """scipy costs about a second and 60 MiB at every run's end; only intervals and goodput
    need it."""
    (run_dir,) = synthetic_runs(tmp_path, 1)
    out = subprocess.run(
        [sys.executable, "-c", _SUMMARY_AND_SCIPY, run_dir],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert "scipy imported: False" in out
    for level in ("10", "50", "100", "200"):
        assert any(line.split()[:1] == [level] for line in out.splitlines()), out
    assert f"Run directory: {run_dir}" in out


def _with_run_json(run_dir: str, **changes) -> None:
    path = os.path.join(run_dir, "run.json")
    with open(path, encoding="utf-8") as fh:
        run = json.load(fh)
    run.update(changes)
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(run, fh)


def test_the_end_checks_are_found_while_the_summary_reads_the_run_and_read_back(tmp_path):
    """`vllm-load run` decides its exit status on the failed levels and the final streak; the
    run's own process finds them while it reads the run for its table (run.json's end_checks),
    and the launching command reads them instead of reading and measuring the run again."""
    (run_dir,) = synthetic_runs(tmp_path, 1, server=ServerModel(fail_rate=0.05))
    with contextlib.redirect_stdout(io.StringIO()):
        checks = print_summary(run_dir)
    assert checks is not None
    assert checks.failed_levels == failed_levels(run_dir)  # (measured: no end_checks yet)
    assert checks.failed_levels.startswith("4 level(s) failed")
    _with_run_json(run_dir, end_checks=checks.as_json())
    os.remove(os.path.join(run_dir, "requests.csv"))  # what is recorded is read, nothing else
    assert failed_levels(run_dir) == checks.failed_levels
    assert final_streak(run_dir) == checks.final_streak


@pytest.mark.parametrize(
    "damaged",
    ["nonsense", {"failed_levels": 3, "final_streak": {"level": "x"}}, {"final_streak": [1]}],
)
def test_damaged_end_checks_are_not_trusted_the_run_is_read_instead(tmp_path, damaged):
    (run_dir,) = synthetic_runs(tmp_path, 1, server=ServerModel(fail_rate=0.05))
    measured_levels, measured_streak = failed_levels(run_dir), final_streak(run_dir)
    _with_run_json(run_dir, end_checks=damaged)
    assert failed_levels(run_dir) == measured_levels and measured_levels
    assert final_streak(run_dir) == measured_streak


def test_the_summary_measures_the_run_once(tmp_path, monkeypatch):
    """The table, the diagnosis and the end checks all read one measurement of the run: a run of
    a million requests is not measured twice at its end."""
    from vllm_load.analysis.levels import measure

    (run_dir,) = synthetic_runs(tmp_path, 1)
    made = []
    init = measure.LevelMeasurement.__init__

    def counted(self, *args, **kwargs):
        made.append(1)
        init(self, *args, **kwargs)

    monkeypatch.setattr(measure.LevelMeasurement, "__init__", counted)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        checks = print_summary(run_dir)
    assert checks is not None
    assert "Why it saturates:" in out.getvalue()
    assert len(made) == 1
