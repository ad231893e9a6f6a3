"""Mooncake's JSONL traces (kvcache-ai/Mooncake, FAST'25): one JSON object a line,

    {"timestamp": 3052, "input_length": 7234, "output_length": 794, "hash_ids": [0, 28, 29, ...]}

`timestamp`: milliseconds (int or float) since the trace's start; `input_length` and
`output_length`: tokens; `hash_ids`: one id per 512-token block of the prompt, in order, chained
(an id stands for its block and every block before it), so requests that share an id share that
much of their prompt. A prompt has ceil(input_length / 512) blocks: more ids than that is a
damaged line; fewer leaves the blocks after them to that request alone. Other fields are
ignored. A blank line is skipped; anything else that is not such an object is refused.
"""

from __future__ import annotations

from typing import Any

import orjson

from .fields import BadValue, json_time, shown, token_count
from .replay_plan import MOONCAKE_BLOCK_TOKENS, TraceError, TraceLimits
from .rows import Rows

FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")
_BOM = b"\xef\xbb\xbf"
_INT_ONLY = frozenset([int])


def read_mooncake(path: str, limits: TraceLimits) -> Rows:
    """Every request of a Mooncake JSONL file, in file order; `TraceError` on a bad line, or
    one past `limits`."""
    rows = Rows(units_per_second=1000.0, limits=limits)  # milliseconds
    add = rows.add
    number = 0
    with open(path, "rb") as fh:
        for number, line in enumerate(fh, start=1):
            try:
                entry = orjson.loads(line)
            except orjson.JSONDecodeError as e:
                if not line.strip():  # a blank line (tried only when it does not parse)
                    continue
                if number == 1 and line.startswith(_BOM):
                    entry = _loads(path, number, line[len(_BOM) :])
                else:
                    raise _not_json(path, number, e) from None
            # the common line, checked inline (a trace may have millions); any other goes
            # through _request, which converts it or says what is wrong
            try:
                timestamp, prompt = entry["timestamp"], entry["input_length"]
                output, hash_ids = entry["output_length"], entry["hash_ids"]
                plain = (
                    type(timestamp) is int
                    and type(prompt) is int
                    and type(output) is int
                    and prompt > 0
                    and output > 0
                    and type(hash_ids) is list
                    and len(hash_ids) <= -(-prompt // MOONCAKE_BLOCK_TOKENS)
                    and _INT_ONLY.issuperset(map(type, hash_ids))
                )
            except (KeyError, TypeError):
                plain = False
            try:
                if not plain:
                    timestamp, prompt, output, hash_ids = _request(entry)
                add(number, timestamp, prompt, output, tuple(hash_ids))
            except BadValue as e:
                raise TraceError(f"{path}:{number}: {e}") from None
        rows.lines = number
    return rows


def _request(entry: Any) -> tuple[float, int, int, tuple[int, ...]]:
    """A line's request, or `BadValue` saying what is wrong with it."""
    if type(entry) is not dict:
        raise BadValue(f"a line must be a JSON object with {', '.join(FIELDS)}; got {shown(entry)}")
    try:
        timestamp = entry["timestamp"]
        prompt, output = entry["input_length"], entry["output_length"]
        hash_ids = entry["hash_ids"]
    except KeyError as e:
        raise BadValue(
            f'no "{e.args[0]}" field (a Mooncake line has {", ".join(FIELDS)}; '
            "hash_ids may be [] for a prompt that shares nothing)"
        ) from None
    timestamp = json_time(timestamp, "timestamp")
    prompt = token_count(prompt, "input_length", "prompt")
    output = token_count(output, "output_length", "output")
    if type(hash_ids) is not list or not set(map(type, hash_ids)) <= {int}:
        raise BadValue(f'"hash_ids" must be a list of whole numbers, got {shown(hash_ids)}')
    blocks = -(-prompt // MOONCAKE_BLOCK_TOKENS)
    if len(hash_ids) > blocks:
        raise BadValue(
            f"{len(hash_ids)} hash_ids for input_length {prompt}: a prompt of {prompt} tokens has "
            f"{blocks} blocks of {MOONCAKE_BLOCK_TOKENS} (fix the line's input_length or hash_ids)"
        )
    return timestamp, prompt, output, tuple(hash_ids)


def _loads(path: str, number: int, line: bytes) -> Any:
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError as e:
        raise _not_json(path, number, e) from None


def _not_json(path: str, number: int, e: orjson.JSONDecodeError) -> TraceError:
    return TraceError(
        f"{path}:{number}: not valid JSON: {e.msg} (column {e.colno}; a Mooncake trace has one "
        "JSON object a line)"
    )
