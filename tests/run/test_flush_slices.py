"""A single-process run hands its records to the recorder in slices; between two slices the
event loop must poll for I/O, or every stream read waits for the whole flush.

Run in a subprocess: importing the session brings in Locust and gevent."""

import json
import subprocess
import sys

from support import TESTS

SCRIPT = r"""
import json, sys, time
import gevent
sys.path.insert(0, sys.argv[1])
from support.read_lag import LagProbe
from vllm_load.run.wiring import LOCAL_FLUSH_SLICE, add_in_slices
from vllm_load.client.context import RecordBuffer

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
probe = LagProbe(60)  # bytes from another process, every 4 ms, stamped when sent
session = SlowSession()
gevent.sleep(0.02)
add_in_slices(session, buffer)
lags = probe.join()
print(json.dumps({"rows": session.rows, "slice": LOCAL_FLUSH_SLICE, "left": len(buffer), "lags": lags}))
"""


def test_stream_reads_get_in_between_slices_of_a_flush():
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, TESTS],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["left"] == 0 and result["rows"] == 200 * result["slice"]
    lags = sorted(result["lags"])
    assert len(lags) == 60
    # a read waits for at most the slice being added (1 ms) and a turn of the loop; with a
    # sleep(0) between slices gevent ran ~50 slices before it polled: waits of up to 50 ms
    assert lags[int(0.9 * len(lags))] < 0.010, [round(lag * 1000, 1) for lag in lags]


CHEAP = r"""
import json, sys
import gevent
sys.path.insert(0, sys.argv[1])
from vllm_load.run.wiring import LOCAL_FLUSH_SLICE, add_in_slices
from vllm_load.client.context import RecordBuffer

class CheapSession:
    def __init__(self):
        self.rows = 0
    def add_rows(self, rows, worker=None):
        self.rows += len(rows)

turns, sleep = [], gevent.sleep
gevent.sleep = lambda seconds=0: (turns.append(seconds), sleep(seconds))[1]
buffer = RecordBuffer()
buffer._rows = [(i,) for i in range(200 * LOCAL_FLUSH_SLICE)]
session = CheapSession()
add_in_slices(session, buffer)
print(json.dumps({"rows": session.rows, "slice": LOCAL_FLUSH_SLICE, "turns": len(turns)}))
"""


def test_cheap_slices_share_a_turn_of_the_event_loop():
    """Slices that cost next to nothing (non-streamed rows: ~10 µs each) are added one after
    another until they have held the loop LOCAL_FLUSH_HOLD, not with a turn after each."""
    out = subprocess.run(
        [sys.executable, "-c", CHEAP, TESTS],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["rows"] == 200 * result["slice"]
    assert result["turns"] < 20, result  # one per 200 slices before
