"""A single-process run hands its records to the recorder in slices; between two slices the
event loop must poll for I/O, or every stream read waits for the whole flush.

Run in a subprocess: importing the session brings in Locust and gevent."""

import json
import subprocess
import sys

WRITER = r"""
import socket, sys, time
sock = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
for _ in range(60):
    time.sleep(0.004)
    sock.sendall(str(time.perf_counter()).encode().ljust(32))
sock.close()
"""

SCRIPT = r"""
import json, subprocess, sys, time
import gevent, gevent.socket
from vllm_load.session import LOCAL_FLUSH_SLICE, add_in_slices
from vllm_load.users import RecordBuffer

SLICE_SECONDS = 0.001

class SlowSession:
    def __init__(self):
        self.rows = 0
    def add_rows(self, rows, worker=None):
        end = time.perf_counter() + SLICE_SECONDS  # the CPU a slice of rows costs
        while time.perf_counter() < end:
            pass
        self.rows += len(rows)

buffer = RecordBuffer()
buffer._rows = [(i,) for i in range(200 * LOCAL_FLUSH_SLICE)]  # 200 slices, ~0.2 s of work
listener = gevent.socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen(1)
# the bytes come from another process, on its own clock: every 4 ms, stamped when sent
# (perf_counter is CLOCK_MONOTONIC, the same clock in both processes)
writer = subprocess.Popen([sys.executable, "-c", sys.argv[1], str(listener.getsockname()[1])])
a, _ = listener.accept()
lags = []

def reader():
    pending = b""
    while True:
        data = a.recv(4096)
        if not data:
            return
        now = time.perf_counter()
        pending += data
        while len(pending) >= 32:
            lags.append(now - float(pending[:32].decode()))
            pending = pending[32:]

session = SlowSession()
reading = gevent.spawn(reader)
gevent.sleep(0.02)
add_in_slices(session, buffer)
reading.join(timeout=5)
writer.wait(timeout=5)
print(json.dumps({"rows": session.rows, "slice": LOCAL_FLUSH_SLICE, "left": len(buffer), "lags": lags}))
"""


def test_stream_reads_get_in_between_slices_of_a_flush():
    out = subprocess.run([sys.executable, "-c", SCRIPT, WRITER], capture_output=True, text=True, timeout=120, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["left"] == 0 and result["rows"] == 200 * result["slice"]
    lags = sorted(result["lags"])
    assert len(lags) == 60
    # a read waits for at most the slice being added (1 ms) and a turn of the loop; with a
    # sleep(0) between slices gevent ran ~50 slices before it polled: waits of up to 50 ms
    assert lags[int(0.9 * len(lags))] < 0.010, [round(lag * 1000, 1) for lag in lags]
