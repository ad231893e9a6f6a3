"""Measuring one streamed response: SSE event framing, chunk timestamps, usage, reasoning.

`SseMeter.consume(buffer, now)` is called after every socket read with the decoded body
bytes received so far and the `perf_counter()` time of that read. It takes every complete
SSE event out of the buffer (events may be split across reads, and one read may carry
many), timestamps content chunks (those that carry a generated token, even one whose text is
still empty), and keeps what the end of the stream says (usage,
errors, `[DONE]`). Content chunks completed by the same read share its date: they cannot be
dated apart, and `chunk_summary` counts them once the stream has ended (nothing is counted
per chunk or per read).

A reasoning model served with a reasoning parser streams its thinking as `reasoning` (vLLM's
newer name) or `reasoning_content` deltas before the answer's `content` deltas. Those are
content chunks too (generated tokens: TTFT and ITL are over all of them, as vLLM's own are);
`answer_at` is the index in `chunk_times` of the first *answer* chunk (None until one came): the
first whose delta carries `content` text, or empty `content` and no reasoning text (a held-back
character of the answer). The chunks before it are reasoning.

This is the hottest path in the project. Only the first events (until content starts),
the last ones (finish reason, usage) and error events are JSON-parsed; a mid-stream
content chunk is recognised by `"finish_reason":null` and costs a couple of byte searches.
Until the answer starts, a mid-stream chunk costs one byte search more (for `"content"`); from
the first answer chunk on, nothing: a stream without reasoning pays it for no chunk (its first
content chunk is parsed anyway).
"""

from __future__ import annotations

import numpy as np
import orjson

from ..run_format.histogram import format_sorted
from .kept_events import first_choices

_DONE = b"data: [DONE]"
_DONE_NOSPACE = b"data:[DONE]"
_DATA = b"data:"
_MID_STREAM = b'"finish_reason":null'
_MID_STREAM_SPACED = b'"finish_reason": null'
_RUN_MIN_BYTES = 2048
# an answer's key: until the answer starts, a mid-stream event without it is a reasoning chunk
# (vLLM writes a reasoning delta with its reasoning key alone) and one with it is parsed, to tell
# a reasoning delta beside a null or empty content (other servers, logprobs' "content") from the
# answer's first. Inside a JSON string a quote is escaped, so this never matches text.
_CONTENT = b'"content"'
# a tool call's key: its fragments are answer chunks too (a reply that ends in tool calls may
# carry no content at all), so a thinking stream stops counting blindly at either key
_TOOL_CALLS = b'"tool_calls"'


class StreamError(Exception):
    """The stream broke the protocol or carried an error; `category` names which."""

    def __init__(self, category: str, message: str) -> None:
        super().__init__(message)
        self.category = category
        self.message = message


_TEXT_KEYS = ("content", "reasoning_content", "reasoning")


def _carries_token(choice: dict, chat: bool) -> bool:
    """Whether a choice carries a generated token: it has text, or its text field is present but
    empty and it is not the chat stream's role announcement. A token whose bytes do not yet make
    a character (part of a multi-byte character, held back by the server's detokenizer) arrives
    as empty text, and it is a token all the same: vLLM dates its TTFT by it and counts it in
    `completion_tokens`."""
    if not chat:
        return isinstance(choice.get("text"), str)
    delta = choice.get("delta") or {}
    if delta.get("tool_calls"):  # a fragment of a tool call: generated tokens, not text
        return True
    texts = [delta.get(key) for key in _TEXT_KEYS if isinstance(delta.get(key), str)]
    return any(texts) or (bool(texts) and "role" not in delta)


def _is_reasoning(choice: dict) -> bool:
    """Whether a chat choice that carries a token is thinking, not answering: it holds reasoning
    text (a string, even empty: a held-back character of the thinking) and no answer text."""
    delta = choice.get("delta") or {}
    content = delta.get("content")
    if (isinstance(content, str) and content) or delta.get("tool_calls"):
        return False  # (a chunk that holds the end of the thinking and the answer's start)
    return isinstance(delta.get("reasoning"), str) or isinstance(
        delta.get("reasoning_content"), str
    )


