"""`request.MeasuredRequest` classifies every outcome into exactly one error category
(docs/run-format.md, `error`), against a local server that answers each case with canned bytes.

tests/test_faults.py covers most categories end to end against the simulator; this covers each
of them, and the time limits, on the unit itself."""

from __future__ import annotations

import errno
import os
import socket
import time

import gevent
import orjson
import pytest
from gevent.server import StreamServer

from vllm_load.client.endpoint import Endpoint, RequestSpec, Timeouts
from vllm_load.client.request import MeasuredRequest
from vllm_load.run_format.histogram import LogHistogram

HEADERS = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
)


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def event(payload) -> bytes:
    data = payload if isinstance(payload, bytes) else orjson.dumps(payload)
    return chunk(b"data: " + data + b"\n\n")


ROLE = event({"choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}]})
TOKEN = event({"choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": None}]})
FINISH = event({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
USAGE = event({"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 2}})
DONE = event(b"[DONE]") + b"0\r\n\r\n"
END = b"0\r\n\r\n"
JSON_OK = orjson.dumps(
    {
        "choices": [{"message": {"content": "hi"}}],
        "usage": {"prompt_tokens": 4, "completion_tokens": 1},
    }
)


def json_response(status: int, body: bytes) -> bytes:
    reason = b"OK" if status == 200 else b"Error"
    return b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
        status,
        reason,
        len(body),
        body,
    )


# what the server does: bytes to send, a float to sleep, "close" to close the connection
CASES = {
    "ok": ([HEADERS, ROLE, TOKEN, TOKEN, FINISH, USAGE, DONE], True, "", ""),
    "http_status": (
        [json_response(503, b'{"error": {"message": "busy"}}')],
        True,
        "http_status",
        "HTTP 503: busy",
    ),
    "connect_no_headers": (
        [5.0],
        True,
        "connect",
        "no connection within 1 s or no response headers within 0.3 s",
    ),
    "timeout_ttft": (
        [HEADERS, ROLE, 0.2, ROLE, 0.2, ROLE, 5.0],
        True,
        "timeout_ttft",
        "no content chunk within 0.5 s",
    ),
    "timeout_ttft_by_stall": ([HEADERS, ROLE, 5.0], True, "timeout_ttft", "no bytes for 0.3 s"),
    "timeout_stall": ([HEADERS, ROLE, TOKEN, 5.0], True, "timeout_stall", "no bytes for 0.3 s"),
    "timeout_total": (
        [HEADERS, ROLE] + [TOKEN, 0.1] * 30,
        True,
        "timeout_total",
        "no complete response within 1 s",
    ),
    "disconnect_reset": ([HEADERS, ROLE, TOKEN, "close"], True, "disconnect", None),
    "disconnect_no_done": (
        [HEADERS, ROLE, TOKEN, FINISH, END],
        True,
        "disconnect",
        "stream ended without data: [DONE]",
    ),
    "bad_sse": ([HEADERS, ROLE, event(b"{oops"), DONE], True, "bad_sse", None),
    "bad_sse_no_content": (
        [HEADERS, ROLE, FINISH, USAGE, DONE],
        True,
        "bad_sse",
        "stream finished without any content chunk",
    ),
    "server_error": (
        [HEADERS, ROLE, event({"error": {"message": "boom"}}), DONE],
        True,
        "server_error",
        "boom",
    ),
    "json_ok": ([json_response(200, JSON_OK)], False, "", ""),
    "json_bad_body": ([json_response(200, b"{oops")], False, "bad_sse", None),
    "json_not_an_object": (
        [json_response(200, b"[1, 2]")],
        False,
        "bad_sse",
        "response body is not a JSON object: b'[1, 2]'",
    ),
    "json_odd_choices": ([json_response(200, b'{"choices": [3], "usage": 7}')], False, "", ""),
    "json_disconnect": ([json_response(200, JSON_OK)[:-5], "close"], False, "disconnect", None),
}
TIMEOUTS = Timeouts(connect=1.0, stall=0.3, first_token=0.5, total=1.0)


def serve(script):
    def handle(sock, _address):
        sock.recv(65536)  # the request (small enough for one read)
        for step in script:
            if step == "close":
                sock.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
                )
                break
            if isinstance(step, float):
                gevent.sleep(step)
            else:
                sock.sendall(step)
        sock.close()

    server = StreamServer(("127.0.0.1", 0), handle)
    server.start()
    return server


def run_case(host: str, stream: bool, timeouts: Timeouts = TIMEOUTS) -> MeasuredRequest:
    endpoint = Endpoint(host, timeouts)
    spec = RequestSpec("chat", stream, b"{}", 4, 2)
    request = MeasuredRequest(endpoint, spec, "test-1", time.perf_counter())
    try:
        gevent.spawn(request.run).get(timeout=10)
    finally:
        endpoint.close()
    return request


@pytest.mark.parametrize("name", list(CASES))
def test_every_outcome_has_one_category(name):
    script, stream, category, message = CASES[name]
    server = serve(script)
    try:
        request = run_case(f"http://127.0.0.1:{server.server_port}", stream)
    finally:
        server.stop()
    assert request.error == category, (request.error, request.message)
    if message is not None:
        assert request.message == message
    record = request.record("w")
    assert record.ok == (category == "") and record.error == category
    assert record.e2e == request.end - request.t0 > 0
    if name == "ok":
        assert record.n_chunks == 2 and record.ttft is not None and record.completion_tokens == 2
    if name == "bad_sse_no_content":  # ended at [DONE], with the usage the stream gave
        assert request.end == request.meter.done_at and record.completion_tokens == 2
    if name == "json_ok":
        assert record.ttft == record.e2e and record.n_chunks == 1


def test_refused_connection_is_connect():
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()  # nothing listens there now
    request = run_case(f"http://127.0.0.1:{port}", True)
    assert request.error == "connect" and request.status == 0


def test_the_first_token_timeout_ends_with_the_first_content_chunk():
    """A content chunk before --ttft-timeout: a later silence is a stall, never a TTFT failure."""
    server = serve([HEADERS, ROLE, TOKEN, 0.35, TOKEN, 0.35, FINISH, DONE])
    try:
        request = run_case(
            f"http://127.0.0.1:{server.server_port}",
            True,
            Timeouts(connect=1.0, stall=5.0, first_token=0.2, total=5.0),
        )
    finally:
        server.stop()
    assert request.ok, request.message
    assert request.record("w").n_chunks == 2


@pytest.mark.parametrize(
    "code, words",
    [
        (errno.EMFILE, "ran out of file descriptors (EMFILE: ulimit -n is"),
        (errno.ENFILE, "fs.file-max"),
        (errno.EADDRNOTAVAIL, "net.ipv4.ip_local_port_range"),
        (errno.ENOBUFS, "no buffer space for another socket (ENOBUFS)"),
    ],
)
def test_a_socket_the_client_cannot_open_is_its_own_limit_not_the_servers(code, words):
    """Out of file descriptors, local ports or socket buffers: `client_limit`, with a message that
    names the limit and how to raise it (it was `disconnect`, blamed on the server)."""
    request = MeasuredRequest(
        Endpoint("http://127.0.0.1:9", TIMEOUTS),
        RequestSpec("chat", True, b"{}", 4, 2),
        "t",
        time.perf_counter(),
    )
    category, message = request._classify(OSError(code, os.strerror(code)))
    assert category == "client_limit" and words in message, message
    assert request._classify(ConnectionResetError(errno.ECONNRESET, "reset"))[0] == "disconnect"


REASON = event({"choices": [{"index": 0, "delta": {"reasoning": "t"}, "finish_reason": None}]})


def run_script(script, stream: bool) -> MeasuredRequest:
    server = serve(script)
    try:
        request = run_case(
            f"http://127.0.0.1:{server.server_port}",
            stream,
            Timeouts(connect=1.0, stall=5.0, first_token=5.0, total=5.0),
        )
    finally:
        server.stop()
    assert request.ok, request.message
    return request


@pytest.mark.parametrize("details", [{"reasoning_tokens": 3}, None])
def test_a_reasoning_stream_records_its_first_answer_token_and_its_split(details):
    """3 reasoning tokens 50 ms apart, 400 ms to the answer's first, then 2 answer tokens: the
    time to the first answer token is TTFT + 0.5 s; the tokens split 3 + 2 (from the server's
    usage, else counted); ITL is per chunk over both parts, the switch's gap one of its 4."""
    usage = {"prompt_tokens": 4, "completion_tokens": 5}
    if details:
        usage["completion_tokens_details"] = details
    script = [HEADERS, ROLE, REASON, 0.05, REASON, 0.05, REASON, 0.4, TOKEN, 0.05, TOKEN]
    request = run_script([*script, FINISH, event({"choices": [], "usage": usage}), DONE], True)
    record = request.record("w")
    assert record.n_chunks == 5 and record.completion_tokens == 5
    assert 0.45 < record.ttfat - record.ttft < 1.0
    assert (record.reasoning_tokens, record.answer_tokens) == (3, 2)
    assert record.reasoning_source == ("usage" if details else "counted")
    gaps = LogHistogram.parse(record.itl_hist)
    assert gaps.total == 4 and record.itl_max > 0.35 and gaps.percentile(75) < 0.3


def test_a_stream_without_reasoning_answers_at_its_ttft():
    record = run_script(CASES["ok"][0], True).record("w")
    assert record.ttfat == record.ttft is not None
    assert (record.reasoning_tokens, record.answer_tokens, record.reasoning_source) == (
        0,
        2,
        "counted",
    )


@pytest.mark.parametrize(
    "message, details, expected",
    [
        ({"content": "hi"}, None, (0, 3, "counted")),
        ({"reasoning": "hmm", "content": "hi"}, {"reasoning_tokens": 2}, (2, 1, "usage")),
        ({"reasoning_content": "hmm", "content": "hi"}, None, (None, None, "")),
        ({"reasoning": None, "content": "hi"}, None, (0, 3, "counted")),
        ({"content": ""}, None, (0, 3, "counted")),  # no text, so no TTFT, and no chunk
    ],
)
def test_a_whole_response_splits_its_tokens_by_its_usage(message, details, expected):
    """No chunks to count: a reply with reasoning text is split only by the server's usage."""
    usage = {"prompt_tokens": 4, "completion_tokens": 3}
    if details:
        usage["completion_tokens_details"] = details
    body = orjson.dumps({"choices": [{"message": message}], "usage": usage})
    record = run_script([json_response(200, body)], False).record("w")
    assert record.ttfat == record.ttft  # the answer came with the whole body: E2E
    assert record.ttft == (record.e2e if message["content"] else None)
    assert (record.reasoning_tokens, record.answer_tokens, record.reasoning_source) == expected


@pytest.mark.parametrize("api", ["chat", "completions"])
@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("api_key", [None, "sk-test"])
def test_a_request_goes_out_as_the_http_client_itself_would_send_it(api, stream, api_key):
    """The head built once per kind of request (`compat.geventhttpclient.PostHead`) carries the
    same request line, header fields and body as geventhttpclient's own `request()` sends."""
    received: list[bytes] = []

    def handle(sock, _address):
        data = b""
        while b"\r\n\r\n" not in data or len(data) < data.index(b"\r\n\r\n") + 4 + len(body):
            data += sock.recv(65536)
        received.append(data)
        sock.sendall(json_response(200, JSON_OK))
        sock.close()

    def head_and_body(raw: bytes) -> tuple[str, set[str], bytes]:
        head, _, rest = raw.partition(b"\r\n\r\n")
        line, *fields = head.decode("latin-1").split("\r\n")
        return line, set(fields), rest

    body = orjson.dumps({"model": "m", "prompt": "é" * 50, "max_tokens": 3})
    server = StreamServer(("127.0.0.1", 0), handle)
    server.start()
    host = f"http://127.0.0.1:{server.server_port}"
    endpoint = Endpoint(host, TIMEOUTS, api_key)
    try:
        request = MeasuredRequest(
            endpoint, RequestSpec(api, stream, body, 4, 2), "abc123-7", time.perf_counter()
        )
        gevent.spawn(request.run).get(timeout=10)
        headers = {**endpoint.headers[stream], "X-Request-Id": "abc123-7"}
        own = endpoint.client.request("POST", endpoint.paths[api], body=body, headers=headers)
        own.read()
    finally:
        endpoint.close()
        server.stop()
    sent, expected = head_and_body(received[0]), head_and_body(received[1])
    assert sent == expected, (sent, expected)
    assert f"Content-Length: {len(body)}" in sent[1] and "X-Request-Id: abc123-7" in sent[1]


@pytest.mark.parametrize("stream", [False, True])
def test_a_record_carries_each_field_in_its_column(stream):
    """Every column of a request's record holds its own value (`record()` passes them in the
    columns' order): the spec's labels, the response's counts and the timings, each distinct."""
    usage = {
        "prompt_tokens": 41,
        "completion_tokens": 2,
        "prompt_tokens_details": {"cached_tokens": 16},
    }
    if stream:
        usage_event = event({"choices": [], "usage": usage})
        script = [HEADERS, ROLE, TOKEN, 0.02, TOKEN, FINISH, usage_event, DONE]
    else:
        body = orjson.dumps({"choices": [{"message": {"content": "hi"}}], "usage": usage})
        script = [json_response(200, body)]
    server = serve(script)
    endpoint = Endpoint(f"http://127.0.0.1:{server.server_port}", TIMEOUTS, name="http://t")
    spec = RequestSpec("chat", stream, b"{}", 40, 3, "Persona", "ask", "conv-1", 5, False, 2, 77, 9)
    t0 = time.perf_counter()
    request = MeasuredRequest(endpoint, spec, "req-7", t0)
    request.queued = 0.25
    try:
        gevent.spawn(request.run).get(timeout=10)
    finally:
        endpoint.close()
        server.stop()
    assert request.ok, request.message
    record = request.record("worker-3")
    e2e = request.end - t0
    assert record.e2e == e2e and record.end_ts == record.start_ts + e2e
    assert record.start_ts == request.start_ts
    ttft = request.meter.chunk_times[0] - t0 if stream else e2e
    assert record.ttft == ttft and record.ttfat == ttft
    fields = {
        "request_id": "req-7",
        "worker": "worker-3",
        "level": -1,
        "users": 0,
        "endpoint": "chat",
        "stream": int(stream),
        "n_chunks": 2 if stream else 1,
        "prompt_tokens": 41,
        "completion_tokens": 2,
        "requested_prompt_tokens": 40,
        "requested_completion_tokens": 3,
        "ok": 1,
        "status": 200,
        "error": "",
        "error_message": "",
        "user_class": "Persona",
        "task": "ask",
        "conversation": "conv-1",
        "turn": 5,
        "cached_tokens": 16,
        "queued_s": 0.25,
        "reasoning_tokens": 0,
        "answer_tokens": 2,
        "images": 2,
        "image_bytes": 77,
        "trace_index": 9,
        "target": "http://t",
    }
    assert {name: getattr(record, name) for name in fields} == fields
    assert record.tpot == e2e - ttft  # (2 tokens: one gap)
    if stream:
        assert record.itl_mean is not None and record.itl_hist and record.chunk_marks
    else:
        assert (record.itl_mean, record.itl_hist, record.chunk_marks) == (None, "", "")
