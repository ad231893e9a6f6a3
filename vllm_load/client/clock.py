"""Wall-clock times for `perf_counter()` readings.

A record's `start_ts` is wall-clock time (it lines up with steps.csv, the server's logs and
its traces) while its latencies are `perf_counter()` differences. Reading both clocks for every
request leaves a gap between the two reads in which the OS may preempt the process: then
`start_ts + ttft` is off by the preemption (tens of µs or more on a busy machine). Converting
one `perf_counter()` reading with a per-process offset cannot be split like that. The offset
is re-anchored every few seconds (so NTP slewing of the wall clock is followed) from the
tightest of a few paired reads, and only from a pair read within `TIGHT_GAP`: on a busy machine
every pair can be preempted, and an offset taken from such a pair is off by up to half its gap,
which moves every later `start_ts` against the earlier ones (a subagent's last request read as
ending 2 ms after its parent's next one started, at load ~10). A loose anchor keeps the last
offset and is tried again `RETRY_SECONDS` later.
"""

from __future__ import annotations

import socket
import struct
import sys
import time

REANCHOR_SECONDS = 5.0
RETRY_SECONDS = 0.5
TIGHT_GAP = 200e-6  # a pair of reads further apart was preempted between them
_PAIRED_READS = 5


class WallClock:
    """Maps `perf_counter()` readings to `time.time()` seconds."""

    __slots__ = ("_offset", "_next_anchor")

    def __init__(self) -> None:
        self._offset = 0.0
        self._next_anchor = -1.0

    def _anchor(self) -> None:
        best_gap, offset = None, 0.0
        for _ in range(_PAIRED_READS):
            before = time.perf_counter()
            wall = time.time()
            after = time.perf_counter()
            if best_gap is None or after - before < best_gap:
                best_gap, offset = after - before, wall - (before + after) / 2
        if best_gap is not None and best_gap > TIGHT_GAP and self._next_anchor >= 0:
            self._next_anchor = time.perf_counter() + RETRY_SECONDS  # keep the last offset
            return
        self._offset = offset
        self._next_anchor = time.perf_counter() + REANCHOR_SECONDS

    def wall(self, perf: float) -> float:
        """The `time.time()` value at the moment `perf_counter()` read `perf`."""
        if perf >= self._next_anchor:
            self._anchor()
        return perf + self._offset

    def perf(self, wall: float) -> float:
        """The `perf_counter()` value at the wall-clock moment `wall`."""
        if self._next_anchor < 0:
            self._anchor()
        return wall - self._offset


WALL_CLOCK = WallClock()  # the process's: every record's start_ts comes from it


# Kernel receive timestamps (Linux): with SO_TIMESTAMPNS set, every recvmsg() on the socket carries
# the CLOCK_REALTIME time at which the kernel queued the last segment it returns. A chunk is then
# dated when it reached the machine, not when a busy process got round to reading it: in a burst
# (a batching server emits a token for every running sequence at once) the 500th stream read is
# not stamped 500 reads late.
_SO_TIMESTAMPNS = getattr(
    socket, "SO_TIMESTAMPNS", 35 if sys.platform.startswith("linux") else None
)
_TIMESPEC = struct.Struct("@qq")
ANCILLARY_SIZE = socket.CMSG_SPACE(_TIMESPEC.size) if hasattr(socket, "CMSG_SPACE") else 0


def enable_receive_timestamps(sock: socket.socket) -> bool:
    """Ask the kernel to timestamp what `sock` receives; False where it cannot."""
    if _SO_TIMESTAMPNS is None or not ANCILLARY_SIZE or not hasattr(sock, "recvmsg"):
        return False
    try:
        sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
    except OSError:
        return False
    return True


_holder: socket.socket | None = None


def hold_receive_timestamps() -> None:
    """Keep kernel receive timestamps switched on for this process's lifetime.

    The kernel turns timestamping on for the whole stack lazily, when the first socket asks for
    it, and off again when the last one closes; segments received meanwhile carry no stamp. One
    idle socket holding the option keeps it on, so the first chunks of a run are stamped too.
    """
    global _holder
    if _holder is None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        if enable_receive_timestamps(sock):
            _holder = sock
        else:
            sock.close()


def received_at(ancillary: list, clock: WallClock) -> float | None:
    """The perf_counter() time of a recvmsg()'s kernel receive timestamp, if it carries one."""
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS and len(data) >= _TIMESPEC.size:
            seconds, nanoseconds = _TIMESPEC.unpack_from(data)
            return clock.perf(seconds + nanoseconds * 1e-9)
    return None
