"""deploy/kubernetes's pods run as processes (root, network and mount namespaces; no cluster):
the simulator, the master and two workers started with exactly the arguments and environment
the rendered manifests give them, the Services' names resolving as the cluster's DNS would.
A test started from the web UI (after logging in with the Secret's password), or the headless
Job's one test, runs on both workers, which reach the master by its Service's name and port,
and every request carries the Secret's API key, which the simulator requires. See
tests/support/kube_pods.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest
from support import TESTS

pytestmark = [pytest.mark.slow, pytest.mark.netns]


def namespaces_unavailable() -> str | None:
    if os.geteuid() != 0:
        return "needs root (mount and network namespaces)"
    for tool in ("unshare", "mount", "ip", "setpriv"):
        if not shutil.which(tool):
            return f"needs {tool}"
    return None


@pytest.mark.skipif(namespaces_unavailable() is not None, reason=str(namespaces_unavailable()))
def test_the_manifests_pods_run_a_test_from_the_web_ui():
    seen = run_pods()
    assert seen["anonymous_stats"] == 401  # the UI is behind the login
    assert seen["workers"] == 2
    assert seen["swarm"]["success"] is True
    assert_one_test_on_both_workers(seen)


@pytest.mark.skipif(namespaces_unavailable() is not None, reason=str(namespaces_unavailable()))
def test_the_headless_jobs_pods_run_one_test_to_completion_and_exit_0():
    seen = run_pods("--headless")
    assert seen["master_exit"] == 0
    assert "--headless" in seen["master_argv"]
    assert_one_test_on_both_workers(seen)


def assert_one_test_on_both_workers(seen: dict) -> None:
    assert seen["outcome"] == "completed" and seen["requests_recorded"] >= 12
    assert seen["request_workers"] == 2  # both workers sent requests
    assert seen["statuses"] == ["200"] and seen["errors"] == []  # the key reached the target
    assert seen["api_key_in_logs"] is False


def run_pods(*flags: str) -> dict:
    """`support.kube_pods` in namespaces of its own: what it saw."""
    out = tempfile.mkdtemp(prefix="vllm-load-k8s-")
    os.chmod(out, 0o755)  # the pods' user reaches the runs directory below it
    try:
        result = subprocess.run(
            ["unshare", "--mount", "--net", "--propagation", "private"]
            + [sys.executable, "-m", "support.kube_pods", out, *flags],
            cwd=TESTS,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 0, result.stdout + result.stderr[-8000:]
        seen = json.loads(result.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return seen
