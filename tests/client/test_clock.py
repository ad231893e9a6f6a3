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


def test_reanchors_after_a_while(monkeypatch):
    import vllm_load.client.clock as clock_module

    monkeypatch.setattr(clock_module, "REANCHOR_SECONDS", 0.0)
    clock = WallClock()
    clock.wall(time.perf_counter())
    first = clock._next_anchor
    time.sleep(0.01)
    clock.wall(time.perf_counter())
    assert clock._next_anchor > first


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
