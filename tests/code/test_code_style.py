"""The code passes ruff's lint and is in ruff's format (config: pyproject.toml's [tool.ruff]).

Run `ruff check --fix . && ruff format .` to mend what these report.
"""

import os
import shutil
import subprocess
import sys

import pytest
from support import ROOT


def _ruff() -> str:
    here = os.path.join(os.path.dirname(sys.executable), "ruff")
    found = here if os.path.exists(here) else shutil.which("ruff")
    if not found:
        pytest.fail("ruff is not installed: pip install -e '.[test]'")
    return found


@pytest.mark.parametrize(
    "args", [["check", "."], ["format", "--check", "."]], ids=["lint", "format"]
)
def test_ruff(args):
    proc = subprocess.run([_ruff(), *args], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, (
        f"ruff {' '.join(args)}:\n{proc.stdout[-4000:]}{proc.stderr[-2000:]}"
    )
