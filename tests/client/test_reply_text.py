"""The reply's text, kept for conversations: assembled from the stream once it has ended,
whatever the reads' boundaries, and absent when not asked for (the built-in test's path)."""

from support.sse_chunks import STREAM, chat_chunk

from vllm_load.client.sse import SseMeter


def feed(meter: SseMeter, reads: list[bytes]) -> None:
    buf = bytearray()
    for i, data in enumerate(reads):
        buf += data
        meter.consume(buf, float(i))


def test_text_is_the_content_in_order_across_split_reads():
    whole = b"".join(STREAM)
    reads = [whole[i : i + 7] for i in range(0, len(whole), 7)]  # events cut anywhere
    meter = SseMeter(keep_text=True)
    feed(meter, reads)
    assert meter.done and meter.text() == "Hello world!"
    assert len(meter.chunk_times) == 3  # the role announcement carries no token


def test_text_of_a_fast_burst_in_one_read():
    content = [chat_chunk(content=f"w{i} ") for i in range(300)]  # > the run-count threshold
    stream = [STREAM[0], *content, *STREAM[3:]]
    meter = SseMeter(keep_text=True)
    feed(meter, [stream[0] + stream[1], b"".join(stream[2:])])
    assert meter.text() == "".join(f"w{i} " for i in range(300)) + "!"
    assert len(meter.chunk_times) == 301


def test_only_the_first_choice_is_the_reply():
    second = chat_chunk(content="other").replace(b'"index":0', b'"index":1')
    meter = SseMeter(keep_text=True)
    feed(meter, [STREAM[0], STREAM[1], second, *STREAM[2:]])
    assert meter.text() == "Hello world!"


def test_completions_text_and_no_text_unless_kept():
    events = [
        b'data: {"choices":[{"index":0,"text":"ab","finish_reason":null}]}\n\n',
        b'data: {"choices":[{"index":0,"text":"c","finish_reason":"length"}]}\n\n',
        b"data: [DONE]\n\n",
    ]
    kept, not_kept = SseMeter(chat=False, keep_text=True), SseMeter(chat=False)
    feed(kept, events)
    feed(not_kept, events)
    assert kept.text() == "abc" and not_kept.text() == ""
    assert kept.chunk_times == not_kept.chunk_times and len(kept.chunk_times) == 2
