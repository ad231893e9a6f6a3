"""The two stream readers (`reader.StreamReader` in the hub, `reader.read_unstamped` in the
user's greenlet, the TLS path) against a live simulator stream: same chunks, same timing.

Run in a subprocess: the readers live on gevent sockets."""

import json
import subprocess
import sys

import pytest

from vllm_load.sim.child import SimulatorProcess

SCRIPT = r"""
import json, sys, time, types
import gevent
from geventhttpclient import HTTPClient
from vllm_load.client.clock import WallClock, enable_receive_timestamps
from vllm_load.client.reader import StreamReader, read_unstamped
from vllm_load.client.request import NEVER
from vllm_load.client.sse import SseMeter
from vllm_load.compat.gevent import raw_socket
from vllm_load.compat.geventhttpclient import body_buffer, response_socket

body = json.dumps({"model": "sim-llama-8b", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 20,
                   "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}).encode()
out = {}
for name in ("stamped", "unstamped"):
    client = HTTPClient.from_url(sys.argv[1], concurrency=1, block_size=65536)
    response = client.request("POST", "/v1/chat/completions", body=body, headers={"Content-Type": "application/json"})
    meter, floor = SseMeter(chat=True), time.perf_counter()
    mark = [floor]
    if body_buffer(response):
        meter.consume(body_buffer(response), floor)
    first_token = gevent.Timeout(5)
    first_token.start()
    # what the readers use of a MeasuredRequest
    request = types.SimpleNamespace(
        meter=meter,
        stall_mark=mark,
        end_first_token_wait=first_token.cancel,
        cancel_at_chunk=NEVER,
    )
    sock = response_socket(response)
    if name == "stamped":
        assert enable_receive_timestamps(raw_socket(sock))
        StreamReader(request, sock, response, floor, WallClock()).read()
    else:
        read_unstamped(request, sock, response, floor)
    out[name] = {"times": meter.chunk_times, "done_at": meter.done_at, "usage": meter.usage,
                 "complete": response.message_complete, "first_token_pending": first_token.pending,
                 "mark": mark[0], "floor": floor}
    first_token.close()
    client.close()
print(json.dumps(out))
"""


def test_both_readers_take_the_whole_stream_with_its_timing():
    with SimulatorProcess("--ttft", "0.05", "--itl", "0.01") as sim:
        out = subprocess.run(
            [sys.executable, "-c", SCRIPT, sim.url],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
    result = json.loads(out.stdout.strip().splitlines()[-1])

    def median_gap(times: list[float]) -> float:
        return sorted(b - a for a, b in zip(times, times[1:]))[(len(times) - 1) // 2]

    medians = {name: median_gap(r["times"]) for name, r in result.items()}
    # both readers off alike: the chunks arrived so (the kernel's receive times say it for the
    # stamped one), so the simulator sent them so, its process starved on a busy machine (a loaded
    # CI run read a median gap of 0.0): the readers' timing cannot be judged then, only what they
    # took; one reader off alone is that reader's fault
    timed = any(abs(m - 0.01) < 0.003 for m in medians.values())
    for name, r in result.items():
        times = r["times"]
        assert len(times) == 20, (name, len(times))
        assert r["complete"] and r["usage"]["completion_tokens"] == 20, name
        assert times == sorted(times) and times[0] >= r["floor"], name
        assert r["done_at"] >= times[-1] and r["mark"] >= times[-1], name
        gaps = sorted(b - a for a, b in zip(times, times[1:]))
        assert not timed or abs(gaps[len(gaps) // 2] - 0.01) < 0.003, (name, gaps)
        assert r["first_token_pending"] is False, name  # the first content chunk cancelled it
    if not timed:
        pytest.skip(
            f"the chunks arrived {medians} s apart at the median, not 0.01: the simulator's"
        )
