"""Per-request records: what one finished request measured, and its row in requests.csv.

Records travel from workers to the master as plain tuples (`RequestRecord.to_row`) inside
Locust's own worker reports, and are appended to requests.csv by `RequestsCsvWriter`.
The columns are documented in docs/run-format.md.
"""

from __future__ import annotations

import csv
import os
import typing
from dataclasses import dataclass, fields
from operator import attrgetter
from typing import IO, Iterable, Optional

#: the error category of a request the client closed on purpose (--cancel-share): ok = 0, and
#: neither a failure nor a completed request (docs/run-format.md)
CANCELLED = "cancelled"


@dataclass(slots=True)
class RequestRecord:
    request_id: str
    worker: str
    level: int
    users: int
    endpoint: str
    stream: int
    start_ts: float
    end_ts: float
    ttft: Optional[float]
    e2e: float
    tpot: Optional[float]
    itl_mean: Optional[float]
    itl_p50: Optional[float]
    itl_p90: Optional[float]
    itl_p99: Optional[float]
    itl_max: Optional[float]
    itl_hist: str
    n_chunks: int
    chunks_merged: int
    chunk_marks: str
    prompt_tokens: Optional[int]
    completion_tokens: Optional[int]
    requested_prompt_tokens: Optional[int]
    requested_completion_tokens: Optional[int]
    ok: int
    status: int
    error: str
    error_message: str
    user_class: str = ""  # the Locust user class that sent it (a persona)
    task: str = ""  # the task (method) of that class that sent it
    conversation: str = ""  # the conversation it is a turn of ("" outside conversations)
    turn: int = 0  # its turn in that conversation, from 0
    cached_tokens: Optional[int] = None  # prompt tokens the server's prefix cache held, if it says
    queued_s: Optional[float] = None  # seconds from when it was due (start_ts) to its sending
    ttfat: Optional[float] = None  # seconds to the first answer token (after any reasoning)
    reasoning_tokens: Optional[int] = None  # of completion_tokens, those the model thought in
    answer_tokens: Optional[int] = None  # completion_tokens - reasoning_tokens
    reasoning_source: str = ""  # where reasoning_tokens came from: "usage", "counted" or ""
    images: int = 0  # images in its messages (the history's included)
    image_bytes: int = 0  # the bytes of those it carried (data: URLs), before base64
    trace_index: Optional[int] = None  # its request's index in the --trace file (None otherwise)
    target: str = ""  # the base URL it was sent to, with several targets (--hosts); "" with one
    stolen_s: Optional[float] = None  # a late send: the host's steal of its CPU while it waited
    tool_calls: int = 0  # tool calls its reply ended in (a request that offered tools)
    tool_wait_s: Optional[float] = None  # an agentic turn: its session's tool wait before it
    parent: str = ""  # a subagent's turn: the session (conversation) that fanned it out
    cancel_after: str = ""  # chosen to be cancelled (--cancel-share): when ("2.000s", "32tok")
    traceparent: str = ""  # the W3C traceparent header it carried (--traceparent), "" without

    def to_row(self) -> tuple:
        return _as_row(self)

    @classmethod
    def unset(cls) -> "RequestRecord":
        """A record with no field set, for a hot path to store each field into by name.

        Building a record by keyword costs 2.3 us more than by position (43 keywords, each
        matched against the parameters; min of 40 interleaved timings); storing the fields one
        by one costs no more than the positional call (bench/record_cost.py), and names each. Every field must be stored:
        `to_row()` raises AttributeError on one that is not (tests/code/test_records_by_name.py
        checks `MeasuredRequest.record()` stores each once)."""
        return object.__new__(cls)


COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(RequestRecord))
# every field is a scalar, so a flat attrgetter makes the row (dataclasses.astuple would deep-copy
# each value: 15 µs per record, in the user greenlet that just finished)
_as_row = attrgetter(*COLUMNS)
WORKER_INDEX = COLUMNS.index("worker")
LEVEL_INDEX = COLUMNS.index("level")
USERS_INDEX = COLUMNS.index("users")
START_INDEX = COLUMNS.index("start_ts")
ERROR_INDEX = COLUMNS.index("error")
ERROR_MESSAGE_INDEX = COLUMNS.index("error_message")


def column_type(annotation) -> type:
    """The scalar type a record field holds (`Optional[float]` and `float | None` alike)."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    return args[0] if args else annotation


#: each column's type, read from the dataclass's annotations (resolved, never matched as text)
COLUMN_TYPES: dict[str, type] = {
    name: column_type(hint) for name, hint in typing.get_type_hints(RequestRecord).items()
}
#: the columns that hold seconds (floats, or None)
FLOAT_INDEXES: tuple[int, ...] = tuple(
    i for i, name in enumerate(COLUMNS) if COLUMN_TYPES[name] is float
)

#: steps.csv's columns, one row per level (docs/run-format.md)
STEPS_COLUMNS: tuple[str, ...] = (
    "level",
    "kind",  # the level's kind of load (`load_kinds`): concurrency, rate or trace
    "value",  # the level's value in its kind's unit: users, requests/s, s into the trace
    "users",
    "start_ts",
    "end_ts",
    "warmup_requests",
    "target_requests",
    "time_cap",
    "stop_reason",
)

#: dtypes for reading requests.csv with pandas, from the column types (nullable where a
#: cell may be empty)
PANDAS_DTYPES: dict[str, str] = {
    name: {int: "Int64", str: "string", float: "float64"}[COLUMN_TYPES[name]] for name in COLUMNS
}


class RequestsCsvWriter:
    """Appends rows to requests.csv as they arrive, flushing after each batch."""

    def __init__(self, path: str) -> None:
        self.path = path
        new_file = not os.path.exists(path) or os.path.getsize(path) == 0
        self._fh: IO[str] = open(path, "a", newline="", encoding="utf-8")
        self._writer = csv.writer(self._fh)
        self.rows_written = 0
        if new_file:
            self._writer.writerow(COLUMNS)
            self._fh.flush()

    def write_rows(self, rows: Iterable[Iterable]) -> int:
        """Append rows (the csv module writes None as an empty cell); seconds to 7 decimals
        (0.1 µs), formatted once each: the csv module's own repr() of a float, or a round()
        before it, costs twice as much, and this runs on the master for every request."""
        formatted = []
        for row in rows:
            cells = list(row)
            for i in FLOAT_INDEXES:
                value = cells[i]
                if value is not None:
                    cells[i] = "%.7f" % value
            formatted.append(cells)
        self._writer.writerows(formatted)
        self._fh.flush()
        self.rows_written += len(formatted)
        return len(formatted)

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.flush()
            self._fh.close()


def read_requests(path: str):
    """Load requests.csv into a pandas DataFrame with the documented dtypes."""
    import pandas as pd

    return pd.read_csv(path, dtype=PANDAS_DTYPES, keep_default_na=True)
