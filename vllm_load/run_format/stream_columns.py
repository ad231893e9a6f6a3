"""requests.csv's two per-stream columns, `itl_hist` and `chunk_marks`, parsed once.

They are the widest cells of a row (a histogram of a few dozen `bucket:count` pairs, 17 chunk
times) and every figure that reads them reads numbers, never text: so a run's loader parses
them once into arrays (`StreamColumns`), row for row with its requests frame, and every
analysis takes its rows from those. Text kept per row is ~400 MB at a million rows, and was
parsed once per consumer.

- `itl_hist` (`run_format.histogram`'s `bucket:count;...`) becomes `ItlHistograms`: every row's
  pairs one after another, row i's from `offsets[i]` to `offsets[i + 1]` (the layout of a
  sparse matrix's rows), merged per group by `ItlHistograms.merge`.
- `chunk_marks` (ms since the request's start, `;`-joined) becomes a (rows, marks) table,
  nothing past a row's own marks (`MarkTable`: `parse_marks`'s floats, kept as whole tenths of
  a ms where that is exact, as a run writes them: half the memory).

Both parses run on whole columns, never per row in Python: a million rows in seconds.
"""

from __future__ import annotations

import io
import re
import warnings
from dataclasses import dataclass
from itertools import compress, repeat
from typing import Iterable

import numpy as np
import pandas as pd

#: the two columns, as requests.csv names them
ITL_HIST = "itl_hist"
CHUNK_MARKS = "chunk_marks"
STREAM_COLUMNS: tuple[str, ...] = (ITL_HIST, CHUNK_MARKS)

#: rows parsed per pass: bounds the memory of the joined text and the parsed numbers
CHUNK_ROWS = 100_000
#: rows merged per pass: a row has a few dozen pairs, each merged through five int64 arrays
MERGE_ROWS = 16_384
#: rows whose marks are parsed together: bounds the joined text and its table in memory
MARKS_BATCH = 65_536
_PLAIN_DECIMALS = re.compile(r"[0-9.;\n-]*")


def _texts(column: Iterable) -> list[str]:
    """A column's cells as plain strings, a missing one (or not a text) as ""."""
    series = pd.Series(column)
    if isinstance(series.dtype, pd.StringDtype):  # as requests.csv is read: no test per cell
        return series.fillna("").tolist()
    return [t if isinstance(t, str) else "" for t in series.astype(object)]


def _smallest_int(values: np.ndarray) -> np.ndarray:
    """Non-negative integers in the narrowest of uint8 / uint16 / int32 / int64 that holds them
    (a million rows' pairs are ~30 M of each)."""
    top = int(values.max()) if values.size else 0
    for dtype in (np.uint8, np.uint16, np.int32):
        if top <= np.iinfo(dtype).max:
            return values.astype(dtype)
    return values.astype(np.int64)


@dataclass(frozen=True)
class ItlHistograms:
    """Every row's ITL histogram: row i's buckets are `buckets[offsets[i]:offsets[i + 1]]`, their
    counts `counts[...]` at the same places; an empty or missing `itl_hist` has none."""

    offsets: np.ndarray  # int64, rows + 1
    buckets: np.ndarray  # non-negative integers (`run_format.histogram`'s bucket indexes)
    counts: np.ndarray  # non-negative integers

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @classmethod
    def empty(cls, rows: int) -> "ItlHistograms":
        none = np.zeros(0, dtype=np.uint16)
        return cls(np.zeros(rows + 1, dtype=np.int64), none, none)

    @classmethod
    def parse(cls, column: Iterable) -> "ItlHistograms":
        """`itl_hist` texts (None or "" for none). Raises ValueError on a malformed one."""
        texts = _texts(column)
        per_row = np.zeros(len(texts), dtype=np.int64)
        buckets, counts = [], []
        for i in range(0, len(texts), CHUNK_ROWS):
            chunk = texts[i : i + CHUNK_ROWS]
            pairs, chunk_buckets, chunk_counts = _parse_chunk(chunk)
            per_row[i : i + len(chunk)] = pairs
            buckets.append(chunk_buckets)
            counts.append(chunk_counts)
        offsets = np.zeros(len(texts) + 1, dtype=np.int64)
        np.cumsum(per_row, out=offsets[1:])
        flat_buckets = np.concatenate(buckets) if buckets else np.zeros(0, np.int64)
        flat_counts = np.concatenate(counts) if counts else np.zeros(0, np.int64)
        return cls(offsets, _smallest_int(flat_buckets), _smallest_int(flat_counts))

    @classmethod
    def concat(cls, parts: list["ItlHistograms"]) -> "ItlHistograms":
        """The rows of `parts`, one after another."""
        offsets = [parts[0].offsets[:1]]
        shift = 0
        for part in parts:
            offsets.append(part.offsets[1:] + shift)
            shift += int(part.offsets[-1])
        return cls(
            np.concatenate(offsets),
            np.concatenate([p.buckets for p in parts]),
            np.concatenate([p.counts for p in parts]),
        )

    def take(self, rows: np.ndarray) -> "ItlHistograms":
        """The histograms of `rows` (a mask or indices), in their order."""
        index = _row_indexes(rows, len(self))
        pairs = _pair_indexes(self.offsets, index)
        per_row = self.offsets[index + 1] - self.offsets[index]
        offsets = np.zeros(len(index) + 1, dtype=np.int64)
        np.cumsum(per_row, out=offsets[1:])
        return ItlHistograms(offsets, self.buckets[pairs], self.counts[pairs])

    def merge(self, rows: np.ndarray, groups: np.ndarray, n_groups: int) -> np.ndarray:
        """The histograms of `rows` (a mask or indices) summed per group: an int64 matrix of
        shape (n_groups, buckets), `groups[j]` (0..n_groups-1) the group of the j-th row taken.
        One bucket column when no row has any."""
        index = _row_indexes(rows, len(self))
        groups = np.asarray(groups, dtype=np.int64)
        if len(index) != len(groups):
            raise ValueError("rows and groups differ in length")
        parts = []
        for i in range(0, len(index), MERGE_ROWS):
            part = index[i : i + MERGE_ROWS]
            pairs = _pair_indexes(self.offsets, part)
            if not pairs.size:
                continue
            per_row = self.offsets[part + 1] - self.offsets[part]
            row_groups = np.repeat(groups[i : i + MERGE_ROWS], per_row)
            buckets = self.buckets[pairs].astype(np.int64)
            width = int(buckets.max()) + 1
            # float weights: exact for any count a run holds (< 2**53), as the text merge was
            flat = np.bincount(
                row_groups * width + buckets, weights=self.counts[pairs], minlength=n_groups * width
            )
            parts.append(np.rint(flat).astype(np.int64).reshape(n_groups, width))
        if not parts:
            return np.zeros((n_groups, 1), dtype=np.int64)
        width = max(p.shape[1] for p in parts)
        return np.sum([np.pad(p, ((0, 0), (0, width - p.shape[1]))) for p in parts], axis=0)


