"""WallClock: perf_counter readings to wall-clock seconds."""

import time

from vllm_load.client.clock import WallClock


def test_wall_of_a_perf_reading_matches_time_time():
    clock = WallClock()
    for _ in range(200):
        before = time.time()
        wall = clock.wall(time.perf_counter())
        after = time.time()
        assert before - 1e-3 <= wall <= after + 1e-3
    # latencies keep their perf_counter precision: a difference of walls is the difference of readings
    assert abs(clock.wall(100.0) - clock.wall(99.5) - 0.5) < 1e-6


class SteppedClocks:
    """Stands in for the `time` module: a perf_counter() that moves only when told to, and a wall
    clock `wall_offset` ahead of it, which NTP may step."""

    def __init__(self, perf: float, wall_offset: float) -> None:
        self.now, self.wall_offset = perf, wall_offset

    def perf_counter(self) -> float:
        return self.now

    def time(self) -> float:
        return self.now + self.wall_offset


def test_reanchors_after_a_while(monkeypatch):
    """A reading maps to the wall clock of its moment; a step of the wall clock is followed
    once REANCHOR_SECONDS have passed, and not before (latencies keep perf_counter differences)."""
    import vllm_load.client.clock as clock_module

    monkeypatch.setattr(clock_module, "REANCHOR_SECONDS", 5.0)
    clocks = SteppedClocks(perf=100.0, wall_offset=1_700_000_000.0)
    monkeypatch.setattr(clock_module, "time", clocks)
    clock = WallClock()
    assert clock.wall(100.0) == 1_700_000_100.0
    assert clock.perf(1_700_000_100.0) == 100.0

    clocks.wall_offset += 2.0  # NTP steps the wall clock 2 s ahead
    clocks.now = 104.0
    assert clock.wall(104.0) == 1_700_000_104.0  # within 5 s of the anchor: the old offset
    clocks.now = 105.5
    assert clock.wall(105.5) == 1_700_000_107.5  # 5 s on: anchored again, on the new wall clock
    assert clock.perf(1_700_000_107.5) == 105.5
    clocks.wall_offset -= 1.0
    clocks.now = 108.0
    assert clock.wall(108.0) == 1_700_000_110.0  # and held again for 5 s


class PreemptedClocks(SteppedClocks):
    """`SteppedClocks` whose perf_counter() moves `step` seconds at every read, as on a machine
    that preempts the process between any two reads."""

    step = 0.0

    def perf_counter(self) -> float:
        self.now += self.step
        return self.now


def test_a_pair_of_reads_preempted_between_them_is_no_anchor(monkeypatch):
    """An offset from a pair of reads a preemption split is off by half the gap: the last offset
    is kept and the anchor tried again soon, so one stretch's timestamps never move against the
    next one's by a loaded machine's delay."""
    import vllm_load.client.clock as clock_module

    clocks = PreemptedClocks(perf=100.0, wall_offset=1_700_000_000.0)
    monkeypatch.setattr(clock_module, "time", clocks)
    clock = WallClock()
    assert clock.wall(100.0) == 1_700_000_100.0  # (the first anchor is taken, tight)
    clocks.now, clocks.step = 105.5, 0.002  # 2 ms between any two reads, 5 s on
    assert clock.wall(105.5) == 1_700_000_105.5  # the last offset, not one 1 ms off
    clocks.step = 0.0
    clocks.wall_offset += 2.0  # (the wall clock moved meanwhile)
    clocks.now += 0.1
    assert clock.wall(clocks.now) == clocks.now + 1_700_000_000.0  # retried after 0.5 s, not yet
    clocks.now += 0.5
    assert clock.wall(clocks.now) == clocks.now + 1_700_000_002.0  # a tight pair: anchored again


def test_kernel_receive_timestamp_dates_bytes_when_they_arrived_not_when_read():
    import socket
    import sys

    import pytest

    from vllm_load.client.clock import (
        ANCILLARY_SIZE,
        enable_receive_timestamps,
        hold_receive_timestamps,
        received_at,
    )

    listener = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(listener.getsockname())
    server, _ = listener.accept()
    try:
        if not enable_receive_timestamps(client):
            assert not sys.platform.startswith("linux"), "Linux has SO_TIMESTAMPNS"
            pytest.skip("no kernel receive timestamps on this platform")
        clock = WallClock()
        hold_receive_timestamps()
        for _attempt in range(
            5
        ):  # the stack turns timestamping on lazily: early segments may be unstamped
            sent = time.perf_counter()
            server.sendall(b"data: {}\n\n")
            time.sleep(0.05)  # a busy client: the bytes wait in the socket
            data, ancillary, _flags, _addr = client.recvmsg(65536, ANCILLARY_SIZE)
            read = time.perf_counter()
            arrived = received_at(ancillary, clock)
            if arrived is not None:
                break
        assert data == b"data: {}\n\n" and arrived is not None
        assert sent - 1e-3 < arrived < sent + 0.01 and read - arrived > 0.04
        assert received_at([], clock) is None
    finally:
        for s in (client, server, listener):
            s.close()
