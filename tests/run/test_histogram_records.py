import math
import random

import pytest

from vllm_load.run_format.histogram import LogHistogram, bucket_of, bucket_value
from vllm_load.run_format.records import (
    COLUMNS,
    FLOAT_INDEXES,
    RequestRecord,
    RequestsCsvWriter,
    read_requests,
)


@pytest.mark.parametrize("seconds", [1e-5, 0.001, 0.0199, 0.02, 0.5, 3.0, 120.0])
def test_bucket_relative_error_is_half_a_percent(seconds):
    assert abs(bucket_value(bucket_of(seconds)) - seconds) / seconds <= 0.005


def test_histogram_percentiles_nearest_rank():
    values = [0.010] * 90 + [0.020] * 9 + [0.500]
    hist = LogHistogram.of(values)
    assert hist.total == 100
    assert hist.percentile(50) == pytest.approx(0.010, rel=0.005)
    assert hist.percentile(90) == pytest.approx(0.010, rel=0.005)
    assert hist.percentile(91) == pytest.approx(0.020, rel=0.005)
    assert hist.percentile(99) == pytest.approx(0.020, rel=0.005)
    assert hist.percentile(100) == pytest.approx(0.500, rel=0.005)
    assert hist.mean() == pytest.approx(sum(values) / len(values), rel=0.005)
    assert math.isnan(LogHistogram().percentile(50))


def test_histogram_roundtrip_and_merge():
    a = LogHistogram.of([0.01, 0.01, 0.03])
    b = LogHistogram.parse(LogHistogram.of([0.01, 0.2]).format())
    merged = LogHistogram.parse(a.format()).merge(b)
    assert merged.total == 5
    assert merged.percentile(60) == pytest.approx(0.01, rel=0.005)
    assert merged.percentile(100) == pytest.approx(0.2, rel=0.005)


def _record(i: int, ok: int = 1) -> RequestRecord:
    return RequestRecord(
        request_id=f"0-{i}",
        worker="local",
        level=0,
        users=10,
        endpoint="chat",
        stream=1,
        start_ts=1000.0 + i,
        end_ts=1001.5 + i,
        ttft=0.2,
        e2e=1.5,
        tpot=0.01,
        itl_mean=0.01,
        itl_p50=0.01,
        itl_p90=0.01,
        itl_p99=0.012,
        itl_max=0.02,
        itl_hist=LogHistogram.of([0.01] * 3).format(),
        n_chunks=4,
        chunks_merged=0,
        chunk_marks="",
        prompt_tokens=2048 if ok else None,
        completion_tokens=4 if ok else None,
        requested_prompt_tokens=2048,
        requested_completion_tokens=4,
        ok=ok,
        status=200 if ok else 503,
        error="" if ok else "http_status",
        error_message="" if ok else 'Service "unavailable", try later',
    )


def test_requests_csv_roundtrip(tmp_path):
    path = tmp_path / "requests.csv"
    writer = RequestsCsvWriter(str(path))
    writer.write_rows([_record(0).to_row(), _record(1, ok=0).to_row()])
    writer.close()
    # appending later (a resumed writer) must not repeat the header
    writer = RequestsCsvWriter(str(path))
    writer.write_rows([_record(2).to_row()])
    writer.close()
    frame = read_requests(str(path))
    assert list(frame.columns) == list(COLUMNS)
    assert len(frame) == 3
    assert frame["ok"].tolist() == [1, 0, 1]
    assert frame.loc[1, "error_message"] == 'Service "unavailable", try later'
    assert frame["prompt_tokens"].isna().tolist() == [False, True, False]
    assert LogHistogram.parse(frame.loc[0, "itl_hist"]).total == 3


def test_reasoning_columns_roundtrip_with_their_types(tmp_path):
    """A reasoning request's columns, and a request's without them (empty, not zero)."""
    import dataclasses

    path = tmp_path / "requests.csv"
    writer = RequestsCsvWriter(str(path))
    thinking = dataclasses.replace(
        _record(0), ttfat=1.25, reasoning_tokens=3, answer_tokens=1, reasoning_source="usage"
    )
    writer.write_rows([thinking.to_row(), _record(1, ok=0).to_row()])
    writer.close()
    frame = read_requests(str(path))
    assert frame["ttfat"].tolist()[0] == 1.25 and math.isnan(frame["ttfat"].tolist()[1])
    assert str(frame["reasoning_tokens"].dtype) == "Int64"
    assert frame["reasoning_tokens"].tolist()[0] == 3 and frame[
        "answer_tokens"
    ].isna().tolist() == [
        False,
        True,
    ]
    assert frame["reasoning_source"].fillna("").tolist() == ["usage", ""]


def test_every_seconds_column_is_written_to_7_decimals(tmp_path):
    """The writer formats the columns it finds typed as floats; a seconds column it missed (a new
    one typed another way) would go out at full repr() length, and one it caught wrongly would
    lose digits."""
    seconds = {"start_ts", "end_ts", "ttft", "e2e", "tpot", "queued_s", "ttfat", "stolen_s"}
    seconds.add("tool_wait_s")
    seconds |= {f"itl_{s}" for s in ("mean", "p50", "p90", "p99", "max")}
    assert {COLUMNS[i] for i in FLOAT_INDEXES} == seconds
    path = tmp_path / "requests.csv"
    writer = RequestsCsvWriter(str(path))
    row = list(_record(0).to_row())
    row[COLUMNS.index("e2e")] = 0.123456789012
    row[COLUMNS.index("queued_s")] = 1.2e-05
    row[COLUMNS.index("ttfat")] = 0.7654321098
    writer.write_rows([row])
    writer.close()
    cells = dict(zip(COLUMNS, path.read_text().splitlines()[1].split(",")))
    assert cells["e2e"] == "0.1234568" and cells["queued_s"] == "0.0000120"
    assert cells["ttfat"] == "0.7654321"
    assert read_requests(str(path)).loc[0, "e2e"] == pytest.approx(0.1234568, abs=1e-12)


def test_vectorised_buckets_and_text_agree_with_the_scalar_rule():
    import numpy as np

    from vllm_load.run_format.histogram import buckets_of, format_sorted

    rng = random.Random(7)
    values = [0.0, 1e-7, 1e-6, 2e-6] + [rng.lognormvariate(-4, 1.5) for _ in range(5000)]
    values += [bucket_value(b) * 1.005 for b in range(0, 2000, 37)]  # near the rounding edges
    assert buckets_of(np.array(values)).tolist() == [bucket_of(v) for v in values]
    ordered = np.sort(np.array(values))
    assert format_sorted(ordered) == LogHistogram.of(values).format()
    assert format_sorted(np.array([])) == ""
    assert format_sorted(np.array([0.02] * 5)) == f"{bucket_of(0.02)}:5"


def test_a_column_is_typed_by_its_annotation_however_it_is_spelled():
    """Float columns used to be found by matching the annotation's text: `Optional[float]`
    was one, `float | None` silently was not (and went to requests.csv unformatted)."""
    from typing import Optional

    from vllm_load.run_format.records import column_type

    assert column_type(Optional[float]) is float
    assert column_type(float | None) is float
    assert column_type(int) is int and column_type(str | None) is str
