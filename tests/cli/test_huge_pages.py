"""vllm-load's commands run NumPy without transparent huge pages (`vllm_load.huge_pages`): set
before NumPy is imported, so it holds for the command and the processes it starts, and a value
the user set stays."""

from __future__ import annotations

import os
import subprocess
import sys

CHILD = """
import os, sys
from vllm_load.cli.main import main
assert "numpy" not in sys.modules
try:
    main(["--version"])
except SystemExit:
    pass
print(os.environ.get("NUMPY_MADVISE_HUGEPAGE"))  # NumPy reads it when imported
"""


def _child(env: dict) -> str:
    done = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()[-1]  # after the version line


def test_a_command_runs_numpy_without_huge_pages():
    env = {k: v for k, v in os.environ.items() if k != "NUMPY_MADVISE_HUGEPAGE"}
    assert _child(env) == "0"


def test_a_value_the_user_set_stays():
    assert _child({**os.environ, "NUMPY_MADVISE_HUGEPAGE": "1"}) == "1"
