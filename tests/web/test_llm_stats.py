"""/stats/requests as the web view extends it (`web/view.add_llm_stats`): Locust memoizes the
answer for 2 s, so the header's users and status are set from the runner at every request, on
the memoized response, never left as they were when it was made.

In a child process: the web view imports Locust, whose gevent must not be imported into pytest
(tests/code/test_compat.py says why)."""

from __future__ import annotations

import json
import subprocess
import sys

SCRIPT = """
import json
from types import SimpleNamespace
from flask import Response
from vllm_load.web.view import add_llm_stats

runner = SimpleNamespace(user_count=2, state="running")
environment = SimpleNamespace(runner=runner)
body = {"user_count": 2, "state": "running", "stats": [], "total_rps": 1.5}
response = Response(json.dumps(body), mimetype="application/json")  # Locust's, memoized
first = json.loads(add_llm_stats(environment, response).get_data())
runner.user_count, runner.state = 4, "spawning"  # the next level, the same memoized answer
again = json.loads(add_llm_stats(environment, response).get_data())
print("ANSWERS " + json.dumps([first, again]))
"""


def test_the_header_reads_the_runner_now_not_the_memoized_answer():
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("ANSWERS ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    first, again = json.loads(lines[0].removeprefix("ANSWERS "))
    assert first["user_count"] == 2 and first["state"] == "running"
    assert again["user_count"] == 4 and again["state"] == "spawning"
    assert {row["key"] for row in again["extended_stats"]} == {
        row["key"] for row in first["extended_stats"]
    }
    assert again["total_rps"] == 1.5  # Locust's own figures pass through
