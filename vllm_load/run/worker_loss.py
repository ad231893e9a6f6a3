"""Finding a lost load worker, on the master.

Locust counts a worker missing once it has sent no heartbeat for about 3 s (its heartbeats come
every second; measured: 4-5 s after a `kill -9`). A worker of `vllm-load run --workers N` is a
process the master forked itself: when it dies, its process says so at once. Each worker
reports where it runs (`WorkerProcess`, with its first report); a worker that is the master's
own child is lost once its process has exited (checked every second, confirmed half a second
later: a worker that quits with the test has told Locust so by then), and Locust is told to move
its users then (`compat.locust.declare_missing`) rather than seconds later.
"""

from __future__ import annotations

import os
import socket
from dataclasses import asdict, dataclass

PROCESS_EXITED = "process_exited"  # how it was found: its process had exited (a local worker)
MISSING_HEARTBEATS = "missing_heartbeats"  # Locust's heartbeats stopped (any worker)


@dataclass(frozen=True)
class WorkerProcess:
    """Where a load worker runs: its machine, its process and that process's parent."""

    host: str
    pid: int
    ppid: int

    @classmethod
    def this_one(cls) -> "WorkerProcess":
        return cls(socket.gethostname(), os.getpid(), os.getppid())

    def report(self) -> dict:
        return asdict(self)

    @classmethod
    def reported(cls, data: object) -> "WorkerProcess | None":
        """A worker report's `WorkerProcess` (None when it has none, or a damaged one)."""
        try:
            found = cls(**data)  # type: ignore[arg-type]
        except TypeError:
            return None
        fine = isinstance(found.host, str) and all(
            isinstance(v, int) for v in (found.pid, found.ppid)
        )
        return found if fine else None

    def is_my_child(self) -> bool:
        """Whether it was forked by this process, on this machine (`--workers`)."""
        return self.ppid == os.getpid() and self.host == socket.gethostname()


def child_exited(pid: int) -> bool:
    """Whether this process's child `pid` has exited: gone (gevent reaps the children Locust
    forks), a zombie, or the id now another process's (a new parent)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            stat = fh.read()
    except FileNotFoundError:
        return True
    except OSError:  # no /proc (macOS): whether the id is still taken
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False
    state, ppid = stat.rsplit(")", 1)[1].split()[:2]
    return state in ("Z", "X") or int(ppid) != os.getpid()


class AbandonedAtLoss:
    """The requests each lost worker had in flight, counted abandoned when it was lost. A worker
    Locust counted missing may only have stalled (a busy machine) and come back: then it reports
    them itself, as abandoned (its users were moved away) or as rows; `not_counted` and `ended`
    keep each request counted once."""

    def __init__(self) -> None:
        self._starts: dict[str, dict[float, int]] = {}

    def add(self, worker: str, starts: list[float]) -> None:
        counts = self._starts.setdefault(worker, {})
        for ts in starts:
            counts[ts] = counts.get(ts, 0) + 1

    def not_counted(self, worker: str, starts: list[float]) -> list[float]:
        """Of the starts `worker` reports abandoned, those not already counted at its loss."""
        if worker not in self._starts:
            return starts
        return [ts for ts in starts if not self._take(worker, ts)]

    def ended(self, worker: str, start: float) -> bool:
        """Whether a row of `worker` is a request counted abandoned at its loss (no longer is)."""
        return worker in self._starts and self._take(worker, start)

    def _take(self, worker: str, ts: float) -> bool:
        counts = self._starts[worker]
        left = counts.get(ts, 0)
        if not left:
            return False
        if left == 1:
            del counts[ts]
        else:
            counts[ts] = left - 1
        return True
