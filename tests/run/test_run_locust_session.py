"""How `vllm-load run` starts Locust: its own process group, but our session (scheduling group)."""

from __future__ import annotations

import os
import sys

from vllm_load.cli.locust_process import run_locust


def test_locust_runs_in_its_own_process_group_inside_our_session(capfd):
    code = run_locust(
        [sys.executable, "-c", "import os; print(os.getsid(0), os.getpgid(0), os.getpid())"]
    )
    assert code == 0
    sid, pgid, pid = map(int, capfd.readouterr().out.split())
    # a terminal's Ctrl-C (sent to the foreground group) reaches the child only through us
    assert pgid == pid and pgid != os.getpgid(0)
    # and it is not a new session: with autogroup scheduling that would be a new CPU-share group
    assert sid == os.getsid(0)
