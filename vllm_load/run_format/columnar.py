"""A columnar copy of requests.csv beside it (`requests.columns.npz`), so a run is parsed once.

requests.csv stays the contract (docs/run-format.md). Parsing it is most of what a report on a
big run costs (a million rows: ~5 s for the CSV, ~3 s more for its histograms and chunk marks),
so the first reader that parses it whole (the run's own summary as it ends, else the first
report) writes the parsed columns beside it, and later readers load those instead.

The copy is used only while it stands for the CSV as it is now: it records the CSV's size,
modification time and a digest of its first and last 64 KiB (its header; where an append or a
cut lands) when it was parsed; any difference, another format, or a copy that cannot be read whole is refused (the CSV
is parsed again, and the copy rewritten). It holds what the checks let through (`checks`: a copy
is written only from a frame that passed them) and how the read ended (a last row cut short),
never a verdict that depends on run.json, which may change after it (`checks.count_notes`).

A NumPy .npz, never a pickle: loading one from a run someone sent cannot run code. Per column:
floats as they are, integers (nullable) as the narrowest integer type that holds them and a
mask of the missing ones, texts as codes into their distinct values (UTF-8). The stream columns
as `run_format.stream_columns` parses them.
"""

from __future__ import annotations

import hashlib
import json
import math
import mmap
import os
import struct
import zipfile
import zlib
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd

from .files import REQUESTS_COPY, atomic_file
from .stream_columns import ItlHistograms, MarkTable, StreamColumns

FORMAT = 1
#: bytes of each end of the CSV in its digest
END_BYTES = 65_536


@dataclass(frozen=True)
class CsvStamp:
    """What identifies requests.csv as a copy was made from it."""

    size: int
    mtime_ns: int
    ends_sha256: str  # of its first and last END_BYTES bytes

    @classmethod
    def of(cls, csv_path: str) -> "CsvStamp":
        with open(csv_path, "rb") as fh:
            stat = os.fstat(fh.fileno())
            digest = hashlib.sha256(fh.read(END_BYTES))
            fh.seek(max(stat.st_size - END_BYTES, 0))
            digest.update(fh.read(END_BYTES))
        return cls(stat.st_size, stat.st_mtime_ns, digest.hexdigest())


@dataclass(frozen=True)
class RequestsCopy:
    """A copy's content: the checked rows' columns, their stream columns parsed, how the read
    ended, and the CSV's header (a column it lacks is unknown, not missing from the copy)."""

    frame: pd.DataFrame
    streams: StreamColumns
    partial: bool  # a last row cut short was left out
    cut_id: str  # its request id, where it came whole
    header: tuple[str, ...]


def copy_path(csv_path: str) -> str:
    return os.path.join(os.path.dirname(csv_path), REQUESTS_COPY)


def _narrow(values: np.ndarray) -> np.ndarray:
    """Integers in the narrowest type that holds them (a level, a status: one byte or two)."""
    if not values.size:
        return values
    low, high = int(values.min()), int(values.max())
    for dtype in (np.int8, np.int16, np.int32):
        info = np.iinfo(dtype)
        if info.min <= low and high <= info.max:
            return values.astype(dtype)
    return values


def _column_arrays(name: str, column: pd.Series) -> tuple[str, dict[str, np.ndarray]]:
    """How one column is kept: its kind and its arrays."""
    if isinstance(column.dtype, pd.StringDtype):
        codes, distinct = pd.factorize(column.array, use_na_sentinel=True)
        encoded = [str(text).encode("utf-8") for text in distinct]
        offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(e) for e in encoded], out=offsets[1:])
        return "text", {
            f"codes.{name}": codes.astype(np.int32),
            f"text.{name}": np.frombuffer(b"".join(encoded), dtype=np.uint8),
            f"text_offsets.{name}": offsets,
        }
    if isinstance(column.dtype, pd.Int64Dtype):
        missing = column.isna().to_numpy()
        values = column.to_numpy(dtype=np.int64, na_value=0)
        return "int", {f"int.{name}": _narrow(values), f"missing.{name}": missing}
    if column.dtype == np.float64:
        return "float", {f"float.{name}": column.to_numpy()}
    raise TypeError(f"{name}: no columnar form for {column.dtype}")


def _column(kind: str, name: str, data) -> pd.api.extensions.ExtensionArray | np.ndarray:
    """One frame column, in memory of its own: a frame's cells may be written (the copy's
    arrays are read-only maps of the file)."""
    if kind == "float":
        return np.array(data[f"float.{name}"])
    if kind == "int":
        values = data[f"int.{name}"].astype(np.int64)
        return pd.arrays.IntegerArray(values, np.array(data[f"missing.{name}"]))
    codes = data[f"codes.{name}"]
    blob, offsets = data[f"text.{name}"].tobytes(), data[f"text_offsets.{name}"]
    distinct = np.array(
        [blob[a:b].decode("utf-8") for a, b in zip(offsets[:-1], offsets[1:])] + [pd.NA],
        dtype=object,
    )
    return pd.arrays.StringArray(distinct[codes])  # code -1: the last, missing


