"""Agentic JSONL traces (docs/traces.md): one JSON object a line, one turn of a session each,

    {"session": "a1", "turn": 0, "timestamp": 0, "input_length": 900, "output_length": 40}
    {"session": "a1", "turn": 1, "timestamp": 2100, "input_length": 1400, "output_length": 32,
     "tool_latency_ms": 850}
    {"session": "a1.s0", "parent": "a1", "parent_turn": 1, "turn": 0, "timestamp": 3400,
     "input_length": 300, "output_length": 24}

`session`: the session's id (a string); `turn`: its turns from 0, each once and in order;
`timestamp`: ms from the trace's start that the turn was sent; `input_length`, `output_length`:
its prompt (the whole history) and output, in tokens; `tool_latency_ms` (default 0): how long
the session waited before the turn, from the end of its turn before (a subagent's first turn:
from the end of its parent's turn). A subagent session's first line names its `parent` session
and the `parent_turn` (default: the parent's last turn so far) it fans out from; both must be
on earlier lines. The replay sends a top-level session's first turn at its timestamp; every
other turn when the one it follows has ended, plus its tool latency; a turn that fans out
subagents is followed when they have all ended. A line that names an unknown parent, or a turn
of a session never opened, or out of order, is refused with its line number.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Iterator

import orjson

from .fields import BadValue, json_time, shown, token_count
from .replay_plan import TraceError, TraceLimits
from .rows import Rows

FIELDS = ("session", "turn", "timestamp", "input_length", "output_length")
OPTIONAL = ("parent", "parent_turn", "tool_latency_ms")


@dataclass
class TurnPlan:
    """One turn of a session to replay: its lengths, the seconds to wait before it (after the
    turn it follows), and the subagent sessions that fan out once it has ended."""

    input_tokens: int
    output_tokens: int
    wait: float
    children: list[SessionPlan] = field(default_factory=list)

    def faster(self, speed: float) -> TurnPlan:
        return TurnPlan(
            self.input_tokens,
            self.output_tokens,
            self.wait / speed,
            [c.faster(speed) for c in self.children],
        )


@dataclass
class SessionPlan:
    """A session of the trace: its id, its parent's (""), its turns in order, its line."""

    id: str
    parent: str
    line: int
    turns: list[TurnPlan] = field(default_factory=list)

    def faster(self, speed: float) -> SessionPlan:
        return dataclasses.replace(self, turns=[t.faster(speed) for t in self.turns])

    def requests(self) -> int:
        """Its turns and every subagent's below it."""
        return sum(1 + sum(c.requests() for c in t.children) for t in self.turns)

    def all_turns(self) -> Iterator[TurnPlan]:
        """Its turns and every subagent's below it, each once."""
        for turn in self.turns:
            yield turn
            for child in turn.children:
                yield from child.all_turns()


def is_agentic(first: str) -> bool:
    """Whether a JSONL file's first line is an agentic trace's (a "session" field)."""
    try:
        entry = orjson.loads(first)
    except orjson.JSONDecodeError:
        return False
    return isinstance(entry, dict) and "session" in entry


def read_agentic(path: str, limits: TraceLimits) -> Rows:
    """The top-level sessions of an agentic JSONL file, in file order, each one request of
    `Rows` (its first turn's time and lengths) carrying its `SessionPlan`; `TraceError` on a bad
    line, or one past `limits` (every turn counts against --trace-max-requests)."""
    rows = Rows(units_per_second=1000.0, limits=limits)  # milliseconds
    sessions: dict[str, SessionPlan] = {}
    turns = 0
    number = 0
    with open(path, "rb") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                turns += 1
                if turns > limits.requests:
                    raise BadValue(
                        f"more than {limits.requests:,} turns (--trace-max-requests "
                        f"{limits.requests}: cut the file to the part to replay, or raise it)"
                    )
                _add_turn(rows, sessions, number, _entry(line.lstrip(b"\xef\xbb\xbf")), limits)
            except BadValue as e:
                raise TraceError(f"{path}:{number}: {e}") from None
        rows.lines = number
    return rows


