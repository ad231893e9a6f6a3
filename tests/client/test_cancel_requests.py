"""A request chosen to be cancelled (--cancel-share) is closed by the client at its point, after a
time or a number of tokens, and recorded as `cancelled` with what it had received; the server
(the simulator, as vLLM) sees the connection close and frees the sequence. With --traceparent every
request carries a W3C `traceparent`, recorded beside its X-Request-Id."""

from __future__ import annotations

import re
import time

import gevent
import orjson
import pytest
from gevent.server import StreamServer
from support.sim_http import call, metric_value

from vllm_load.client.context import LoadContext
from vllm_load.client.endpoint import Endpoint, RequestSpec, Timeouts
from vllm_load.client.request import MeasuredRequest
from vllm_load.sim.child import SimulatorProcess
from vllm_load.workload.cancel import CancelPoint

HEADERS = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
)
TIMEOUTS = Timeouts(connect=1.0, stall=2.0, first_token=2.0, total=5.0)


def event(payload) -> bytes:
    data = b"data: " + (payload if isinstance(payload, bytes) else orjson.dumps(payload)) + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(data), data)


ROLE = event({"choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}]})
TOKEN = event({"choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": None}]})
FINISH = event({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
DONE = event(b"[DONE]") + b"0\r\n\r\n"


def serve(tokens: int, gap: float, seen: list):
    """A stream of `tokens` tokens `gap` s apart; `seen` gets each request's head, then
    "closed" if the client closed the connection before the stream ended."""

    def handle(sock, _address):
        seen.append(sock.recv(65536))
        try:
            sock.sendall(HEADERS + ROLE)
            for _ in range(tokens):
                gevent.sleep(gap)
                sock.sendall(TOKEN)
            sock.sendall(FINISH + DONE)
        except OSError:
            seen.append("closed")
        sock.close()

    server = StreamServer(("127.0.0.1", 0), handle)
    server.start()
    return server


def run(server, cancel: CancelPoint | None, traceparent: str = "") -> MeasuredRequest:
    endpoint = Endpoint(
        f"http://127.0.0.1:{server.server_port}", TIMEOUTS, traced=bool(traceparent)
    )
    t0 = time.perf_counter()
    request = MeasuredRequest(
        endpoint,
        RequestSpec("chat", True, b"{}"),
        "rid-1",
        t0,
        cancel=cancel,
        traceparent=traceparent,
    )
    try:
        gevent.spawn(request.run).get(timeout=10)
    finally:
        endpoint.close()
        server.stop()
    return request


def test_a_stream_is_closed_once_its_tokens_are_in():
    seen: list = []
    request = run(serve(40, 0.02, seen), CancelPoint(None, 5))
    record = request.record("w")
    assert (record.ok, record.error, record.cancel_after) == (0, "cancelled", "5tok")
    assert record.n_chunks == 5 and record.ttft is not None
    assert "after 5 content chunks" in record.error_message
    assert record.e2e < 0.02 * 40 / 2  # closed, not read to its end
    gevent.sleep(0.2)  # the server's next write finds the connection closed
    assert seen[-1] == "closed"


def test_a_request_is_closed_when_its_time_is_up():
    seen: list = []
    request = run(serve(100, 0.02, seen), CancelPoint(0.3, None))
    record = request.record("w")
    assert (record.ok, record.error, record.cancel_after) == (0, "cancelled", "0.300s")
    assert 0.3 <= record.e2e < 1.0 and 3 <= record.n_chunks < 50
    assert record.completion_tokens is None  # (no usage: its tokens so far are n_chunks)


def test_a_chosen_request_that_ends_first_is_a_success_that_names_its_point():
    request = run(serve(3, 0.01, []), CancelPoint(None, 50))
    record = request.record("w")
    assert (record.ok, record.error, record.cancel_after, record.n_chunks) == (1, "", "50tok", 3)


def test_with_traceparent_a_request_carries_a_w3c_traceparent_recorded_beside_its_id():
    seen: list = []
    traceparent = LoadContext.new_traceparent()
    assert re.fullmatch(r"00-[0-9a-f]{32}-[0-9a-f]{16}-01", traceparent)
    assert LoadContext.new_traceparent() != traceparent  # new ids per request
    record = run(serve(2, 0.0, seen), None, traceparent).record("w")
    head = seen[0].decode("latin-1")
    assert f"\r\ntraceparent: {traceparent}\r\n" in head and "\r\nX-Request-Id: rid-1\r\n" in head
    assert (record.traceparent, record.request_id, record.ok) == (traceparent, "rid-1", 1)
    seen.clear()
    plain = run(serve(2, 0.0, seen), None).record("w")
    assert "traceparent" not in seen[0].decode("latin-1").lower() and plain.traceparent == ""


@pytest.mark.parametrize(
    "cancel", [CancelPoint(None, 5), CancelPoint(0.5, None)], ids=["tokens", "time"]
)
def test_the_simulator_frees_what_a_cancelled_stream_held(cancel):
    """4 streams of 1000 tokens (10 s each in real time) closed after 5 tokens or 0.5 s: the
    simulator's running count falls from 4 to 0 at once, each counted as aborted, its KV freed."""
    body = orjson.dumps(
        {
            "model": "sim-llama-8b",
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 1000,
            "ignore_eos": True,
            "stream": True,
        }
    )
    with SimulatorProcess("--max-num-seqs", "8") as sim:
        endpoint_list = [Endpoint(sim.url, TIMEOUTS) for _ in range(4)]
        requests = [
            MeasuredRequest(
                e, RequestSpec("chat", True, body), f"r{i}", time.perf_counter(), cancel=cancel
            )
            for i, e in enumerate(endpoint_list)
        ]
        greenlets = [gevent.spawn(r.run) for r in requests]
        running = []
        deadline = time.monotonic() + 8
        while not all(g.ready() for g in greenlets):
            running.append(metric_value(call(sim.url + "/metrics")[1], "vllm:num_requests_running"))
            assert time.monotonic() < deadline
            gevent.sleep(0.02)
        gevent.joinall(greenlets, raise_error=True)
        for e in endpoint_list:
            e.close()
        assert [r.error for r in requests] == ["cancelled"] * 4
        while metric_value(call(sim.url + "/metrics")[1], "vllm:num_requests_running") != 0:
            assert time.monotonic() < deadline, "the simulator kept generating for closed streams"
            gevent.sleep(0.02)
        metrics = call(sim.url + "/metrics")[1]
    assert max(running) == 4  # (all four were generating before they were closed)
    aborts = [line for line in metrics.splitlines() if 'finished_reason="abort"' in line]
    assert float(aborts[0].rsplit(" ", 1)[1]) == 4
    assert metric_value(metrics, "vllm:kv_cache_usage_perc") == 0


def test_a_whole_response_is_closed_when_its_time_is_up():
    """A non-streamed request cancelled by time: closed while the server still computes."""
    seen: list = []

    def handle(sock, _address):
        seen.append(sock.recv(65536))
        gevent.sleep(1.0)
        try:
            body = b'{"choices": [{"message": {"content": "hi"}}]}'
            sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            gevent.sleep(0.1)
            sock.sendall(b"x")  # (the second write finds the connection closed)
        except OSError:
            seen.append("closed")
        sock.close()

    server = StreamServer(("127.0.0.1", 0), handle)
    server.start()
    endpoint = Endpoint(f"http://127.0.0.1:{server.server_port}", TIMEOUTS)
    request = MeasuredRequest(
        endpoint,
        RequestSpec("chat", False, b"{}"),
        "rid-2",
        time.perf_counter(),
        cancel=CancelPoint(0.2, None),
    )
    try:
        gevent.spawn(request.run).get(timeout=10)
        gevent.sleep(1.2)
    finally:
        endpoint.close()
        server.stop()
    record = request.record("w")
    assert (record.ok, record.error, record.n_chunks, record.stream) == (0, "cancelled", 0, 0)
    assert 0.2 <= record.e2e < 0.9 and seen[-1] == "closed"


def test_locusts_otel_turns_the_traceparent_on():
    """Locust's --otel traces Locust itself: the requests it sends then carry a traceparent too,
    as with --traceparent; without either, none."""
    from types import SimpleNamespace

    from vllm_load.settings import Settings

    assert Settings.from_options(SimpleNamespace(otel=True)).traceparent is True
    assert Settings.from_options(SimpleNamespace(traceparent=True)).traceparent is True
    assert Settings.from_options(SimpleNamespace(otel=False)).traceparent is False
    assert Settings.from_options(SimpleNamespace()).traceparent is False
