"""requests.csv's columnar copy (`run_format.columnar`): the first whole read writes it, later reads
take the same frame and stream columns from it without parsing the CSV, and a copy that no
longer stands for the CSV (appended to, rewritten, cut, damaged, another format) is refused."""

from __future__ import annotations

import json
import os
import zipfile

import numpy as np
import pandas as pd
import pytest

from vllm_load.run_format import columnar, load, requests_csv
from vllm_load.run_format.checks import DamagedRun
from vllm_load.run_format.files import REQUESTS_COPY
from vllm_load.run_format.load import analysis_columns, load_run
from vllm_load.run_format.stream_columns import ItlHistograms, MarkTable, StreamColumns, parse_marks
from vllm_load.run_format.synthetic import ServerModel, SyntheticRun, write_synthetic_run
from vllm_load.run_format.synthetic_personas import Persona

SPEC = SyntheticRun(
    levels=(4, 16),
    requests_per_level=60,
    warmup_requests=4,
    output_tokens=24,
    server=ServerModel(fail_rate=0.05),
    personas=(Persona("ChatUser", 2.0), Persona("AgentUser", 1.0, 1.2, turns=3)),
    chunk_marks=True,
    workers=2,
    seed=5,
)


@pytest.fixture
def run_dir(tmp_path) -> str:
    return write_synthetic_run(str(tmp_path / "runs"), SPEC)


def _csv(run_dir: str) -> str:
    return os.path.join(run_dir, "requests.csv")


def _copy(run_dir: str) -> str:
    return os.path.join(run_dir, REQUESTS_COPY)


def _same_streams(a: StreamColumns, b: StreamColumns) -> None:
    for name in ("offsets", "buckets", "counts"):
        assert np.array_equal(getattr(a.itl, name), getattr(b.itl, name))
    assert a.marks.values.dtype == b.marks.values.dtype
    assert np.array_equal(a.marks.ms(), b.marks.ms(), equal_nan=True)


def _no_csv_parse(monkeypatch) -> None:
    """Fail any read of requests.csv's rows: what is loaded must come from the copy."""

    def refuse(*args, **kwargs):
        raise AssertionError("requests.csv was parsed")

    monkeypatch.setattr(load, "parse_rows", refuse)


def test_the_first_read_writes_the_copy_and_the_next_reads_the_same_from_it(run_dir, monkeypatch):
    parsed = load_run(run_dir, analysis_columns())
    assert os.path.isfile(_copy(run_dir))
    _no_csv_parse(monkeypatch)
    copied = load_run(run_dir, analysis_columns())
    pd.testing.assert_frame_equal(copied.requests, parsed.requests, check_exact=True)
    assert list(copied.requests.dtypes) == list(parsed.requests.dtypes)
    _same_streams(copied.streams, parsed.streams)
    assert copied.notes == parsed.notes
    # its cells are the frame's own, as a parsed frame's (the copy is mapped read-only)
    copied.requests.loc[0, ["ttft", "completion_tokens", "worker"]] = [9.0, 7, "w"]
    assert copied.requests.loc[0, "ttft"] == 9.0 and copied.requests.loc[0, "worker"] == "w"
    # the streams are the CSV's texts, parsed
    texts = pd.read_csv(_csv(run_dir), dtype=str, keep_default_na=False)
    parsed_ms = parse_marks(texts["chunk_marks"])
    assert np.array_equal(copied.streams.marks.ms(), parsed_ms, equal_nan=True)
    assert copied.streams.marks.shape[1] == 17 and len(copied.streams) == len(texts)
    assert copied.streams.marks.values.dtype == np.int32  # `%.1f` marks: kept as tenths


def test_the_copy_is_numpy_arrays_only(run_dir):
    load_run(run_dir, analysis_columns())
    with np.load(_copy(run_dir), allow_pickle=False) as data:  # no member needs a pickle
        assert all(data[name].dtype != object for name in data.files)
        meta = json.loads(data["meta"].tobytes())
    assert "request_id" not in meta["columns"] and meta["rows"] == len(pd.read_csv(_csv(run_dir)))


def _still_running(run_dir: str) -> None:
    path = os.path.join(run_dir, "run.json")
    with open(path, encoding="utf-8") as fh:
        run = json.load(fh)
    run["outcome"] = "running"
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(run, fh)