def _entry(line: bytes) -> dict[str, Any]:
    try:
        entry = orjson.loads(line)
    except orjson.JSONDecodeError as e:
        raise BadValue(
            f"not valid JSON: {e.msg} (column {e.colno}; an agentic trace has one JSON object a "
            "line)"
        ) from None
    if type(entry) is not dict:
        raise BadValue(f"a line must be a JSON object with {', '.join(FIELDS)}; got {shown(entry)}")
    missing = [name for name in FIELDS if name not in entry]
    if missing:
        raise BadValue(
            f'no "{missing[0]}" field (an agentic trace line has {", ".join(FIELDS)}, and '
            f"optionally {', '.join(OPTIONAL)})"
        )
    return entry


def _add_turn(
    rows: Rows, sessions: dict[str, SessionPlan], line: int, entry: dict, limits: TraceLimits
) -> None:
    name = _session_id(entry["session"], "session")
    turn = entry["turn"]
    if type(turn) is not int or turn < 0:
        raise BadValue(f'"turn" must be a whole number from 0, got {shown(turn)}')
    timestamp = json_time(entry["timestamp"], "timestamp")
    prompt = token_count(entry["input_length"], "input_length", "prompt")
    output = token_count(entry["output_length"], "output_length", "output")
    if prompt + output > limits.tokens:
        raise BadValue(
            f"{prompt + output} tokens (input_length {prompt} + output_length {output}), above "
            f"{limits.tokens_said} (fix the line, or raise --trace-max-tokens for a model with "
            "a longer context)"
        )
    wait = entry.get("tool_latency_ms", 0)
    if type(wait) not in (int, float) or not (math.isfinite(wait) and wait >= 0):
        raise BadValue(f'"tool_latency_ms" must be 0 or more milliseconds, got {shown(wait)}')
    plan = TurnPlan(prompt, output, wait / 1000.0)
    session = sessions.get(name)
    if session is None:
        if turn != 0:
            raise BadValue(
                f"turn {turn} of session {name!r}, which no earlier line opens (a session starts "
                "at turn 0: add its earlier turns, or remove the line)"
            )
        session = sessions[name] = SessionPlan(name, _parent(entry, sessions, name), line)
        if not session.parent:
            rows.add(line, timestamp, prompt, output)
            rows.sessions.append(session)
        else:
            _hang(entry, sessions[session.parent], session)
    elif turn != len(session.turns):
        raise BadValue(
            f"turn {turn} of session {name!r} after its turn {len(session.turns) - 1} (a "
            f"session's turns come in order, each once: this one should be {len(session.turns)})"
        )
    elif entry.get("parent") not in (None, session.parent):
        raise BadValue(
            f"session {name!r} names parent {entry['parent']!r} here and {session.parent!r} on "
            f"line {session.line} (a session has one parent)"
        )
    session.turns.append(plan)
    if prompt + output > rows.longest[0]:
        rows.longest = (prompt + output, line)


def _session_id(value: Any, name: str) -> str:
    if type(value) is str and value:
        return value
    if type(value) is int and not isinstance(value, bool):
        return str(value)
    raise BadValue(
        f'"{name}" must be a session id (a string or a whole number), got {shown(value)}'
    )


def _parent(entry: dict, sessions: dict[str, SessionPlan], name: str) -> str:
    """The parent a session's first line names ("" for none), which an earlier line opened."""
    value = entry.get("parent")
    if value is None or value == "":
        return ""
    parent = _session_id(value, "parent")
    if parent not in sessions or parent == name:
        raise BadValue(
            f"session {name!r} names parent {parent!r}, which no earlier line opens (a subagent "
            "session follows its parent's turn: put the parent's lines first, or fix the id)"
        )
    return parent


def _hang(entry: dict, parent: SessionPlan, child: SessionPlan) -> None:
    """Put `child` under the parent's turn it fans out from."""
    at = entry.get("parent_turn", len(parent.turns) - 1)
    if type(at) is not int or not 0 <= at < len(parent.turns):
        raise BadValue(
            f"session {child.id!r} fans out from turn {shown(at)} of {parent.id!r}, which has "
            f"turns 0 to {len(parent.turns) - 1} so far (its parent_turn must be on an earlier "
            "line)"
        )
    parent.turns[at].children.append(child)
