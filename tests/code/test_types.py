"""The package passes mypy's type check (config: setup.cfg's [mypy] sections).

Run `mypy vllm_load` to see what this reports; its cache (.mypy_cache) makes a rerun quick.

The test keeps mypy's cache in the user's cache directory, not in the checkout: a fresh clone
(`.ci/run`) then starts from the cache any earlier check on this machine left (measured: 45 s of
CPU cold, 0.7 s warm from another clone's cache). mypy validates every cached module against its
source's hash and rechecks what changed and what depends on it, so a cache left by another
version of the code gives the same errors as none (a type error added in a clone with a warm
cache was reported).
"""

import os
import shutil
import subprocess
import sys

import pytest
from support import ROOT, user_cache_dir


def _mypy() -> str:
    here = os.path.join(os.path.dirname(sys.executable), "mypy")
    found = here if os.path.exists(here) else shutil.which("mypy")
    if not found:
        pytest.fail("mypy is not installed: pip install -e '.[test]'")
    return found


def _cache_dir() -> str:
    """MYPY_CACHE_DIR where set, else vllm-load's folder in the user's cache directory."""
    return os.environ.get("MYPY_CACHE_DIR") or user_cache_dir("mypy")


def test_mypy():
    proc = subprocess.run(
        [_mypy(), "--cache-dir", _cache_dir(), "vllm_load"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"mypy vllm_load:\n{proc.stdout[-6000:]}{proc.stderr[-2000:]}"
