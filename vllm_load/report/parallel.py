"""A report's charts drawn in two processes where a second core can take half of them.

matplotlib draws a chart in 0.2-0.4 s of one core, and a report on one run draws about seven:
a quarter of a million-request report's time. A forked child has the report's model in memory
already, so it draws every other chart and sends back only what they are (PNG text, pickled),
while this process draws the rest; the charts are the same bytes either way. On one usable
core, without fork (not POSIX) or with a single chart, everything is drawn here.
"""

from __future__ import annotations

import os
import pickle
import sys
import traceback
import warnings
from typing import Any, Callable, Sequence, TypeVar

T = TypeVar("T")


def usable_cores() -> int:
    """The cores this process may run on (its affinity where the system says)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


class PieceFailed(RuntimeError):
    """A piece raised in the child, and its exception could not be sent back as it was."""


def in_two_processes(pieces: Sequence[Callable[[], T]]) -> list[T]:
    """Every piece's result, in order: those at odd places from a forked child, the others from
    here, at once; all here where a second process cannot help. A piece's exception is raised
    here, whichever process ran it."""
    if len(pieces) < 2 or not hasattr(os, "fork") or usable_cores() < 2:
        return [piece() for piece in pieces]
    theirs = range(1, len(pieces), 2)
    read_end, write_end = os.pipe()
    try:
        pid = os.fork()
    except OSError:  # no process to spare: all here
        os.close(read_end)
        os.close(write_end)
        return [piece() for piece in pieces]
    if pid == 0:  # the child: never returns into the caller
        os.close(read_end)
        _child(pieces, theirs, write_end)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        try:
            mine = [pieces[i]() for i in range(0, len(pieces), 2)]
        finally:  # whatever happened here, the child's answer is read and the child reaped
            answer = pipe.read()
            os.waitpid(pid, 0)
    sent: tuple[bool, Any] = (
        pickle.loads(answer)
        if answer
        else (False, PieceFailed("the child ended without an answer"))
    )
    done, payload = sent
    if not done:
        raise payload
    drawn: list[T] = payload
    return [mine[i // 2] if i % 2 == 0 else drawn[i // 2] for i in range(len(pieces))]


def _child(pieces: Sequence[Callable[[], T]], indexes: range, write_end: int) -> None:
    status = 1
    try:
        # streams of its own: another thread of the parent (a progress bar) may have held the
        # inherited ones' locks at the fork, and the child has nothing to say on them
        sys.stdout = sys.stderr = open(os.devnull, "w", encoding="utf-8")
        warnings.simplefilter("ignore")
        try:
            answer = pickle.dumps((True, [pieces[i]() for i in indexes]))
        except BaseException as e:  # sent to be raised in the parent
            try:
                answer = pickle.dumps((False, e))
            except Exception:
                answer = pickle.dumps((False, PieceFailed(traceback.format_exc())))
        with os.fdopen(write_end, "wb") as pipe:
            pipe.write(answer)
        status = 0
    finally:
        os._exit(status)