def write_copy(
    csv_path: str,
    stamp: CsvStamp,
    frame: pd.DataFrame,
    streams: StreamColumns,
    partial: bool,
    cut_id: str,
    header: list[str],
) -> str:
    """Write the copy of `frame` (its checked rows, read from the CSV `stamp` identifies) beside
    the CSV, whole or not at all; returns its path. Raises OSError where it cannot be written."""
    arrays: dict[str, np.ndarray] = {}
    kinds: dict[str, str] = {}
    for name in frame.columns:
        kinds[name], parts = _column_arrays(name, frame[name])
        arrays.update(parts)
    arrays["itl_offsets"] = streams.itl.offsets
    arrays["itl_buckets"] = streams.itl.buckets
    arrays["itl_counts"] = streams.itl.counts
    arrays["marks"] = streams.marks.values  # tenths (int32) or ms (float64)
    meta = {
        "format": FORMAT,
        "stamp": list(_stamp_fields(stamp)),
        "rows": len(frame),
        "partial": partial,
        "cut_id": cut_id,
        "header": list(header),
        "columns": kinds,
    }
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode("utf-8"), dtype=np.uint8)
    path = copy_path(csv_path)
    with atomic_file(path) as fh:
        np.savez(fh, allow_pickle=False, **arrays)
    return path


def _meta(data) -> dict:
    return json.loads(data["meta"].tobytes().decode("utf-8"))


def copy_is_current(csv_path: str, stamp: CsvStamp) -> bool:
    """Whether the copy beside `csv_path` was made from the CSV `stamp` identifies."""
    try:
        with np.load(copy_path(csv_path), allow_pickle=False) as data:
            meta = _meta(data)
    except (OSError, ValueError, KeyError, zipfile.BadZipFile):
        return False
    return meta.get("format") == FORMAT and meta.get("stamp") == list(_stamp_fields(stamp))


def read_copy(csv_path: str, columns: list[str]) -> RequestsCopy | None:
    """The copy beside `csv_path` with `columns` (those the CSV has; the others are the
    caller's to add, as for the CSV), if it stands for the CSV as it is now; None when there is
    none, it is stale, of another format, lacks one of those columns, or cannot be read whole."""
    path = copy_path(csv_path)
    if not os.path.isfile(path):
        return None
    try:
        data = _mapped(path)
        meta = _meta(data)
        if meta.get("format") != FORMAT:
            return None
        if meta["stamp"] != list(_stamp_fields(CsvStamp.of(csv_path))):
            return None
        kinds: dict[str, str] = meta["columns"]
        header = tuple(meta["header"])
        present = [c for c in columns if c in header]
        if any(c not in kinds for c in present):
            return None
        arrays = {c: _column(kinds[c], c, data) for c in present}  # each a new array
        frame = pd.DataFrame(arrays, index=pd.RangeIndex(meta["rows"]), copy=False)
        itl = ItlHistograms(data["itl_offsets"], data["itl_buckets"], data["itl_counts"])
        streams = StreamColumns(itl, MarkTable(data["marks"]))
    except (OSError, ValueError, KeyError, TypeError, struct.error, zipfile.BadZipFile):
        return None  # damaged or cut short: the CSV is read instead
    if len(streams) != len(frame) or len(streams.marks) != len(frame):
        return None
    return RequestsCopy(frame, streams, bool(meta["partial"]), str(meta["cut_id"]), header)


def _mapped(path: str) -> dict[str, np.ndarray]:
    """The .npz's arrays mapped from the file, never read into memory: np.savez stores them
    uncompressed, each .npy member's bytes as they are, so each array is a read-only view of the
    page cache (the stream columns are ~150 MB at a million rows, and zipfile's read copies every
    byte); each member's CRC-32 is checked over the mapped bytes. ValueError where the file is
    not such an .npz, is cut short, or a member's bytes do not match its checksum."""
    arrays = {}
    with (
        zipfile.ZipFile(path) as archive,
        open(path, "rb") as fh,
        mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as whole,
    ):
        size = os.fstat(fh.fileno()).st_size
        for info in archive.infolist():
            if info.compress_type != zipfile.ZIP_STORED or not info.filename.endswith(".npy"):
                raise ValueError(f"{info.filename}: not an uncompressed array")
            fh.seek(info.header_offset)
            local = fh.read(30)  # the member's local header: its name and extra field follow
            if local[:4] != b"PK\x03\x04":
                raise ValueError(f"{info.filename}: no local header")
            name_length, extra_length = struct.unpack("<HH", local[26:30])
            start = info.header_offset + 30 + name_length + extra_length
            # the member's CRC-32 over its bytes in place (mapped, not copied): a copy whose
            # values were changed is refused, never measured
            with memoryview(whole)[start : start + info.compress_size] as member:
                if start + info.compress_size > size or zlib.crc32(member) != info.CRC:
                    raise ValueError(f"{info.filename}: its checksum does not match")
            fh.seek(start)
            version = np.lib.format.read_magic(fh)
            read_header = (
                np.lib.format.read_array_header_1_0
                if version == (1, 0)
                else np.lib.format.read_array_header_2_0
            )
            shape, fortran, dtype = read_header(fh)
            offset = fh.tell()
            if dtype.hasobject or offset + dtype.itemsize * math.prod(shape) > size:
                raise ValueError(f"{info.filename}: not plain values, or cut short")
            order: Literal["C", "F"] = "F" if fortran else "C"
            name = info.filename[: -len(".npy")]
            arrays[name] = (
                np.memmap(
                    path, dtype=dtype, mode="r", offset=offset, shape=shape, order=order
                ).view(np.ndarray)  # (the map stays open as its base)
                if math.prod(shape)
                else np.empty(shape, dtype=dtype, order=order)
            )
    return arrays


def _stamp_fields(stamp: CsvStamp) -> tuple[int, int, str]:
    return stamp.size, stamp.mtime_ns, stamp.ends_sha256
