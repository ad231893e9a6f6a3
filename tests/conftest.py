"""Fixtures shared by the tests. Plain helper functions are in the `support` package."""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile

import pytest


@pytest.fixture
def hf_tokenizer_dir(tmp_path) -> str:
    """A small, real Hugging Face tokenizer directory (Llama-3-style specials and chat template),
    built in tmp_path/tok without downloading anything."""
    from support.hf_tokenizer import build_hf_tokenizer_dir

    return build_hf_tokenizer_dir(tmp_path / "tok")


# --- sharing the machine under pytest-xdist ------------------------------------------------------
# The default suite runs on two xdist workers (setup.cfg's addopts). Most load tests check what
# a run recorded and tolerate a busy machine; a test marked `alone` checks timing or rates
# against a tolerance a second test's load beside it would break, so it runs with no other test
# beside it: every test holds a shared lock on one file for its whole protocol (module fixtures
# included), an `alone` one (and every `slow` or `real_vllm` one) an exclusive lock. A turnstile
# taken around the acquiring keeps the other worker's next tests from starving an exclusive one.


LOCK_DIR_ENV = "VLLM_LOAD_TEST_LOCK_DIR"  # made by the xdist controller, inherited by its workers


def pytest_configure(config):
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        os.environ[LOCK_DIR_ENV] = tempfile.mkdtemp(prefix="vllm-load-test-locks-")


def pytest_unconfigure(config):
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        shutil.rmtree(os.environ.pop(LOCK_DIR_ENV, ""), ignore_errors=True)


def _lock_paths() -> tuple[str, str] | None:
    """The lock files shared by this run's xdist workers; None when not under xdist."""
    root = os.environ.get(LOCK_DIR_ENV)
    if not (root and os.environ.get("PYTEST_XDIST_WORKER")):
        return None
    return os.path.join(root, "turnstile"), os.path.join(root, "machine")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    paths = _lock_paths()
    if paths is None:
        return (yield)
    # the slow and real-vLLM tests (holds, the benches' quick modes, pinned cores) are all alone
    alone = any(item.get_closest_marker(m) for m in ("alone", "slow", "real_vllm"))
    with open(paths[0], "a") as turnstile, open(paths[1], "a") as machine:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(machine, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            return (yield)
        finally:
            fcntl.flock(machine, fcntl.LOCK_UN)