def _answer_key(buf: bytearray, start: int, end: int) -> int:
    """Where the first answer key (content or tool calls) is in buf[start:end]; -1: none."""
    content, tools = buf.find(_CONTENT, start, end), buf.find(_TOOL_CALLS, start, end)
    if content < 0 or tools < 0:
        return max(content, tools)
    return min(content, tools)


class SseMeter:
    """Timestamps the content chunks of one SSE stream and collects its final usage."""

    __slots__ = (
        "chat",
        "chunk_times",
        "usage",
        "done_at",
        "finish_reason",
        "answer_at",
        "_sep",
        "_started",
        "_mid",
        "_thinking",
        "_raw",
    )

    def __init__(self, chat: bool = True, keep_text: bool = False) -> None:
        self.chat = chat
        self.chunk_times: list[float] = []
        self.usage: dict | None = None
        self.done_at: float | None = None  # the time of the read that brought `data: [DONE]`
        self.finish_reason: str | None = None
        self.answer_at: int | None = None  # index in chunk_times of the first answer chunk
        self._sep = b"\n\n"
        self._started = False
        self._mid: bytes | None = None  # how this server writes a mid-stream chunk's finish_reason
        self._thinking: bytes | None = None  # that marker instead, while the stream is thinking
        # with keep_text, the events as they came: parsed for their text only once the stream has
        # ended, so that keeping the text costs the per-chunk path a copy, not a JSON parse
        self._raw: bytearray | None = bytearray() if keep_text else None

    @property
    def done(self) -> bool:
        return self.done_at is not None

    @property
    def first_chunk_time(self) -> float | None:
        return self.chunk_times[0] if self.chunk_times else None

    def consume(self, buf: bytearray, now: float) -> None:
        """Take every complete event out of `buf` (in place), timestamped `now`."""
        if not self._started:  # the first line end tells how the server frames events
            first_line = buf.find(b"\n")
            if first_line < 0:
                return
            if first_line > 0 and buf[first_line - 1] == 13:
                self._sep = b"\r\n\r\n"
            self._started = True
        # a read of a few events is walked; a long one (a fast server's burst) is counted first
        mid = self._mid
        if mid is not None:
            start = self._consume_content_run(buf, now, mid) if len(buf) > _RUN_MIN_BYTES else 0
        elif self._thinking is not None:
            start = self._consume_thinking(buf, 0, now)
            mid = self._mid
        else:
            start = 0
        sep = self._sep
        sep_len = len(sep)
        times = self.chunk_times
        while True:
            end = buf.find(sep, start)
            if end < 0:
                break
            if mid is not None and buf.find(mid, start, end) >= 0:
                times.append(now)
                start = end + sep_len
            else:
                self._slow_event(buf, start, end, now)
                start = end + sep_len
                mid = self._mid
                if mid is None and self._thinking is not None:  # the first token: thinking
                    start = self._consume_thinking(buf, start, now)
                    mid = self._mid
        if start:
            if self._raw is not None:
                self._raw += buf[:start]
            del buf[:start]

    def text(self) -> str:
        """The generated text of the events consumed so far (chat `content`, or a completion's
        `text`), in order; empty unless the meter was made with `keep_text`."""
        key = "content" if self.chat else "text"
        pieces = (source.get(key) for source in first_choices(self._raw, self._sep, self.chat))
        return "".join(piece for piece in pieces if isinstance(piece, str))

    def tool_call_fragments(self) -> list:
        """The `delta.tool_calls` fragments of the events consumed so far, in order (for
        `tool_calls.assemble`); empty unless the meter was made with `keep_text`."""
        fragments: list = []
        for source in first_choices(self._raw, self._sep, self.chat):
            if isinstance(source.get("tool_calls"), list):
                fragments.extend(source["tool_calls"])
        return fragments

    def _consume_content_run(self, buf: bytearray, now: float, mid: bytes) -> int:
        """Count the run of mid-stream content chunks at the head of `buf` in one pass.

        A fast server's whole response can arrive in one read: hundreds of events that differ
        only in their text. Up to the last event holding the mid-stream marker, if every event
        holds it once, they are all content chunks and need no event-by-event walk. Returns
        where the walk has to go on (0: nothing was taken).
        """
        sep = self._sep
        last_mid = buf.rfind(mid)
        if last_mid < 0:
            return 0
        end = buf.find(sep, last_mid)
        if end < 0:
            end = buf.rfind(sep, 0, last_mid)
            if end < 0:
                return 0
        events = buf.count(sep, 0, end) + 1
        if buf.count(mid, 0, end) != events:
            return 0  # something else (a comment, an error) sits among them: walk event by event
        if self.answer_at is None:  # still thinking: count up to the first event to be parsed
            content = _answer_key(buf, 0, end)
            if content >= 0:
                end = buf.rfind(sep, 0, content)
                if end < 0:
                    return 0
                events = buf.count(sep, 0, end) + 1
        self.chunk_times.extend([now] * events)
        return end + len(sep)

    def _consume_thinking(self, buf: bytearray, start: int, now: float) -> int:
        """Walk the events from `start` until the answer starts (a long read's run of reasoning
        chunks counted first); returns where the walk stopped: after the answer's first chunk
        (the meter then has its `_mid` and the plain walk goes on), or at the first incomplete
        event. The plain walk holds no test for reasoning, so its chunks pay nothing for it."""
        mid = self._thinking
        assert mid is not None  # (called only while thinking)
        if not start and len(buf) > _RUN_MIN_BYTES:
            start = self._consume_content_run(buf, now, mid)
        sep = self._sep
        sep_len = len(sep)
        times = self.chunk_times
        while True:
            end = buf.find(sep, start)
            if end < 0:
                break
            if buf.find(mid, start, end) >= 0 and _answer_key(buf, start, end) < 0:
                times.append(now)  # a reasoning delta, as vLLM writes it
                start = end + sep_len
            else:
                self._slow_event(buf, start, end, now)
                start = end + sep_len
                if self._mid is not None:  # the answer started
                    break
        return start

    def _slow_event(self, buf: bytearray, start: int, end: int, now: float) -> None:
        """An event that needs a closer look: before content, done, finish, usage or error."""
        if buf.startswith(_DONE, start) or buf.startswith(_DONE_NOSPACE, start):
            if self.done_at is None:
                self.done_at = now
            return
        event = bytes(buf[start:end])
        payload = None
        for line in event.splitlines():
            if line.startswith(_DATA):
                payload = line[5:].strip()
        if payload is None:  # comment, keep-alive or an event without data
            return
        try:
            message = orjson.loads(payload)
        except orjson.JSONDecodeError:
            raise StreamError("bad_sse", f"unparseable SSE data: {payload[:120]!r}") from None
        if not isinstance(message, dict):
            raise StreamError("bad_sse", f"SSE data is not an object: {payload[:120]!r}")
        if "error" in message and not message.get("choices"):
            error = message["error"]
            text = error.get("message", str(error)) if isinstance(error, dict) else str(error)
            raise StreamError("server_error", str(text)[:300])
        if message.get("usage"):
            self.usage = message["usage"]
        for choice in message.get("choices") or ():
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
            if _carries_token(choice, self.chat):
                if self.answer_at is None and not (self.chat and _is_reasoning(choice)):
                    self.answer_at = len(self.chunk_times)
                    if self._thinking is not None:  # the answer after thinking: the plain walk
                        self._mid, self._thinking = self._thinking, None
                self.chunk_times.append(now)
                if self._mid is None and self._thinking is None and not choice.get("finish_reason"):
                    marker = (
                        _MID_STREAM
                        if _MID_STREAM in event
                        else _MID_STREAM_SPACED
                        if _MID_STREAM_SPACED in event
                        else None
                    )
                    if self.answer_at is None:
                        self._thinking = marker
                    else:
                        self._mid = marker


