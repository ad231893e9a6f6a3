"""One run shared by every test that asserts on it, across pytest-xdist's workers: the first test
to need it makes it while holding a lock on its key; the others (on either worker) wait for that
lock and read what it left. The runs live in the folder tests/conftest.py makes for the whole
pytest session (its workers inherit the path), removed when the session ends, so no run outlives
the session nor is read by a later one.

A module- or session-scoped fixture alone would make its run once per xdist worker that draws one
of its tests; this makes it once."""

from __future__ import annotations

import fcntl
import os
import shutil
from pathlib import Path
from typing import Callable

#: the folder of this pytest session's locks and shared runs, made by the xdist controller (or
#: the one process without xdist) in tests/conftest.py and inherited by its workers
LOCK_DIR_ENV = "VLLM_LOAD_TEST_LOCK_DIR"
_DONE = ".made"  # written once `make` returned: a run that failed half way is made again


def shared_run(key: str, make: Callable[[Path], None]) -> Path:
    """The folder of the run named `key`: `make(folder)` fills it the first time any test of
    this session asks; every later ask, on any worker, returns it as made."""
    root = Path(os.environ[LOCK_DIR_ENV]) / "shared-runs"
    root.mkdir(exist_ok=True)
    folder = root / key
    with open(root / f"{key}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # let go when the file closes
        if not (folder / _DONE).exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            make(folder)
            (folder / _DONE).touch()
    return folder
