"""The turnover pacer: a burst of users turning over requests at once must not hold off socket
reads for longer than about its budget, and every user still gets its turn.

Run in a subprocess: the pacer lives in gevent's hub."""

import json
import subprocess
import sys

from support import TESTS

SCRIPT = r"""
import json, sys, time
import gevent, gevent.socket
sys.path.insert(0, sys.argv[1])
from support.read_lag import LagProbe
from vllm_load.client.pacing import TurnoverPacer

USERS, TURNOVER = 300, 0.0005  # 300 users whose streams end together, 0.5 ms of CPU each
paced = sys.argv[2] == "paced"
pacer = TurnoverPacer()
pairs = [gevent.socket.socketpair() for _ in range(USERS)]
arrived, done, waited = [], [], []

def user(i, sock):
    sock.recv(1)  # the stream's end: all of them become readable in one poll
    arrived.append(i)
    if paced:
        waited.append(pacer.wait())
    end = time.perf_counter() + TURNOVER
    while time.perf_counter() < end:
        pass
    done.append(i)

probe = LagProbe(80)
users = [gevent.spawn(user, i, b) for i, (_, b) in enumerate(pairs)]
gevent.sleep(0.05)
for s, _ in pairs:
    s.send(b"x")
gevent.joinall(users, timeout=10)
lags = probe.join()

# a user killed while it waits for its turn leaves the queue (no budget: nobody gets a turn)
closed = TurnoverPacer(budget=0.0)
stuck = gevent.spawn(closed.wait)
gevent.sleep(0.01)
queued = closed.queued
stuck.kill()
print(json.dumps({"arrived": arrived, "done": done, "waited": waited, "lags": lags, "queued": queued,
                  "after_kill": closed.queued}))
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
    lag = lambda result: sorted(result["lags"])[-3] * 1000  # noqa: E731  (3rd worst of ~80)
    # unpaced, the 300 turnovers run back to back in one turn of the hub: one read waits ~150 ms
    # (one: the probe's ticks after it are on time again, so the worst lag is the one to judge);
    # paced, no read waits much more than a budget, however many there are
    worst = max(unpaced["lags"]) * 1000
    assert worst > 50, sorted(unpaced["lags"])[-5:]
    # 10 ms on a quiet machine; a busy one stretches both runs alike (10.3 ms in a loaded CI run,
    # with the unpaced burst's read held far longer), so the pacing is judged against that too
    assert lag(paced) < max(10, worst / 5), (lag(paced), worst)
    assert paced["queued"] == 1 and paced["after_kill"] == 0
