"""A stream waiting for its first chunk is read first in a hub turn full of ready streams.

Run in a subprocess: the priority lives on gevent's (libev) read watchers."""

import json
import subprocess
import sys

SCRIPT = r"""
import json, sys
import gevent, gevent.socket
from gevent import get_hub
from vllm_load.client.reader import FIRST_CHUNK_PRIORITY, set_read_priority
from vllm_load.compat.gevent import read_watcher

STREAMS, URGENT = 200, 150
order = []

def reader(i, sock):
    get_hub().wait(read_watcher(sock))
    order.append(i)

def turn(urgent):
    pairs = [gevent.socket.socketpair() for _ in range(STREAMS)]
    watcher = read_watcher(pairs[URGENT][1])
    raised = urgent and set_read_priority(watcher, FIRST_CHUNK_PRIORITY)
    readers = [gevent.spawn(reader, i, b) for i, (_, b) in enumerate(pairs)]
    gevent.sleep(0.01)  # every reader parked on its watcher
    del order[:]
    for a, _ in pairs:  # all readable by the next poll
        a.send(b"x")
    gevent.joinall(readers, timeout=5)
    first = order.index(URGENT)
    watcher.start(lambda: None)
    while_active = set_read_priority(watcher, 0)
    watcher.stop()
    lowered = set_read_priority(watcher, 0) and watcher.priority == 0
    for a, b in pairs:
        a.close(); b.close()
    return {"raised": raised, "position": first, "woken": len(order), "while_active": while_active, "lowered": lowered}

# libev's epoll takes at most 64 events per poll at first and grows that when a poll fills it:
# warm-up turns, so that all the streams become ready in one poll as in a long run
turn(False); turn(False); turn(False)
print(json.dumps({"urgent": turn(True), "plain": turn(False)}))
"""


def test_the_stream_waiting_for_its_first_chunk_reads_first():
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120, check=True
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    urgent, plain = result["urgent"], result["plain"]
    assert urgent["woken"] == plain["woken"] == 200
    assert urgent["raised"] is True
    assert urgent["position"] == 0, urgent
    # the control: at the default priority the same stream waits for others in the same turn
    assert plain["position"] > 0, plain
    # an active watcher's priority cannot change (libev); once stopped it can be lowered again
    assert urgent["while_active"] is False
    assert urgent["lowered"] is True
