"""The guard of a server's process group: it ends the group when vllm-load dies, however it dies.

`process.ServerProcess` runs a server command through a shell, in a process group of its own that
`stop()` ends whole. A SIGKILLed vllm-load (an OOM kill, a test's timeout, a cancelled CI job)
never calls `stop()`, and a parent-death signal (`parent_death`) set on the shell does not pass to
the processes the shell forks (`cd x; vllm serve ...`, `a & b; wait`, a server's workers): they
kept running with parent 1, holding the port and a core or a GPU. The kernel sends a parent-death
signal to one process, not to a group, so one process of the group has to take it and pass it on:
this guard, a child of vllm-load (the parent-death signal only comes from the parent), in the
server's group (so that `stop()` ends it with the rest, and the group cannot outlive it unseen).

How it runs (`process.ServerProcess.start`): vllm-load starts the guard first, its parent-death
signal (DIED) set and blocked before exec, so that one sent before the guard waits for it stays
pending; the shell, forked next, puts itself in a group of its own, writes its pid to the guard's
stdin and execs only once the guard has joined that group and said so on its stdout. So no process
of the server runs before it is guarded. Then:

- vllm-load dies: the guard SIGTERMs the group (vLLM frees its GPU on SIGTERM), gives it `grace`
  seconds, and SIGKILLs what is left;
- `stop()` SIGTERMs the group: the guard stays until every other process of the group has ended
  (a vllm-load killed while waiting still ends the group), then exits; `stop()`'s own SIGKILL
  ends it with the rest.

Run as a script, `python -I -S group_guard.py GRACE`: the standard library only, no package import.
"""

from __future__ import annotations

import os
import signal
import sys
import time

#: the guard's parent-death signal (not SIGTERM: that one is `stop()`'s)
DIED = signal.SIGUSR1
#: what `stop()` sends the group first
STOPPING = signal.SIGTERM
WATCHED = {DIED, STOPPING}
POLL_S = 0.1


def main(argv: list[str]) -> int:
    grace = float(argv[1])
    group = _join()
    if group is None:
        return 1
    if signal.sigwait(WATCHED) == STOPPING and _rest_ended(group, None):
        return 0  # stopped by vllm-load
    os.killpg(group, signal.SIGTERM)  # ours stays blocked
    if not _rest_ended(group, time.monotonic() + grace):
        os.killpg(group, signal.SIGKILL)
    return 0


def _join() -> int | None:
    """Join the group whose leader's pid comes on stdin and say so on stdout; None where none
    comes (vllm-load ended before its shell wrote it) or the shell is gone already."""
    line = os.read(0, 32)
    try:
        group = int(line)
        os.setpgid(0, group)
        os.write(1, b"joined\n")
    except (ValueError, OSError):
        return None
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)  # the pipes end here: the shell waits on them only until now
    os.close(null)
    return group


def _rest_ended(group: int, deadline: float | None) -> bool:
    """Wait until no process of `group` but this one is running: True. False at `deadline`, or
    without one as soon as vllm-load dies."""
    while others_running(group, os.getpid()):
        if deadline is None:
            if signal.sigtimedwait({DIED}, POLL_S) is not None:
                return False
        elif time.monotonic() >= deadline:
            return False
        else:
            time.sleep(POLL_S)
    return True


def others_running(group: int, me: int) -> bool:
    """Whether a process of `group` other than `me` runs (/proc; a zombie holds nothing)."""
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue  # ended meanwhile
        # after "pid (comm) ": state, ppid, pgrp; comm may hold spaces and parentheses
        state, _ppid, pgrp = stat[stat.rindex(b")") + 2 :].split()[:3]
        if int(pgrp) == group and state != b"Z":
            return True
    return False


if __name__ == "__main__":
    sys.exit(main(sys.argv))
