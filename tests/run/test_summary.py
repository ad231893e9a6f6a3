"""The summary a finished run prints."""

from __future__ import annotations

import subprocess
import sys

from support.reports import synthetic_runs

#: prints the summary of the run directory argv[1], then whether scipy was imported for it
_SUMMARY_AND_SCIPY = (
    "import sys; from vllm_load.run.summary import print_summary; print_summary(sys.argv[1]); "
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
