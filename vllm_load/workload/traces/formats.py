"""`read_trace(path, format)`: a trace file in one of the published formats as a `Trace`.

`format="auto"` tells the format by the file's first line that is not blank: a JSON object with a
"session" field is an agentic trace (`agentic_sessions.py`), any other JSON object Mooncake's JSONL
(`mooncake.py`), a CSV header with `TIMESTAMP`, `ContextTokens` and
`GeneratedTokens` Azure's, one with `Timestamp`, `Request tokens` and `Response tokens`
BurstGPT's (`tables.py`); the file's name is not looked at. The requests are sorted by time
(rows out of order keep their file order among equal times) and their times rebased so the first
is at 0 s. Every error is a `TraceError` of one line, `FILE:LINE: what is wrong (what to do)`.
"""

from __future__ import annotations

import contextlib
import gc
import operator
import os
from typing import Callable, Iterator

from .agentic_sessions import is_agentic, read_agentic
from .mooncake import read_mooncake
from .replay_plan import Trace, TraceError, TraceLimits, TraceRequest
from .rows import Rows
from .tables import AZURE_COLUMNS, BURSTGPT_COLUMNS, header_names, read_azure, read_burstgpt

TRACE_FORMATS = ("mooncake", "burstgpt", "azure", "agentic")
READERS: dict[str, Callable[[str, TraceLimits], Rows]] = {
    "mooncake": read_mooncake,
    "agentic": read_agentic,
    "burstgpt": read_burstgpt,
    "azure": read_azure,
}


def read_trace(
    path: str | os.PathLike[str], format: str = "auto", limits: TraceLimits = TraceLimits()
) -> Trace:
    """Every request of a trace file, sorted by time from 0 s (formats in the module docstring);
    a line past `limits` is refused as it is read."""
    name = os.fspath(path)
    if format != "auto" and format not in TRACE_FORMATS:
        raise TraceError(
            f"{name}: unknown trace format {format!r} (one of {', '.join(TRACE_FORMATS)}, "
            "or auto to tell it by the file's first line)"
        )
    number, first = _first_line(name)
    found = detect_format(first)
    if format == "auto":
        if found is None:
            raise TraceError(
                f"{name}:{number}: not a trace in a known format: {first[:60]!r} (a Mooncake "
                f"trace's lines are JSON objects; an Azure CSV's header has "
                f"{','.join(AZURE_COLUMNS)}, a BurstGPT CSV's {','.join(BURSTGPT_COLUMNS)})"
            )
        format = found
    elif found is not None and found != format:
        raise TraceError(
            f"{name}:{number}: this is a {found} trace, not {format} (give --trace-format "
            f"{found}, or auto)"
        )
    with _collector_paused():
        rows = READERS[format](name, limits)
        requests = _requests(rows)
    if not requests:
        skipped = f" ({_reasons(rows)})" if rows.skip_reasons else ""
        raise TraceError(
            f"{name}:{rows.lines + 1}: no request in the file{skipped} (a trace needs at least one)"
        )
    return Trace(
        name,
        format,
        requests,
        skip_reasons=dict(rows.skip_reasons),
        notes=_notes(name, rows),
        longest=rows.longest,
    )


def detect_format(line: str) -> str | None:
    """The format a file's first line that is not blank says (None: none we know)."""
    text = line.lstrip("\ufeff").strip()
    if text.startswith("{"):
        return "agentic" if is_agentic(text) else "mooncake"
    names = set(header_names(text))
    if names.issuperset(AZURE_COLUMNS):
        return "azure"
    if names.issuperset(BURSTGPT_COLUMNS):
        return "burstgpt"
    return None


def _first_line(name: str) -> tuple[int, str]:
    """The number and text of the file's first line that is not blank."""
    try:
        with open(name, "rb") as fh:
            for number, line in enumerate(fh, start=1):
                if line.strip():
                    return number, line[:4096].decode("utf-8", "replace")
    except OSError as e:
        raise TraceError(
            f"{name}: cannot read the trace: {e.strerror or e} (give a trace file, or "
            "sample:NAME for a shipped sample)"
        ) from None
    raise TraceError(f"{name}:1: the file is empty (a trace needs at least one request)")


def _requests(rows: Rows) -> tuple[TraceRequest, ...]:
    """The requests sorted by time, stably, the first at 0 s; `index` keeps their file order."""
    times, per_second = rows.times, rows.units_per_second
    if not times:
        return ()
    order: range | list[int] = range(len(times))
    if any(map(operator.gt, times, times[1:])):  # out of order: sort (stable: ties keep order)
        order = sorted(order, key=times.__getitem__)
    first = times[order[0]]
    prompts, outputs, ids = rows.prompts, rows.outputs, rows.hash_ids
    if rows.sessions:  # an agentic trace: each request opens a session
        sessions = rows.sessions
        return tuple(
            TraceRequest(
                (times[i] - first) / per_second, prompts[i], outputs[i], ids[i], i, sessions[i]
            )
            for i in order
        )
    return tuple(
        [
            TraceRequest((times[i] - first) / per_second, prompts[i], outputs[i], ids[i], i)
            for i in order
        ]
    )


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """No cyclic garbage collection while a trace is read: a trace may be millions of small
    containers, every few hundred of them would start a collection that walks those read so far,
    and they hold no cycles to find."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _notes(name: str, rows: Rows) -> tuple[str, ...]:
    """What a log says about the reading: times before the trace's start (a Mooncake or
    BurstGPT time counts from it), which the rebasing shifts."""
    line, count = rows.negative
    if not count:
        return ()
    number = next(t for t in rows.times if t < 0)  # the first line's, in file order
    return (
        f"{name}:{line}: timestamp {number:g} is before the trace's start ({count} such "
        f"line{'s' if count > 1 else ''}): every request is shifted "
        f"{-rows.low / rows.units_per_second:g} s later so that the earliest is at 0 s",
    )


def _reasons(rows: Rows) -> str:
    return ", ".join(f"{n} rows {why}" for why, n in sorted(rows.skip_reasons.items()))
