"""How late a gevent process reads bytes that another process sends it on a steady beat.

Used inside the subprocess scripts of the tests that check the event loop keeps polling for I/O
while it works (gevent must not be imported into pytest itself). Run as a script, this file is
the other process: `python read_lag.py PORT COUNT` sends COUNT stamps, one every 4 ms, each its
perf_counter() time (CLOCK_MONOTONIC: the same clock in both processes) padded to 32 bytes.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

STAMP = 32
BEAT = 0.004


class LagProbe:
    """Starts the sender and a reader greenlet; `lags` gets, per stamp, read time - send time,
    and `stamps` its (send time, read time)."""

    def __init__(self, count: int) -> None:
        import gevent
        import gevent.socket

        self.lags: list[float] = []
        self.stamps: list[tuple[float, float]] = []
        listener = gevent.socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        self._sender = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), str(listener.getsockname()[1]), str(count)]
        )
        self._conn, _ = listener.accept()
        listener.close()
        self._reader = gevent.spawn(self._read)

    def _read(self) -> None:
        pending = b""
        while True:
            data = self._conn.recv(4096)
            if not data:
                return
            now = time.perf_counter()
            pending += data
            while len(pending) >= STAMP:
                sent = float(pending[:STAMP].decode())
                self.lags.append(now - sent)
                self.stamps.append((sent, now))
                pending = pending[STAMP:]

    @property
    def sender_pid(self) -> int:
        return self._sender.pid

    def join(self) -> list[float]:
        """Wait for every stamp; the lags in seconds."""
        self._reader.join(timeout=5)
        self._sender.wait(timeout=5)
        self._conn.close()
        return self.lags


def _send(port: int, count: int) -> None:
    sock = socket.create_connection(("127.0.0.1", port))
    for _ in range(count):
        time.sleep(BEAT)
        sock.sendall(str(time.perf_counter()).encode().ljust(STAMP))
    sock.close()


if __name__ == "__main__":
    _send(int(sys.argv[1]), int(sys.argv[2]))
