"""The package passes mypy's type check (config: setup.cfg's [mypy] sections).

Run `mypy vllm_load` to see what this reports; its cache (.mypy_cache) makes a rerun quick.
"""

import os
import shutil
import subprocess
import sys

import pytest
from support import ROOT


def _mypy() -> str:
    here = os.path.join(os.path.dirname(sys.executable), "mypy")
    found = here if os.path.exists(here) else shutil.which("mypy")
    if not found:
        pytest.fail("mypy is not installed: pip install -e '.[test]'")
    return found


def test_mypy():
    proc = subprocess.run(
        [_mypy(), "vllm_load"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, f"mypy vllm_load:\n{proc.stdout[-6000:]}{proc.stderr[-2000:]}"