def itl_summary(chunk_times: list[float]) -> tuple[float | None, ...]:
    """(mean, p50, p90, p99, max, histogram) of the gaps between consecutive content chunks."""
    return chunk_summary(chunk_times)[:6]


def chunk_summary(chunk_times: list[float]) -> tuple:
    """(mean, p50, p90, p99, max, histogram) of the gaps between consecutive content chunks, and
    how many chunks share their date with another (`merged`).

    Percentiles are by nearest rank. Vectorised: a 512-chunk stream costs ~25 µs here instead
    of ~120–240 µs in plain Python, which matters because closed-loop users at one speed finish
    their requests together, and this runs for each of them in that burst.

    A read dates every chunk it completes alike, and a read the kernel dated no later than the
    one before takes that one's date, so equal dates are chunks that could not be dated apart:
    the reader was late by a gap or more. Counted here, after the stream, from the zero gaps
    (free when there are none), instead of on the per-read path.
    """
    if len(chunk_times) < 2:
        return None, None, None, None, None, "", 0
    times = np.fromiter(
        chunk_times, np.float64, len(chunk_times)
    )  # (np.array() first infers a dtype: 2x slower)
    gaps = times[1:] - times[:-1]
    n = len(gaps)
    mean = float(gaps.sum()) / n
    gaps.sort()
    p50, p90, p99 = gaps[
        [-(-n * q // 100) - 1 for q in (50, 90, 99)]
    ].tolist()  # nearest ranks, from 1
    merged = 0
    if gaps[0] <= 0.0:  # some chunks share a date: count every chunk of every run of equal dates
        same = times[1:] == times[:-1]
        merged = int(
            np.count_nonzero(np.concatenate(([False], same)) | np.concatenate((same, [False])))
        )
    return mean, p50, p90, p99, float(gaps[-1]), format_sorted(gaps), merged


#: checkpoints per request: the times of evenly spaced chunks, so that a window can count the
#: tokens a request got inside it even when its stream stalled (other requests' prefills)
CHUNK_MARKS = 16


def chunk_marks(chunk_times: list[float], t0: float) -> str:
    """The arrival times (ms after `t0`) of chunks 0, n/M, 2n/M, ..., n-1 (M = min(CHUNK_MARKS,
    n - 1) segments of equal chunk counts), `;`-joined; empty with fewer than 2 chunks."""
    n = len(chunk_times)
    if n < 2:
        return ""
    segments = min(CHUNK_MARKS, n - 1)
    return ";".join(
        f"{(chunk_times[round(k * (n - 1) / segments)] - t0) * 1000:.1f}"
        for k in range(segments + 1)
    )


#: where a record's `reasoning_tokens` came from: the server's usage, or the client's count
REASONING_FROM_USAGE, REASONING_COUNTED = "usage", "counted"


def split_completion(
    usage: dict | None, completion_tokens: int | None, reasoning_chunks: int | None, n_chunks: int
) -> tuple[int | None, int | None, str]:
    """(reasoning tokens, answer tokens, where the first came from) of a response's completion
    tokens; None where unknown, "" as the source of an unknown count.

    The server's `usage.completion_tokens_details.reasoning_tokens` when it sends one (but not a 0
    beside reasoning chunks: a count the stream contradicts); else the
    `reasoning_chunks` received (None: cannot tell) times the stream's tokens per chunk,
    `completion_tokens / n_chunks` rounded, at least 1 (1 without usage). That is 1 on vLLM, which
    streams each token in its own chunk, with a reasoning parser too: it sends no chunk for a
    delta that is only `<think>` or `</think>`, so the answer's count holds those markers.
    """
    details = usage.get("completion_tokens_details") if isinstance(usage, dict) else None
    served = details.get("reasoning_tokens") if isinstance(details, dict) else None
    if not isinstance(served, int) or isinstance(served, bool) or served < 0:
        served = None  # (not a count)
    elif served == 0 and reasoning_chunks:
        # vLLM (0.32) counts reasoning from a generated `<think>`: when the chat template opens
        # the thinking (DeepSeek-R1's, GLM's), it says 0 however long the stream thought
        # (vllm#49743); a 0 beside reasoning chunks is that miscount: the chunks are counted
        served = None
    if served is not None:
        reasoning, source = served, REASONING_FROM_USAGE
    elif reasoning_chunks is None:
        return None, None, ""
    else:
        per_chunk = 1
        if completion_tokens and n_chunks:
            per_chunk = max(1, round(completion_tokens / n_chunks))
        reasoning, source = reasoning_chunks * per_chunk, REASONING_COUNTED
        if completion_tokens is not None:
            reasoning = min(reasoning, completion_tokens)
    if completion_tokens is None or completion_tokens < reasoning:
        return reasoning, None, source
    return reasoning, completion_tokens - reasoning, source
