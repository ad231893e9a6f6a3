"""SSE framing and chunk timing: split events, merged events, role-only and usage chunks."""

import orjson
import pytest
from support.sse_chunks import STREAM, chat_chunk

from vllm_load.client.sse import SseMeter, StreamError, chunk_summary, itl_summary


def feed(meter: SseMeter, pieces, times):
    buf = bytearray()
    for piece, now in zip(pieces, times):
        buf += piece
        meter.consume(buf, now)
    return buf


def test_one_event_per_read_role_chunk_is_not_content():
    meter = SseMeter()
    buf = feed(meter, STREAM, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    assert meter.chunk_times == [2.0, 3.0, 4.0]  # the role-only chunk at 1.0 is not the first token
    assert meter.usage["completion_tokens"] == 3
    assert meter.finish_reason == "length"
    assert meter.done and not buf
    assert meter.done_at == 6.0  # the end of a stream is the read that brought [DONE]


def test_done_is_dated_by_the_read_that_completed_it_once():
    meter = SseMeter()
    done = STREAM[-1]
    pieces = [*STREAM[:-1], done[:5], done[5:], b": keep-alive\n\n", done]
    buf = feed(meter, pieces, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0])
    assert meter.done_at == 7.0 and not buf


def test_events_split_across_reads_get_the_time_they_complete():
    whole = b"".join(STREAM)
    pieces = [whole[i : i + 7] for i in range(0, len(whole), 7)]
    meter = SseMeter()
    feed(meter, pieces, [float(i) for i in range(len(pieces))])
    assert len(meter.chunk_times) == 3
    assert meter.chunk_times == sorted(meter.chunk_times)
    # each content event is stamped with the read that completed it
    ends = []
    pos = 0
    for event in STREAM:
        pos += len(event)
        ends.append((pos - 1) // 7)
    assert meter.chunk_times == [float(ends[1]), float(ends[2]), float(ends[3])]
    assert meter.done and meter.usage["prompt_tokens"] == 7


def test_merged_events_in_one_read_share_its_timestamp():
    meter = SseMeter()
    feed(meter, [b"".join(STREAM[:3]), b"".join(STREAM[3:])], [1.5, 2.5])
    assert meter.chunk_times == [1.5, 1.5, 2.5]
    assert meter.done


def test_crlf_framing_and_comments():
    meter = SseMeter()
    text = b": keep-alive\r\n\r\n" + b"".join(e.replace(b"\n\n", b"\r\n\r\n") for e in STREAM)
    feed(meter, [text], [1.0])
    assert len(meter.chunk_times) == 3 and meter.done


def test_completions_stream_uses_text():
    meter = SseMeter(chat=False)

    def event(text, finish=None):
        choice = {"index": 0, "text": text, "finish_reason": finish}
        return (
            b"data: " + orjson.dumps({"object": "text_completion", "choices": [choice]}) + b"\n\n"
        )

    feed(meter, [event("a"), event("b"), event("", "length"), b"data: [DONE]\n\n"], [1, 2, 3, 4])
    assert meter.chunk_times == [1, 2, 3]  # vLLM's last token may have no text of its own yet


def test_a_first_token_without_text_is_the_first_token():
    """vLLM's detokenizer holds back a token that is part of a multi-byte character and streams
    it as empty content: the token exists (vLLM's TTFT is dated by it, usage counts it), so the
    first chunk is dated by it, not by the next token, which can come a whole prefill later."""
    meter = SseMeter()
    stream = [
        chat_chunk(role="assistant", content=""),
        chat_chunk(content=""),
        chat_chunk(content="\ufffd code"),
        chat_chunk(content="", finish="length"),
        chat_chunk(
            choices=False, usage={"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}
        ),
    ]
    feed(meter, stream, [1.0, 1.0, 2.5, 2.6, 2.6])
    assert meter.chunk_times == [1.0, 2.5, 2.6]  # as many chunks as completion tokens


def test_a_closing_chunk_without_a_text_field_is_not_a_token():
    """OpenAI ends a chat stream with `"delta": {}` and a finish reason: no token in it."""
    meter = SseMeter()
    feed(
        meter,
        [
            chat_chunk(role="assistant", content="Hi"),
            chat_chunk(finish="stop"),
            b"data: [DONE]\n\n",
        ],
        [1, 2, 3],
    )
    assert meter.chunk_times == [1]


def test_error_event_and_bad_json_raise_categorised_errors():
    with pytest.raises(StreamError) as err:
        feed(SseMeter(), [b'data: {"error": {"message": "boom", "code": 500}}\n\n'], [1.0])
    assert err.value.category == "server_error" and "boom" in err.value.message
    with pytest.raises(StreamError) as err:
        feed(SseMeter(), [b"data: {not json\n\n"], [1.0])
    assert err.value.category == "bad_sse"


def test_itl_summary_per_chunk_gaps():
    mean, p50, p90, p99, top, hist = itl_summary([0.0, 0.01, 0.02, 0.03, 0.13])
    assert mean == pytest.approx(0.0325)
    assert p50 == pytest.approx(0.01)
    assert p99 == pytest.approx(0.1) and top == pytest.approx(0.1)
    assert sum(int(x.split(":")[1]) for x in hist.split(";")) == 4
    assert itl_summary([1.0]) == (None, None, None, None, None, "")


def test_chunks_that_share_a_date_are_merged_every_one_of_them():
    assert chunk_summary([0.0, 0.01, 0.02, 0.03])[6] == 0
    assert (
        chunk_summary([0.0, 0.01, 0.01, 0.01, 0.02, 0.03, 0.03])[6] == 5
    )  # a run of 3 and a run of 2
    assert chunk_summary([0.5, 0.5])[6] == 2
    assert chunk_summary([0.5])[6] == 0 and chunk_summary([])[6] == 0


def _long_stream(n: int, crlf: bool, spaced: bool, comment_every: int) -> list[bytes]:
    """role chunk, n content chunks (a comment every `comment_every`; the last one finishes), usage, [DONE]."""
    import json

    def encode(event: bytes) -> bytes:
        if spaced:  # a server that writes JSON with Python's default separators
            event = b"data: " + json.dumps(orjson.loads(event[6:])).encode() + b"\n\n"
        return event.replace(b"\n\n", b"\r\n\r\n") if crlf else event

    events = [encode(chat_chunk(role="assistant", content=""))]
    for i in range(n):
        events.append(encode(chat_chunk(content=f"t{i} ", finish="length" if i == n - 1 else None)))
        if comment_every and i % comment_every == comment_every - 1:
            events.append(b": keep-alive\r\n\r\n" if crlf else b": keep-alive\n\n")
    events.append(
        encode(
            chat_chunk(
                choices=False,
                usage={"prompt_tokens": 5, "completion_tokens": n, "total_tokens": n + 5},
            )
        )
    )
    events.append(b"data: [DONE]\r\n\r\n" if crlf else b"data: [DONE]\n\n")
    return events


@pytest.mark.parametrize("crlf", [False, True])
@pytest.mark.parametrize("spaced", [False, True])
@pytest.mark.parametrize("comment_every", [0, 97])
@pytest.mark.parametrize("read_size", [7, 300, 4096, 65536])
def test_bursts_stamp_every_chunk_with_the_read_that_completed_it(
    crlf, spaced, comment_every, read_size
):
    """Whatever the read size, each content chunk gets the time of the read that completed it.

    Long reads go through the counting fast path (a whole response in one read, as from a
    fast server); the answer must be the one an event-by-event walk gives.
    """
    events = _long_stream(600, crlf, spaced, comment_every)
    whole = b"".join(events)
    pieces = [whole[i : i + read_size] for i in range(0, len(whole), read_size)]
    meter = SseMeter()
    buf = feed(meter, pieces, [float(i) for i in range(len(pieces))])
    expected, pos = [], 0
    for event in events:
        pos += len(event)
        if b'"t' in event and b"usage" not in event:  # a content chunk ("t0 ", "t1 ", ...)
            expected.append(float((pos - 1) // read_size))
    assert meter.chunk_times == expected
    assert (
        meter.done and meter.usage["completion_tokens"] == 600 and meter.finish_reason == "length"
    )
    assert not buf


def test_an_error_event_inside_a_burst_is_not_counted_as_content():
    events = _long_stream(300, False, False, 0)
    error = b'data: {"error":{"message":"engine died","type":"InternalServerError","code":500}}\n\n'
    burst = b"".join(events[:200]) + error + b"".join(events[200:])
    meter = SseMeter()
    with pytest.raises(StreamError) as caught:
        feed(meter, [b"".join(events[:3]), burst[len(b"".join(events[:3])) :]], [1.0, 2.0])
    assert caught.value.category == "server_error"
    assert len(meter.chunk_times) == 199  # the chunks before the error, none after


def test_chunks_completed_by_one_read_are_counted_as_merged():
    meter = SseMeter()
    content = [chat_chunk(content=f"t{i}") for i in range(6)]
    # the role chunk alone, then three content chunks in one read, one alone, two split so that
    # one read completes both, then the end
    pieces = [
        STREAM[0],
        b"".join(content[:3]),
        content[3],
        content[4] + content[5][:9],
        content[5][9:],
        b"".join(STREAM[3:]),
    ]
    feed(meter, pieces, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    assert meter.chunk_times == [2.0, 2.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    assert (
        chunk_summary(meter.chunk_times)[6] == 3
    )  # the read at 2.0; the one at 4.0 completed one chunk only


def test_a_burst_read_counts_every_chunk_in_it_as_merged():
    meter = SseMeter()
    feed(meter, [STREAM[0], chat_chunk(content="a")], [1.0, 2.0])  # learns the mid-stream marker
    burst = b"".join(
        chat_chunk(content="x" * 20) for _ in range(200)
    )  # > _RUN_MIN_BYTES: counted in one pass
    feed(meter, [burst], [3.0])
    assert len(meter.chunk_times) == 201 and chunk_summary(meter.chunk_times)[6] == 200
