"""Parsing requests.csv: its whole rows as a frame with the documented dtypes, and its stream
columns parsed (`stream_columns`), a batch of rows at a time.

A million rows' `itl_hist` and `chunk_marks` texts are ~400 MB, and each label cell (worker,
persona, task, error) is a string of its own: so each batch's stream columns are parsed and
dropped (unless asked for), and each label column keeps one string per distinct value, before
the next batch is read. A value of the wrong type, a row cut short or a line of another width
is named in one line (`checks.DamagedRun`), as the whole file's parse named them.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .checks import DamagedRun
from .records import COLUMNS, PANDAS_DTYPES
from .stream_columns import STREAM_COLUMNS, StreamColumns

#: how each column is parsed: the documented dtypes, and every other column as seconds, so a
#: value of the wrong type is an error, never a column read as text
DTYPES: dict[str, str] = {c: PANDAS_DTYPES.get(c, "float64") for c in COLUMNS}
#: rows parsed per batch
BATCH_ROWS = 131_072
#: text columns of few distinct values (one string object each is kept)
LABELS: tuple[str, ...] = (
    "worker",
    "endpoint",
    "error",
    "user_class",
    "task",
    "conversation",
    "parent",
)
_EOF_IN_STRING = re.compile(r"EOF inside string starting at row (\d+)")
_FIELDS = re.compile(r"Expected (\d+) fields in line (\d+), saw (\d+)")


@dataclass(frozen=True)
class ParsedRows:
    """requests.csv's whole rows (`frame`: the columns read, less the stream texts not asked
    for), their stream columns, whether a last row cut short was left out, and its id."""

    frame: pd.DataFrame
    streams: StreamColumns
    partial: bool
    cut_id: str


class _MalformedStreams(Exception):
    """A stream column's text is not what a run writes (not a wrong type: named as it is)."""


def _shared_labels(batch: pd.DataFrame) -> pd.DataFrame:
    """`batch` with each label column's equal strings one object (a million rows of four
    workers: 8 MB of pointers, not 60 MB of strings)."""
    for c in LABELS:
        if c in batch and isinstance(batch[c].dtype, pd.StringDtype):
            codes, distinct = pd.factorize(batch[c].array, use_na_sentinel=True)
            values = distinct.take(codes, allow_fill=True)  # code -1: missing
            batch[c] = pd.Series(values, index=batch.index, dtype=batch[c].dtype)
    return batch


def _batches(
    path: str, usecols: list[str], keep: set[str], nrows: int | None
) -> tuple[pd.DataFrame, StreamColumns]:
    dtypes = {c: DTYPES[c] for c in usecols if c in DTYPES}
    frames, streams = [], []
    reader = pd.read_csv(
        path,
        usecols=usecols,
        dtype=dtypes,
        keep_default_na=True,
        engine="c",
        nrows=nrows,
        chunksize=BATCH_ROWS,
    )
    with reader:
        for batch in reader:
            try:
                streams.append(StreamColumns.of(batch))
            except ValueError as e:
                raise _MalformedStreams(str(e)) from None
            drop = [c for c in STREAM_COLUMNS if c in batch and c not in keep]
            frames.append(_shared_labels(batch.drop(columns=drop)))
    if not frames:  # a header alone
        empty = pd.read_csv(path, usecols=usecols, dtype=dtypes, nrows=0)
        streams.append(StreamColumns.of(empty))
        frames.append(
            empty.drop(columns=[c for c in STREAM_COLUMNS if c in empty and c not in keep])
        )
    frame = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    return frame, StreamColumns.concat(streams)


def _parse(
    path: str, usecols: list[str], keep: set[str], nrows: int | None
) -> tuple[pd.DataFrame, StreamColumns]:
    try:
        return _batches(path, usecols, keep, nrows)
    except _MalformedStreams as e:  # a histogram that is not `bucket:count;...`
        raise DamagedRun(f"{path}: {e}: not what a run writes") from None
    except ValueError as e:  # a value of the wrong type: find the row (slowly) to name it
        if isinstance(e, pd.errors.ParserError):
            raise
        text = pd.read_csv(path, usecols=usecols, dtype=str, keep_default_na=False, nrows=nrows)
        for c in usecols:
            if DTYPES.get(c, "string") in ("string", "object"):
                continue
            cells = text[c].str.strip()
            wrong = (cells != "") & pd.to_numeric(cells, errors="coerce").isna()
            wrong &= ~cells.str.lower().isin(("nan", "na", "n/a", "null", "none"))
            if wrong.any():
                i = int(wrong.to_numpy().argmax())
                raise DamagedRun(
                    f"{path}: row {i + 1}: {c} is {text[c].iloc[i]!r}, not a number "
                    f"({int(wrong.sum()):,} row(s) like it): not what a run writes"
                ) from None
        raise DamagedRun(f"{path}: {e}") from None


def parse_rows(path: str, usecols: list[str], keep: set[str]) -> ParsedRows:
    """The rows of requests.csv (its columns `usecols`, stream texts kept only where in `keep`)
    that were written whole, their stream columns, whether a last one cut short (the run
    stopped while writing it: a file vllm-load writes always ends with a line end) was left
    out, and its request id where it is known. DamagedRun when the file cannot be read."""
    with open(path, "rb") as fh:
        fh.seek(-1, os.SEEK_END)
        partial = fh.read(1) not in (b"\n", b"\r")
    try:
        frame, streams = _parse(path, usecols, keep, None)
    except pd.errors.ParserError as e:
        message = str(e).strip()
        cut = _EOF_IN_STRING.search(message)
        if cut:  # the cut fell inside a quoted field: the rows before that one are whole
            frame, streams = _parse(path, usecols, keep, int(cut.group(1)) - 1)
            return ParsedRows(frame, streams, True, "")
        fields = _FIELDS.search(message)
        if fields:
            raise DamagedRun(
                f"{path}: line {fields.group(2)} has {fields.group(3)} fields, the header "
                f"{fields.group(1)}: not what a run writes"
            ) from None
        raise DamagedRun(f"{path}: unreadable ({message.splitlines()[-1]})") from None
    cut_id = ""
    if partial and len(frame):
        if not pd.isna(frame["start_ts"].iloc[-1]):  # its id (the first field) came whole
            cut_id = str(frame["request_id"].iloc[-1])
        frame = frame.iloc[:-1]
        streams = streams.take(np.arange(len(frame)))
    return ParsedRows(frame, streams, partial, cut_id)
