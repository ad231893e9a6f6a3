"""Fixtures shared by the tests. Plain helper functions are in the `support` package."""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile

import pytest
from support.shared_runs import LOCK_DIR_ENV
from support.worker_order import spread


@pytest.fixture
def hf_tokenizer_dir(tmp_path) -> str:
    """A small, real Hugging Face tokenizer directory (Llama-3-style specials and chat template),
    built in tmp_path/tok without downloading anything."""
    from support.hf_tokenizer import build_hf_tokenizer_dir

    return build_hf_tokenizer_dir(tmp_path / "tok")


# --- sharing the machine under pytest-xdist ------------------------------------------------------
# The default suite runs on three xdist workers (setup.cfg's addopts), and every test in it holds
# beside the others' load (docs/development.md says how). A test marked `alone`, and every `slow`,
# `timing` or `real_vllm` one, checks timing or rates against a tolerance a second test's load
# beside it would break, so it runs with no other test beside it: every test holds a shared lock
# on one file for its whole protocol (module fixtures included), an alone one an exclusive lock
# (the other workers idle meanwhile: one is in the default suite). A turnstile
# taken around the acquiring keeps the other worker's next tests from starving an exclusive one.


def pytest_configure(config):
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        os.environ[LOCK_DIR_ENV] = tempfile.mkdtemp(prefix="vllm-load-test-locks-")
        # `tune --advice` appends to an advice record in the user's data directory: never a
        # test's (each test that reads it points it at its own file)
        os.environ["VLLM_LOAD_ADVICE_RECORD"] = os.path.join(
            os.environ[LOCK_DIR_ENV], "advice-record.jsonl"
        )
        # every `vllm-load run` writes its run to the results store as it ends: never the user's,
        # and none at all unless a test names one (`--store`): storing measures the run again
        # (about 0.3 s, 3 s with the first imports), which every run of the suite would pay
        os.environ["VLLM_LOAD_STORE"] = "none"
        # the suite starts some 400 Python processes (runs, their Locust children, simulators);
        # where bytecode is not written (PYTHONDONTWRITEBYTECODE, set on these machines) each
        # compiled vllm_load from source again. They write it beside the sources (__pycache__,
        # git-ignored) and read the installed packages' own, which pip compiled. (A cache prefix,
        # the way before, made the xdist workers and every process compile pandas, numpy,
        # matplotlib and the rest again into it: collecting the tests took 25.6 s of CPU from a
        # cold prefix, 16.5 s without one.)
        os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


def pytest_unconfigure(config):
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        shutil.rmtree(os.environ.pop(LOCK_DIR_ENV, ""), ignore_errors=True)


def _lock_paths() -> tuple[str, str] | None:
    """The lock files shared by this run's xdist workers; None when not under xdist."""
    root = os.environ.get(LOCK_DIR_ENV)
    if not (root and os.environ.get("PYTEST_XDIST_WORKER")):
        return None
    return os.path.join(root, "turnstile"), os.path.join(root, "machine")


def is_alone(item) -> bool:
    """Whether `item` runs with no other test beside it: marked `alone`, or slow, timing or
    real-vLLM (holds, the benches' quick modes, long timing tolerances, pinned cores)."""
    return any(item.get_closest_marker(m) for m in ("alone", "slow", "real_vllm", "timing"))


@pytest.hookimpl(trylast=True)  # after pytest's own reordering by fixture scope
def pytest_collection_modifyitems(config, items):
    """The alone tests first, together: xdist hands the first worker its first tests in one
    batch, so it runs them back to back, holding the machine, while the other waits once,
    instead of each alone test waiting for whatever the other worker was running. The others
    spread over the workers' first shares (support/worker_order.py)."""
    alone = [item for item in items if is_alone(item)]
    others = [item for item in items if not is_alone(item)]
    workers = getattr(config, "workerinput", {}).get("workercount", 0)
    if workers > 1:
        by_id = {item.nodeid: item for item in others}
        others = [by_id[nodeid] for nodeid in spread(list(by_id), workers)]
    items[:] = alone + others


class MachineLock:
    """This worker's hold on the machine: shared, exclusive, or none."""

    def __init__(self) -> None:
        self.mode: int | None = None
        self.file = None

    def take(self, paths: tuple[str, str], mode: int) -> None:
        if self.mode == mode:
            return
        self.release()
        self.file = open(paths[1], "a")  # noqa: SIM115 (held across tests)
        with open(paths[0], "a") as turnstile:
            fcntl.flock(turnstile, fcntl.LOCK_EX)
            try:
                fcntl.flock(self.file, mode)
            finally:
                fcntl.flock(turnstile, fcntl.LOCK_UN)
        self.mode = mode

    def release(self) -> None:
        if self.file is not None:
            self.file.close()  # closing drops the lock
        self.file, self.mode = None, None


MACHINE = MachineLock()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    paths = _lock_paths()
    if paths is None:
        return (yield)
    alone = is_alone(item)
    MACHINE.take(paths, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
    try:
        return (yield)
    finally:
        # an exclusive hold lasts through this worker's run of alone tests; a shared one is let
        # go after every test, so that a waiting alone test gets in between
        if not (alone and nextitem is not None and is_alone(nextitem)):
            MACHINE.release()