@pytest.mark.parametrize("change", ["append", "same_size_and_time", "header", "touch"])
def test_a_copy_that_no_longer_stands_for_the_csv_is_refused_and_rewritten(run_dir, change):
    load_run(run_dir, analysis_columns())
    path = _csv(run_dir)
    before = os.stat(path)
    text = open(path, encoding="utf-8").read()
    lines = text.splitlines(keepends=True)
    if change == "append":  # a run still writing: one more row
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(lines[-1].replace(lines[-1].split(",")[0], "extra-1", 1))
        _still_running(run_dir)
    elif change == "same_size_and_time":  # an edit that kept the size, its time put back
        last = lines[-1].replace(",ChatUser,", ",ChatUsex,").replace(",AgentUser,", ",AgentUsex,")
        assert last != lines[-1] and len(last) == len(lines[-1])
        with open(path, "w", encoding="utf-8") as fh:
            fh.write("".join(lines[:-1]) + last)
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    elif change == "header":  # its header edited in place, size and time kept
        with open(path, "r+b") as fh:
            fh.write(b"requesT_id")
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    else:  # rewritten with the same bytes: its time alone says it may differ
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000))
    stamp = columnar.CsvStamp.of(path)
    assert not columnar.copy_is_current(path, stamp)
    assert columnar.read_copy(path, list(analysis_columns())) is None
    if change == "header":  # the CSV is read, and refused: the copy hid nothing
        with pytest.raises(DamagedRun, match="lacks request_id"):
            load_run(run_dir, analysis_columns())
        return
    fresh = load_run(run_dir, analysis_columns())
    assert len(fresh.requests) == len(pd.read_csv(path))
    if change == "same_size_and_time":
        assert fresh.requests["user_class"].iloc[-1].endswith("Usex")
    assert columnar.copy_is_current(path, columnar.CsvStamp.of(path))  # written anew


