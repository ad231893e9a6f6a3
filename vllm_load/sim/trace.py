"""The simulator's record of when it actually wrote each token: the ground truth for timing tests.

A fixed-latency simulator promises a first token `ttft` after a request and one more every
`itl`, but its timers fire late now and then, and a late server looks exactly like a slow
client from the client's side. With `--trace FILE` every generation request leaves one JSON
line in FILE saying when the server really did things, in wall-clock seconds (`time.time()`,
the clock vllm-load's `start_ts` uses, shared by every process on the machine):

    {"id": "...", "received": t, "tokens": [t1, t2, ...], "end": t, "cached_tokens": n}

`id` is the request's `X-Request-Id` header when it had one (vllm-load sends its record's
`request_id` there, so a trace line joins a requests.csv row), else the response id.
`received` is when the handler began, `tokens` the time each output token's bytes were about
to be written to the socket (tokens sent in one write share a time), `end` when `data: [DONE]` was (stamped just before the
write, so a client can never see the bytes earlier than their stamp). `cached_tokens` is how
many of the prompt's tokens the prefix cache spared it (0 without a hit, or outside engine mode).
Lines are appended in whole-line writes (one `write()` per batch, `O_APPEND`), so several
simulator processes can share one file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import orjson

_FLUSH_BYTES = 64 * 1024


@dataclass(slots=True)
class TraceRecord:
    """What the server did for one request (wall-clock seconds)."""

    id: str
    received: float
    tokens: list[float]
    end: float
    cached_tokens: int = 0


class TraceWriter:
    """Appends `TraceRecord`s to a JSON-lines file, in batches."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._pending: list[bytes] = []
        self._size = 0

    def write(self, record: TraceRecord) -> None:
        line = orjson.dumps(record) + b"\n"
        self._pending.append(line)
        self._size += len(line)
        if self._size >= _FLUSH_BYTES:
            self.flush()

    def flush(self) -> None:
        if self._pending:
            os.write(self._fd, b"".join(self._pending))
            self._pending.clear()
            self._size = 0

    def close(self) -> None:
        if self._fd >= 0:
            self.flush()
            os.close(self._fd)
            self._fd = -1


def read_trace(path: str) -> dict[str, TraceRecord]:
    """Every record in a trace file, by id (a torn last line, from a killed server, is skipped)."""
    out: dict[str, TraceRecord] = {}
    with open(path, "rb") as fh:
        for line in fh:
            try:
                raw = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            out[raw["id"]] = TraceRecord(
                raw["id"], raw["received"], raw["tokens"], raw["end"], raw.get("cached_tokens", 0)
            )
    return out
