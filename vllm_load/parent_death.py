"""A child process that ends when its parent does, however the parent ends (SIGKILL included).

Linux's parent-death signal (`prctl(PR_SET_PDEATHSIG)`): the kernel sends the child a signal the
moment the thread that started it exits. Nothing else covers SIGKILL: a parent's own cleanup
never runs then, and its children, in process groups of their own, get no terminal signal
either. The setting survives exec but not fork, so each process sets it for itself: in a
`subprocess` child before exec (`preexec`), in a forked child after the fork. Elsewhere than on
Linux these do nothing.
"""

from __future__ import annotations

import ctypes
import functools
import os
import signal
import sys

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>

_forked_from: int | None = None


def die_with_parent(parent_pid: int | None, signum: int = signal.SIGTERM) -> bool:
    """Have the kernel send this process `signum` when its parent dies. False where it cannot
    (not Linux, or prctl refused). When `parent_pid` is given and is no longer our parent, the
    parent died before the setting was made: the process exits at once."""
    prctl = _prctl()
    if prctl is None or prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0) != 0:
        return False
    if parent_pid is not None and os.getppid() != parent_pid:
        os.kill(os.getpid(), signal.SIGKILL)  # orphaned already: the signal will never come
    return True


@functools.lru_cache(maxsize=1)
def _prctl():
    """libc's prctl, or None off Linux."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def preexec(parent_pid: int, own_process_group: bool):
    """A `subprocess.Popen(preexec_fn=...)` that makes the child die with `parent_pid` (the caller,
    `os.getpid()`), and puts it in a process group of its own when asked (for Pythons before
    3.11, whose Popen has no `process_group`). prctl is looked up here, in the parent: between
    fork and exec the child does no more than call it."""
    _prctl()

    def setup() -> None:
        if own_process_group:
            os.setpgrp()
        die_with_parent(parent_pid)

    return setup


def note_forks() -> None:
    """Remember, in every process forked from now on, the pid of the process it was forked from
    (`forked_from`), so that the child can tell whether that parent is still its parent."""
    os.register_at_fork(before=_note_parent, after_in_child=_keep_parent)


_parent_at_fork: int | None = None


def _note_parent() -> None:
    global _parent_at_fork
    _parent_at_fork = os.getpid()


def _keep_parent() -> None:
    global _forked_from
    _forked_from = _parent_at_fork


def forked_from() -> int | None:
    """The pid of the process this one was forked from (after `note_forks`), else None."""
    return _forked_from