@pytest.mark.parametrize("damage", ["cut", "garbage", "format", "flipped"])
def test_a_damaged_copy_or_one_of_another_format_is_read_past(run_dir, damage):
    expected = load_run(run_dir, analysis_columns())
    copy = _copy(run_dir)
    if damage == "flipped":  # bytes inside an array changed, its size and the CSV's stamp kept
        with zipfile.ZipFile(copy) as archive:
            member = archive.getinfo("float.ttft.npy")
        with open(copy, "r+b") as fh:
            fh.seek(member.header_offset + member.compress_size)  # within its last values
            fh.write(b"\xff" * 16)
    elif damage == "cut":
        with open(copy, "r+b") as fh:
            fh.truncate(os.path.getsize(copy) // 2)
    elif damage == "garbage":
        with open(copy, "wb") as fh:
            fh.write(b"not a zip")
    else:
        with np.load(copy, allow_pickle=False) as data:
            arrays = {name: data[name] for name in data.files}
        meta = json.loads(arrays["meta"].tobytes())
        meta["format"] = columnar.FORMAT + 1
        arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
        np.savez(copy, **arrays)
        assert zipfile.is_zipfile(copy)
    assert columnar.read_copy(_csv(run_dir), list(analysis_columns())) is None
    again = load_run(run_dir, analysis_columns())
    pd.testing.assert_frame_equal(again.requests, expected.requests, check_exact=True)
    _same_streams(again.streams, expected.streams)


def test_run_json_is_checked_anew_against_a_copy(run_dir, monkeypatch):
    load_run(run_dir, analysis_columns())
    rows = len(pd.read_csv(_csv(run_dir)))
    run_json = os.path.join(run_dir, "run.json")
    with open(run_json, encoding="utf-8") as fh:
        run = json.load(fh)
    _no_csv_parse(monkeypatch)
    run["requests_recorded"] = rows + 5  # the file was cut short since
    with open(run_json, "w", encoding="utf-8") as fh:
        json.dump(run, fh)
    (note,) = load_run(run_dir, analysis_columns()).notes
    assert f"holds {rows:,} of the {rows + 5:,} rows run.json recorded" in note
    run["requests_recorded"] = rows - 1  # rows added after the run ended
    with open(run_json, "w", encoding="utf-8") as fh:
        json.dump(run, fh)
    with pytest.raises(DamagedRun, match="rows were added after it"):
        load_run(run_dir, analysis_columns())


def test_a_last_row_cut_short_is_left_out_from_the_copy_too(run_dir, monkeypatch):
    path = _csv(run_dir)
    with open(path, "rb+") as fh:  # the run was stopped while writing its last row
        fh.truncate(os.path.getsize(path) - 40)
    parsed = load_run(run_dir, analysis_columns())
    _no_csv_parse(monkeypatch)
    copied = load_run(run_dir, analysis_columns())
    assert copied.notes == parsed.notes and "ends inside a row" in copied.notes[0]
    pd.testing.assert_frame_equal(copied.requests, parsed.requests, check_exact=True)


def test_columns_the_copy_lacks_are_read_from_the_csv(run_dir):
    load_run(run_dir, analysis_columns())
    everything = load_run(run_dir)  # every column: ids and messages are not in the copy
    assert everything.requests["request_id"].notna().all()
    assert "error_message" in everything.requests
    assert "itl_hist" in everything.requests  # asked for: the texts too, beside their parse


def test_where_the_copy_cannot_be_written_the_run_is_still_read(run_dir, monkeypatch):
    def no_room(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(load, "write_copy", no_room)
    data = load_run(run_dir, analysis_columns())
    assert len(data.requests) and not os.path.exists(_copy(run_dir))


def test_a_malformed_histogram_is_one_line_naming_the_file(run_dir):
    path = _csv(run_dir)
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    frame.loc[3, "itl_hist"] = "12:3;x:4"
    frame.to_csv(path, index=False)
    with pytest.raises(DamagedRun, match=r"requests\.csv: malformed itl_hist value"):
        load_run(run_dir, analysis_columns())


def test_histograms_taken_and_merged_by_rows_equal_those_parsed_alone():
    texts = ["10:2;12:1", "", None, "11:5", "10:1;40:2", "12:7"]
    hists = ItlHistograms.parse(texts)
    rows = np.array([4, 0, 3])
    alone = ItlHistograms.parse([texts[i] for i in rows])
    taken = hists.take(rows)
    for name in ("offsets", "buckets", "counts"):
        assert np.array_equal(getattr(taken, name), getattr(alone, name))
    merged = hists.merge(rows, np.array([1, 0, 1]), 2)
    assert merged.shape == (2, 41)
    assert merged[0, 10] == 2 and merged[0, 12] == 1
    assert merged[1, 10] == 1 and merged[1, 40] == 2 and merged[1, 11] == 5
    assert hists.merge(np.array([1, 2]), np.array([0, 0]), 1).shape == (1, 1)  # none: one bucket


def test_marks_are_kept_as_tenths_only_where_that_keeps_every_one():
    ms = parse_marks(["93.3;499.8;899.1", "0.1;1.0", "", "12345678.9"])
    table = MarkTable.of(ms)
    assert table.values.dtype == np.int32 and table.values.nbytes * 2 == ms.nbytes
    assert np.array_equal(table.ms(), ms, equal_nan=True)  # the very floats parsed
    assert np.array_equal(table.ms(np.array([3, 0])), ms[[3, 0]], equal_nan=True)
    finer = parse_marks(["93.25;499.8", "1e12"])  # a finer mark, one past int32's tenths
    for texts in (finer[:1], finer[1:]):
        kept = MarkTable.of(texts)
        assert kept.values.dtype == np.float64
        assert np.array_equal(kept.ms(), texts, equal_nan=True)


@pytest.mark.parametrize("change", ["none", "cut_short", "finer_mark", "cut_in_quotes"])
def test_a_batch_at_a_time_reads_what_the_whole_file_gives(run_dir, monkeypatch, change):
    """requests.csv is parsed in batches (`requests_csv.BATCH_ROWS`): the frame and stream
    columns equal one batch's, with a last row cut short, a mark finer than 0.1 ms in one batch
    only (every mark then kept as floats), and a cut inside a quoted field."""
    path = _csv(run_dir)
    if change == "finer_mark":
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
        frame.loc[100, "chunk_marks"] = "1.25;" + frame.loc[100, "chunk_marks"].split(";", 1)[1]
        frame.to_csv(path, index=False)
    elif change == "cut_short":
        with open(path, "rb+") as fh:
            fh.truncate(os.path.getsize(path) - 40)
    elif change == "cut_in_quotes":
        with open(path, "a", encoding="utf-8") as fh:
            fh.write('x-1,worker-0,0,4,chat,1,1.0,2.0,,1.0,,,,,,,,0,0,,,,,,0,0,timeout,"cut ')
        _still_running(run_dir)
    monkeypatch.setattr(requests_csv, "BATCH_ROWS", 10**9)
    monkeypatch.setattr(load, "write_copy", lambda *a, **k: None)
    whole = load_run(run_dir, analysis_columns())
    monkeypatch.setattr(requests_csv, "BATCH_ROWS", 37)
    batched = load_run(run_dir, analysis_columns())
    pd.testing.assert_frame_equal(batched.requests, whole.requests, check_exact=True)
    _same_streams(batched.streams, whole.streams)
    assert batched.notes == whole.notes
    assert (whole.streams.marks.values.dtype == np.float64) == (change == "finer_mark")
    if change in ("cut_short", "cut_in_quotes"):
        assert "ends inside a row" in whole.notes[0] or "cut" in whole.notes[0]


def test_a_file_written_whole_or_not_at_all_under_a_name_of_its_writer(tmp_path):
    from vllm_load.run_format.files import atomic_file

    path = str(tmp_path / "copy.npz")
    with atomic_file(path) as fh:
        fh.write(b"half")
        assert fh.name == f"{path}.{os.getpid()}.tmp" and not os.path.exists(path)
    assert open(path, "rb").read() == b"half"
    with pytest.raises(OSError), atomic_file(path) as fh:
        fh.write(b"other")
        raise OSError(28, "No space left on device")
    assert open(path, "rb").read() == b"half" and os.listdir(tmp_path) == ["copy.npz"]
