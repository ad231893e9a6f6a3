"""The turnover pacer: a burst of users turning over requests at once must not hold off socket
reads for longer than about its budget, and every user still gets its turn.

Run in a subprocess: the pacer lives in gevent's hub."""

import json
import subprocess
import sys

import pytest
from support import TESTS
from support.host_wait import within

SCRIPT = r"""
import bisect, json, os, sys, time
import gevent, gevent.socket
sys.path.insert(0, sys.argv[1])
from support.host_wait import HostWait
from support.read_lag import LagProbe
from vllm_load.client.pacing import TurnoverPacer

USERS, TURNOVER = 300, 0.0005  # 300 users whose streams end together, 0.5 ms of CPU each
paced = sys.argv[2] == "paced"
pacer = TurnoverPacer()
pairs = [gevent.socket.socketpair() for _ in range(USERS)]
arrived, done, waited, ends = [], [], [], []

def user(i, sock):
    sock.recv(1)  # the stream's end: all of them become readable in one poll
    arrived.append(i)
    if paced:
        waited.append(pacer.wait())
    end = time.perf_counter() + TURNOVER
    while time.perf_counter() < end:
        pass
    done.append(i)
    ends.append(time.perf_counter())

probe = LagProbe(80)
host = HostWait(reader=os.getpid())
users = [gevent.spawn(user, i, b) for i, (_, b) in enumerate(pairs)]
gevent.sleep(0.05)
before = host.read()
for s, _ in pairs:
    s.send(b"x")
gevent.joinall(users, timeout=10)
after = host.read()
lags = probe.join()
# per stamp, the turnovers that ran while it waited to be read: what pacing bounds, on any machine
held = [bisect.bisect_left(ends, read) - bisect.bisect_right(ends, sent) for sent, read in probe.stamps]
amid = sum(ends[0] < sent < ends[-1] for sent, _ in probe.stamps)  # stamps sent amid the burst

# a user killed while it waits for its turn leaves the queue (no budget: nobody gets a turn)
closed = TurnoverPacer(budget=0.0)
stuck = gevent.spawn(closed.wait)
gevent.sleep(0.01)
queued = closed.queued
stuck.kill()
print(json.dumps({"arrived": arrived, "done": done, "waited": waited, "lags": lags, "queued": queued,
                  "after_kill": closed.queued, "held": held, "amid": amid, "before": before, "after": after}))
"""


def run(mode: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, TESTS, mode],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_burst_of_turnovers_lets_reads_in_every_budget():
    paced, unpaced = run("paced"), run("unpaced")
    assert sorted(paced["done"]) == list(range(300))
    assert paced["done"] == paced["arrived"]  # first come, first served
    # wait() says who was queued: the first turnovers of the burst went at once, most waited
    assert paced["waited"][0] is False and 250 < sum(paced["waited"]) < 300, paced["waited"]
    lag = lambda result: sorted(result["lags"])[-3]  # noqa: E731  (3rd worst of ~80)
    held = lambda result: sorted(result["held"])[-3]  # noqa: E731
    # unpaced, the 300 turnovers run back to back in one turn of the hub: one read waits ~150 ms
    # (one: the probe's ticks after it are on time again, so the worst lag is the one to judge);
    # paced, no read waits much more than a budget (2 ms: ~4 turnovers of 0.5 ms), however many
    # there are. Counted in turnovers, which a busy machine does not change (5-8 paced, 165-260
    # unpaced at load 20), where the probe sent while they ran (a starved sender may not have):
    worst = max(unpaced["lags"])
    assert worst > 0.050, sorted(unpaced["lags"])[-5:]
    assert paced["queued"] == 1 and paced["after_kill"] == 0
    if paced["amid"] < 5:
        pytest.skip(f"the probe sent {paced['amid']} stamps while the paced turnovers ran")
    assert held(paced) <= 10, sorted(paced["held"])[-5:]
    # and in time: 10 ms on a quiet machine, or a fifth of the unpaced burst's read (a busy one
    # stretches both runs), or missed by no more than the host kept the paced process waiting
    limit = max(0.010, worst / 5)
    within(
        lag(paced), 0.0, limit, paced["before"], paced["after"],
        f"3rd worst paced read lag (turnovers a read waited for: {sorted(paced['held'])[-5:]})",
    )  # fmt: skip