def _row_indexes(rows: np.ndarray, n: int) -> np.ndarray:
    rows = np.asarray(rows)
    if rows.dtype == bool:
        if len(rows) != n:
            raise ValueError("a row mask of another length")
        return np.flatnonzero(rows)
    return rows.astype(np.int64, copy=False)


def _pair_indexes(offsets: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The places of `rows`' pairs, row after row: each row's run of consecutive places."""
    starts = offsets[rows]
    lengths = offsets[rows + 1] - starts
    total = int(lengths.sum())
    if not total:
        return np.zeros(0, dtype=np.int64)
    # every place is its row's start plus its rank within the row
    ends = np.cumsum(lengths)
    return np.repeat(starts - (ends - lengths), lengths) + np.arange(total, dtype=np.int64)


def _parse_chunk(texts: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each row's number of pairs, and every pair's bucket and count, of a chunk of texts."""
    # plain lists and C-level maps: a pandas string method calls Python once per row
    nonempty = np.fromiter(map(bool, texts), dtype=bool, count=len(texts))
    per_row = np.zeros(len(texts), dtype=np.int64)
    if not nonempty.any():
        return per_row, np.zeros(0, np.int64), np.zeros(0, np.int64)
    kept = list(compress(texts, nonempty))
    per_row[nonempty] = np.fromiter(map(str.count, kept, repeat(";")), dtype=np.int64) + 1
    joined = ";".join(kept).replace(";", " ").replace(":", " ")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy warns (and stops) at the first unparsable character
        try:
            numbers = np.fromstring(joined, dtype=np.int64, sep=" ")
        except (ValueError, DeprecationWarning) as e:
            raise ValueError(f"malformed itl_hist value: {e}") from e
    if numbers.size != 2 * int(per_row.sum()):
        raise ValueError("malformed itl_hist value (expected bucket:count;bucket:count...)")
    buckets, counts = numbers[0::2], numbers[1::2]
    if buckets.size and (buckets.min() < 0 or counts.min() < 0):
        raise ValueError("malformed itl_hist value (negative bucket or count)")
    return per_row, buckets, counts


def parse_marks(marks: Iterable) -> np.ndarray:
    """requests.csv `chunk_marks` texts as a (requests, marks) array of ms, NaN-padded (a field
    that is not a number: NaN); (requests, 0) when no row has any.

    Parsed on whole columns (a million rows' marks in about a second, where splitting each row
    and converting its fields took a minute): each batch's texts, one a line, are read by
    pandas' CSV parser with ';' between fields. A batch with anything but plain decimal numbers
    is read field by field (`_parse_marks_by_field`), which gives NaN for what is not one."""
    texts = _texts(marks)
    width = max(map(str.count, texts, repeat(";")), default=-1) + 1
    if not any(texts):
        return np.empty((len(texts), 0))
    out = np.empty((len(texts), width))
    for i in range(0, len(texts), MARKS_BATCH):
        out[i : i + MARKS_BATCH] = _parse_marks_batch(texts[i : i + MARKS_BATCH], width)
    return out


def _parse_marks_batch(texts: list[str], width: int) -> np.ndarray:
    lines = "\n".join(texts) + "\n"
    if _PLAIN_DECIMALS.fullmatch(lines):
        try:
            table = pd.read_csv(
                io.StringIO(lines),
                sep=";",
                header=None,
                names=range(width),
                dtype=np.float64,
                skip_blank_lines=False,  # an empty text is a row of NaN
            ).to_numpy(np.float64)
        except ValueError:  # a field such as "1.2.3" or "-"
            table = None
        if table is not None and len(table) == len(texts):
            return table
    return _parse_marks_by_field(texts, width)


def _parse_marks_by_field(texts: list[str], width: int) -> np.ndarray:
    table = pd.Series(texts, dtype="string").str.split(";", expand=True)
    table = table.apply(pd.to_numeric, errors="coerce").to_numpy(np.float64)
    return np.pad(table, ((0, 0), (0, width - table.shape[1])), constant_values=np.nan)


#: a missing mark among `MarkTable`'s tenths
NO_TENTH = np.iinfo(np.int32).min


@dataclass(frozen=True)
class MarkTable:
    """Every row's chunk marks, ms since the request's start (`parse_marks`: NaN past a row's
    own). `values` holds them as int32 tenths of a ms (`NO_TENTH` for none) where every one is
    exactly a whole number of tenths (`%.1f`, as a run writes them; checked when made), else as
    the float64 ms parsed: `ms` gives the floats either way, to the bit."""

    values: np.ndarray  # (rows, marks): int32 tenths, or float64 ms

    @classmethod
    def of(cls, ms: np.ndarray) -> "MarkTable":
        """The table of `parse_marks`'s floats, as tenths where that keeps every one."""
        scaled = ms * 10.0
        np.rint(scaled, out=scaled)
        if not np.array_equal(scaled / 10.0, ms, equal_nan=True):
            return cls(ms)
        missing = np.isnan(scaled)
        scaled[missing] = 0.0
        if scaled.size and np.abs(scaled).max() >= np.iinfo(np.int32).max:
            return cls(ms)
        scaled[missing] = NO_TENTH
        return cls(scaled.astype(np.int32))

    def __len__(self) -> int:
        return len(self.values)

    @property
    def size(self) -> int:
        return self.values.size

    @property
    def shape(self) -> tuple[int, ...]:
        return self.values.shape

    def take(self, rows: np.ndarray) -> "MarkTable":
        return MarkTable(self.values[rows])

    @classmethod
    def concat(cls, parts: list["MarkTable"]) -> "MarkTable":
        """The rows of `parts`, one after another: what `of` gives on their marks together."""
        width = max(p.shape[1] for p in parts)
        if all(p.values.dtype == np.int32 for p in parts):
            values = [p.values for p in parts]
            fill: int | float = NO_TENTH
        else:  # one part's marks are not all whole tenths: so are not the whole's
            values = [p.ms() for p in parts]
            fill = np.nan
        return cls(
            np.concatenate(
                [np.pad(v, ((0, 0), (0, width - v.shape[1])), constant_values=fill) for v in values]
            )
        )

    def ms(self, rows: np.ndarray | None = None) -> np.ndarray:
        """The marks of `rows` (every row when None) as float64 ms, NaN past a row's own."""
        values = self.values if rows is None else self.values[rows]
        if values.dtype != np.int32:
            return values.copy() if rows is None else values
        out = values / 10.0
        out[values == NO_TENTH] = np.nan
        return out

    def missing(self) -> np.ndarray:
        """Per row and mark: there is none."""
        if self.values.dtype == np.int32:
            return self.values == NO_TENTH
        return np.isnan(self.values)


@dataclass(frozen=True)
class StreamColumns:
    """A requests frame's `itl_hist` and `chunk_marks`, parsed: row i of each is row i of the
    frame (by position)."""

    itl: ItlHistograms
    marks: MarkTable  # 0 columns: no row has marks

    def __len__(self) -> int:
        return len(self.itl)

    @classmethod
    def of(cls, frame: pd.DataFrame) -> "StreamColumns":
        """Parsed from `frame`'s own text columns (a column it lacks: none in any row). Raises
        ValueError on a malformed histogram."""
        n = len(frame)
        itl = ItlHistograms.parse(frame[ITL_HIST]) if ITL_HIST in frame else None
        ms = parse_marks(frame[CHUNK_MARKS]) if CHUNK_MARKS in frame else np.empty((n, 0))
        return cls(itl if itl is not None else ItlHistograms.empty(n), MarkTable.of(ms))

    @classmethod
    def concat(cls, parts: list["StreamColumns"]) -> "StreamColumns":
        """The rows of `parts`, one after another."""
        return cls(
            ItlHistograms.concat([p.itl for p in parts]), MarkTable.concat([p.marks for p in parts])
        )

    def take(self, rows: np.ndarray) -> "StreamColumns":
        """The rows `rows` (a mask or indices) of both, in their order."""
        return StreamColumns(self.itl.take(rows), self.marks.take(rows))
