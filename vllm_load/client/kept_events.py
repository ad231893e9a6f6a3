"""The events of a reply a meter kept (`sse.SseMeter(keep_text=True)`), read once the stream
has ended: the first choice of each, the one a conversation takes as its reply."""

from __future__ import annotations

from typing import Iterator

import orjson

_DATA = b"data:"
_DONE = (b"data: [DONE]", b"data:[DONE]")


def first_choices(raw: bytearray | None, sep: bytes, chat: bool) -> Iterator[dict]:
    """The first choice's delta (a completion's choice) of every kept event, in order; `sep`
    is what ends an event in this stream."""
    for event in bytes(raw).split(sep) if raw else ():
        for line in event.splitlines():
            if not line.startswith(_DATA) or line.startswith(_DONE):
                continue
            try:
                message = orjson.loads(line[5:])
            except orjson.JSONDecodeError:
                continue
            for choice in (message.get("choices") or ()) if isinstance(message, dict) else ():
                if isinstance(choice, dict) and choice.get("index", 0) == 0:
                    source = choice.get("delta") if chat else choice
                    if isinstance(source, dict):
                        yield source
