"""A reply that ends in tool calls (a request that offered `tools`): its calls are assembled from
streamed `delta.tool_calls` fragments by index or read from a whole reply, its fragments are
generated tokens (TTFT and chunk counts), and a malformed call fails its request as one
`bad_tool_call`, never raising out of it."""

from __future__ import annotations

import time

import gevent
import orjson
import pytest
from gevent.server import StreamServer

from vllm_load.client.endpoint import Endpoint, RequestSpec, Timeouts
from vllm_load.client.request import MeasuredRequest
from vllm_load.client.sse import SseMeter
from vllm_load.client.tool_calls import ToolCall, ToolCallError, assemble, from_message

HEADERS = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
)


def event(payload) -> bytes:
    data = b"data: " + (payload if isinstance(payload, bytes) else orjson.dumps(payload)) + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(data), data)


def delta_event(delta: dict, finish=None) -> bytes:
    return event({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})


ROLE = delta_event({"role": "assistant"})
REASON = delta_event({"reasoning": "t"})
FINISH = delta_event({}, "tool_calls")
USAGE = event({"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 5}})
DONE = event(b"[DONE]") + b"0\r\n\r\n"


def json_response(status: int, body: bytes) -> bytes:
    head = b"HTTP/1.1 %d OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
    return head % (status, len(body)) + body


def serve(script: list[bytes]) -> StreamServer:
    """A server that answers one request with these bytes, then closes."""

    def handle(sock, _address):
        sock.recv(65536)
        for step in script:
            sock.sendall(step)
        sock.close()

    server = StreamServer(("127.0.0.1", 0), handle)
    server.start()
    return server


def call_chunk(index, *, call_id=None, name=None, arguments=None, finish=None) -> dict:
    function = {}
    if name is not None:
        function["name"] = name
    if arguments is not None:
        function["arguments"] = arguments
    call = {"index": index, "function": function}
    if call_id is not None:
        call.update(id=call_id, type="function")
    return {"choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": finish}]}


# two calls, their fragments interleaved, as a parser that streams parallel calls may send them
TWO_CALLS = [
    call_chunk(0, call_id="call-a", name="search", arguments=""),
    call_chunk(0, arguments='{"query": "ki'),
    call_chunk(1, call_id="call-b", name="read_file", arguments='{"path"'),
    call_chunk(0, arguments='wi"}'),
    call_chunk(1, arguments=': "/etc/hosts"}', finish="tool_calls"),
]
EXPECTED = [
    ToolCall("call-a", "search", '{"query": "kiwi"}'),
    ToolCall("call-b", "read_file", '{"path": "/etc/hosts"}'),
]


def run_request(script, stream: bool, tools: bool = True) -> MeasuredRequest:
    server = serve(script)
    endpoint = Endpoint(
        f"http://127.0.0.1:{server.server_port}",
        Timeouts(connect=1.0, stall=5.0, first_token=5.0, total=5.0),
    )
    spec = RequestSpec("chat", stream, b"{}", keep_text=True, tools=tools)
    request = MeasuredRequest(endpoint, spec, "test-1", time.perf_counter())
    try:
        gevent.spawn(request.run).get(timeout=10)
    finally:
        endpoint.close()
        server.stop()
    return request


def test_streamed_fragments_are_assembled_by_index_across_split_reads():
    raw = b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in TWO_CALLS)
    buf = bytearray()  # (the body buffer: what a read leaves of a cut event waits for the next)
    meter = SseMeter(keep_text=True)
    for i in range(0, len(raw), 7):  # events cut anywhere
        buf += raw[i : i + 7]
        meter.consume(buf, float(i))
    assert assemble(meter.tool_call_fragments()) == EXPECTED
    assert len(meter.chunk_times) == len(TWO_CALLS)  # every fragment is a generated token
    assert meter.text() == ""


def test_a_stream_of_tool_calls_only_is_a_reply_with_a_ttft():
    script = [HEADERS, ROLE, *(event(c) for c in TWO_CALLS), USAGE, DONE]
    request = run_request(script, stream=True)
    assert request.ok, request.message
    assert request.tool_calls == EXPECTED
    record = request.record("w")
    assert record.tool_calls == 2 and record.n_chunks == len(TWO_CALLS)
    assert record.ttft is not None and record.ttfat == record.ttft


def test_tool_call_fragments_after_reasoning_are_the_answer():
    """A thinking stream counts its reasoning chunks blindly until an answer key: a tool call's
    fragment (no `content`) is the answer's first chunk, not more reasoning."""
    script = [HEADERS, ROLE, REASON, REASON, *(event(c) for c in TWO_CALLS), USAGE, DONE]
    request = run_request(script, stream=True)
    assert request.ok, request.message
    assert request.meter.answer_at == 2
    assert request.tool_calls == EXPECTED


def test_a_whole_reply_with_tool_calls():
    message = {"content": None, "tool_calls": [c.message() for c in EXPECTED]}
    body = orjson.dumps({"choices": [{"message": message}], "usage": {"completion_tokens": 9}})
    request = run_request([json_response(200, body)], stream=False)
    assert request.ok and request.tool_calls == EXPECTED
    record = request.record("w")
    assert record.ttft == record.e2e and record.n_chunks == 1 and record.tool_calls == 2


BAD = {
    "arguments_not_json": (
        [call_chunk(0, call_id="c1", name="search", arguments='{"query": "ki')],
        "arguments that are not JSON",
    ),
    "arguments_not_an_object": (
        [call_chunk(0, call_id="c1", name="search", arguments="[1]")],
        "not a JSON object",
    ),
    "no_id": ([call_chunk(0, name="search", arguments="{}")], "has no id"),
    "no_name": ([call_chunk(0, call_id="c1", arguments="{}")], "names no function"),
}


@pytest.mark.parametrize("case", list(BAD))
@pytest.mark.parametrize("stream", [True, False])
def test_a_malformed_tool_call_is_one_recorded_error(case, stream):
    chunks, words = BAD[case]
    if stream:
        script = [HEADERS, ROLE, *(event(c) for c in chunks), FINISH, USAGE, DONE]
    else:
        calls = [{**c["choices"][0]["delta"]["tool_calls"][0], "index": None} for c in chunks]
        body = orjson.dumps({"choices": [{"message": {"content": None, "tool_calls": calls}}]})
        script = [json_response(200, body)]
    request = run_request(script, stream)
    assert request.error == "bad_tool_call" and words in request.message, request.message
    record = request.record("w")
    assert record.ok == 0 and record.error == "bad_tool_call"


def test_a_request_that_offered_no_tools_reads_no_calls():
    script = [HEADERS, ROLE, *(event(c) for c in BAD["no_id"][0]), USAGE, DONE]
    request = run_request(script, stream=True, tools=False)
    assert request.ok and request.tool_calls == []


def test_whole_message_calls_are_checked():
    assert from_message(None) == [] and from_message([]) == []
    with pytest.raises(ToolCallError, match="not a list"):
        from_message({"id": "x"})
    with pytest.raises(ToolCallError, match="not an object"):
        from_message(["x"])
