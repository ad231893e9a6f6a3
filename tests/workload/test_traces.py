"""Trace files in the published formats: each reads into requests sorted by time from 0 s, the
format is told by the file's first line, and a bad line is one error line naming file and line."""

from __future__ import annotations

import json

import pytest

from vllm_load.user_values import SettingsError
from vllm_load.workload.traces import TRACE_FORMATS, TraceError, TraceRequest, read_trace

BURSTGPT_HEADER = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"
AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens"


def write(tmp_path, lines, name="trace.txt") -> str:
    path = tmp_path / name
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return str(path)


def mooncake(timestamp, input_length, output_length, hash_ids):
    return {
        "timestamp": timestamp,
        "input_length": input_length,
        "output_length": output_length,
        "hash_ids": hash_ids,
    }


def summary(trace):
    return [(r.at, r.input_tokens, r.output_tokens, r.hash_ids, r.index) for r in trace.requests]


def test_mooncake_lines_become_requests_in_seconds(tmp_path):
    path = write(
        tmp_path,
        [
            mooncake(0, 6755, 500, list(range(14))),
            mooncake(0, 7319, 490, [0, *range(14, 28)]),
            "",  # a blank line is skipped
            {**mooncake(3052, 2287, 316, [0, 42, 43, 44, 45]), "session_id": "x"},  # extra: ignored
            mooncake(4000.5, 1024.0, 8, [0, 46]),  # float ms; a count written as 1024.0
        ],
        name="anything.csv",  # the name does not decide the format
    )
    trace = read_trace(path)
    assert trace.format == "mooncake" and trace.path == path and trace.block_tokens == 512
    assert summary(trace) == [
        (0.0, 6755, 500, tuple(range(14)), 0),
        (0.0, 7319, 490, (0, *range(14, 28)), 1),
        (3.052, 2287, 316, (0, 42, 43, 44, 45), 2),
        (4.0005, 1024, 8, (0, 46), 3),
    ]
    assert trace.duration == 4.0005 and trace.skipped == 0
    assert all(type(r.input_tokens) is int for r in trace.requests)


def test_times_are_rebased_and_rows_out_of_order_sorted_stably(tmp_path):
    path = write(
        tmp_path,
        [
            mooncake(5000, 100, 10, []),
            mooncake(2000, 200, 20, []),
            mooncake(5000, 300, 30, []),
            mooncake(2000, 400, 40, []),
            mooncake(9000, 500, 50, []),
        ],
    )
    trace = read_trace(path, "mooncake")
    assert [(r.at, r.input_tokens, r.index) for r in trace.requests] == [
        (0.0, 200, 1),
        (0.0, 400, 3),  # equal times keep the file's order
        (3.0, 100, 0),
        (3.0, 300, 2),
        (7.0, 500, 4),
    ]


def test_burstgpt_skips_and_counts_failed_requests(tmp_path):
    path = write(
        tmp_path,
        [
            BURSTGPT_HEADER,
            "5,ChatGPT,472,18,490,Conversation log",
            "7,ChatGPT,300,0,300,Conversation log",  # failed in the original log
            "",
            "45.25,GPT-4,1087,230,1317,API log",
            "118,GPT-4,417,0.0,417,API log",
        ],
    )
    trace = read_trace(path)
    assert trace.format == "burstgpt"
    assert summary(trace) == [(0.0, 472, 18, (), 0), (40.25, 1087, 230, (), 1)]
    assert trace.skipped == 2
    assert "2 rows skipped (2 failed in the original log" in trace.describe()


def test_burstgpt_columns_are_found_by_name(tmp_path):
    """BurstGPT's v2 files add Session ID and Elapsed time; the order does not matter."""
    path = write(
        tmp_path,
        [
            "Session ID,Timestamp,Elapsed time,Model,Response tokens,Request tokens,Total tokens,"
            "Log Type",
            "a1,10,3,ChatGPT,20,100,120,Conversation log",
            "a1,12.5,2,ChatGPT,30,250,280,Conversation log",
        ],
    )
    assert summary(read_trace(path)) == [(0.0, 100, 20, (), 0), (2.5, 250, 30, (), 1)]


def test_azure_keeps_every_fractional_digit(tmp_path):
    path = write(
        tmp_path,
        [
            AZURE_HEADER,
            "2023-11-16 23:59:59.9999999,374,44",
            "2023-11-17 00:00:00.0000001,396,109",  # 200 ns later, the next day
            "2023-11-17 00:00:01,10,7",
            "2023-11-16 18:15:46.6805900,4808,10",  # earlier: sorted first
        ],
    )
    trace = read_trace(path)
    assert trace.format == "azure"
    assert [(r.input_tokens, r.index) for r in trace.requests] == [
        (4808, 3),
        (374, 0),
        (396, 1),
        (10, 2),
    ]
    first, second, third = (r.at for r in trace.requests[1:])
    assert first == pytest.approx(20653.3194099, abs=1e-9)
    assert second - first == pytest.approx(2e-7, abs=1e-9)
    assert third - second == pytest.approx(0.9999999, abs=1e-9)


def test_azure_2024_timestamps_with_an_offset(tmp_path):
    path = write(
        tmp_path,
        [
            AZURE_HEADER,
            "2024-05-10 00:00:00.009930+00:00,2162,5",
            "2024-05-10T02:00:01.5+02:00,10,6",  # the same instant as 00:00:01.5 UTC
            "2024-05-10 00:00:02Z,20,7",
        ],
    )
    trace = read_trace(path)
    assert [round(r.at, 9) for r in trace.requests] == [0.0, 1.49007, 1.99007]


def test_rows_of_one_second_read_their_own_fraction_and_offset(tmp_path):
    """The date and time of day are parsed once per second: a row of the same second with
    another fraction, an offset or a bad fraction is still read in full."""
    rows = [
        "2024-05-10 10:00:00.5,10,5",
        "2024-05-10 10:00:00.25,10,5",
        "2024-05-10 10:00:00.123456789,10,5",
        "2024-05-10 10:00:00.75+01:00,10,5",  # an hour earlier
        "2024-05-10 10:00:00,10,5",
    ]
    trace = read_trace(write(tmp_path, [AZURE_HEADER, *rows]))
    assert [(round(r.at, 9), r.index) for r in trace.requests] == [
        (0.0, 3),
        (3599.25, 4),
        (3599.373456789, 2),
        (3599.5, 1),
        (3599.75, 0),
    ]
    bad = write(tmp_path, [AZURE_HEADER, rows[0], "2024-05-10 10:00:00.5x,10,5"], name="bad.csv")
    with pytest.raises(TraceError, match=rf"^{bad}:3: TIMESTAMP must be a date and time"):
        read_trace(bad)


@pytest.mark.parametrize(
    "first_line, expected",
    [
        ('{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": []}', "mooncake"),
        (AZURE_HEADER, "azure"),
        (" TIMESTAMP , ContextTokens , GeneratedTokens ", "azure"),
        (BURSTGPT_HEADER, "burstgpt"),
        ("Timestamp,Request tokens,Response tokens", "burstgpt"),
    ],
)
def test_the_format_is_told_by_the_first_line(tmp_path, first_line, expected):
    rows = {
        "mooncake": [],
        "azure": ["2023-11-16 18:15:46.6805900,10,5"],
        "burstgpt": ["1,ChatGPT,10,5,15,API log"] if first_line == BURSTGPT_HEADER else ["1,10,5"],
    }
    path = write(tmp_path, ["", first_line, *rows[expected]], name="trace.jsonl")
    assert read_trace(path).format == expected
    assert read_trace(path, expected).format == expected


def test_a_byte_order_mark_and_windows_line_ends_are_read(tmp_path):
    moon = tmp_path / "m.jsonl"
    moon.write_bytes(
        b'\xef\xbb\xbf{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1]}\r\n'
    )
    azure = tmp_path / "a.csv"
    azure.write_bytes(
        b"\xef\xbb\xbf" + AZURE_HEADER.encode() + b"\r\n2023-11-16 18:15:46.6805900,10,5\r\n"
    )
    assert summary(read_trace(str(moon))) == [(0.0, 5, 1, (1,), 0)]
    assert summary(read_trace(str(azure))) == [(0.0, 10, 5, (), 0)]


GOOD = mooncake(0, 600, 10, [1, 2])


@pytest.mark.parametrize(
    "line, says",
    [
        ('{"timestamp": 0, "input_length": ', "not valid JSON"),
        ('{"timestamp": NaN, "input_length": 5, "output_length": 1, "hash_ids": []}', "JSON"),
        ("[1, 2, 3]", "must be a JSON object"),
        ({"input_length": 5, "output_length": 1, "hash_ids": []}, 'no "timestamp" field'),
        ({"timestamp": 0, "output_length": 1, "hash_ids": []}, 'no "input_length" field'),
        ({"timestamp": 0, "input_length": 5, "hash_ids": []}, 'no "output_length" field'),
        ({"timestamp": 0, "input_length": 5, "output_length": 1}, 'no "hash_ids" field'),
        (mooncake("3", 5, 1, []), '"timestamp" must be a number'),
        (mooncake(None, 5, 1, []), '"timestamp" must be a number'),
        (mooncake(0, -5, 1, []), "input_length is -5: a token count cannot be negative"),
        (mooncake(0, 0, 1, []), "input_length is 0: a request needs a prompt"),
        (mooncake(0, 5, 0, []), "output_length is 0: a request must generate at least 1"),
        (mooncake(0, 5.5, 1, []), '"input_length" must be a whole number of tokens, got 5.5'),
        (mooncake(0, "5", 1, []), '"input_length" must be a whole number'),
        (mooncake(0, 5, True, []), '"output_length" must be a whole number'),
        (mooncake(0, 5, 1, "1,2"), '"hash_ids" must be a list of whole numbers'),
        (mooncake(0, 5, 1, [1, "2"]), '"hash_ids" must be a list of whole numbers'),
        (mooncake(0, 5, 1, [1.0]), '"hash_ids" must be a list of whole numbers'),
        (mooncake(0, 600, 1, [1, 2, 3]), "3 hash_ids for input_length 600"),
    ],
)
def test_a_bad_mooncake_line_is_one_line_naming_file_and_line(tmp_path, line, says):
    path = write(tmp_path, [GOOD, "", line, GOOD])
    with pytest.raises(TraceError) as caught:
        read_trace(path, "mooncake")
    message = str(caught.value)
    assert message.startswith(f"{path}:3: ") and says in message and "\n" not in message


@pytest.mark.parametrize(
    "row, says",
    [
        ("5,ChatGPT,472,18,490", "5 fields where the header has 6"),
        ("5,ChatGPT,472,18,490,API log,extra", "7 fields where the header has 6"),
        ("5,ChatGPT,0,18,18,API log", "Request tokens is 0: a request needs a prompt"),
        ("5,ChatGPT,-3,18,15,API log", "Request tokens is -3: a token count cannot be negative"),
        ("5,ChatGPT,1.5,18,19.5,API log", "Request tokens must be a whole number"),
        ("5,ChatGPT,,18,18,API log", "Request tokens must be a whole number"),
        ("5,ChatGPT,12,x,12,API log", "Response tokens must be a whole number"),
        ("nan,ChatGPT,12,5,17,API log", "Timestamp must be a number of seconds"),
        ("inf,ChatGPT,12,5,17,API log", "Timestamp must be a number of seconds"),
        ("soon,ChatGPT,12,5,17,API log", "Timestamp must be a number of seconds"),
    ],
)
def test_a_bad_burstgpt_row_is_one_line_naming_file_and_line(tmp_path, row, says):
    path = write(tmp_path, [BURSTGPT_HEADER, "1,ChatGPT,10,5,15,API log", row])
    with pytest.raises(TraceError) as caught:
        read_trace(path)
    message = str(caught.value)
    assert message.startswith(f"{path}:3: ") and says in message and "\n" not in message


@pytest.mark.parametrize(
    "row, says",
    [
        ("2023-11-16,10,5", "TIMESTAMP must be a date and time"),
        ("1700000000,10,5", "TIMESTAMP must be a date and time"),
        ("2023-02-30 10:00:00.0000000,10,5", "no such date: 2023-02-30"),
        ("2023-11-16 25:00:00.0000000,10,5", "no such time of day: 25:00:00"),
        ("2023-11-16 18:15:46.6805900,0,5", "ContextTokens is 0: a request needs a prompt"),
        ("2023-11-16 18:15:46.6805900,10,0", "GeneratedTokens is 0: a request must generate"),
    ],
)
def test_a_bad_azure_row_is_one_line_naming_file_and_line(tmp_path, row, says):
    path = write(tmp_path, [AZURE_HEADER, "2023-11-16 18:15:46.6805900,10,5", row])
    with pytest.raises(TraceError) as caught:
        read_trace(path)
    message = str(caught.value)
    assert message.startswith(f"{path}:3: ") and says in message and "\n" not in message


def test_a_byte_that_is_not_utf8_names_its_line(tmp_path):
    path = tmp_path / "a.csv"
    path.write_bytes(
        (AZURE_HEADER + "\n2023-11-16 18:15:46.6805900,10,5\n").encode()
        + b"2023-11-16 18:15:47.0\xff,10,5\n"
    )
    with pytest.raises(TraceError, match=rf"^{path}:3: not UTF-8 text"):
        read_trace(str(path))


@pytest.mark.parametrize(
    "lines, where, says",
    [
        ([], 1, "the file is empty"),
        (["", "  "], 1, "the file is empty"),
        ([AZURE_HEADER], 2, "no request in the file"),
        ([AZURE_HEADER, ""], 3, "no request in the file"),
        (
            [BURSTGPT_HEADER, "1,ChatGPT,10,0,10,API log"],
            3,
            "no request in the file (1 rows failed",
        ),
        (["hello,world"], 1, "not a trace in a known format"),
        (["", "Timestamp,Model,Request tokens"], 2, "not a trace in a known format"),
    ],
)
def test_a_file_with_no_request_is_named(tmp_path, lines, where, says):
    path = write(tmp_path, lines)
    with pytest.raises(TraceError) as caught:
        read_trace(path)
    message = str(caught.value)
    assert message.startswith(f"{path}:{where}: ") and says in message and "\n" not in message


def test_a_header_without_a_column_the_format_needs(tmp_path):
    path = write(tmp_path, ["Timestamp,Model,Request tokens,Total tokens", "1,ChatGPT,10,15"])
    with pytest.raises(TraceError, match=rf"^{path}:1: no column Response tokens in the header"):
        read_trace(path, "burstgpt")


def test_a_format_the_file_is_not(tmp_path):
    path = write(tmp_path, [AZURE_HEADER, "2023-11-16 18:15:46.6805900,10,5"])
    with pytest.raises(TraceError, match=rf"^{path}:1: this is a azure trace, not mooncake"):
        read_trace(path, "mooncake")
    with pytest.raises(TraceError, match=rf"^{path}: unknown trace format 'splitwise'"):
        read_trace(path, "splitwise")
    assert TRACE_FORMATS == ("mooncake", "burstgpt", "azure", "agentic")


def test_a_missing_file_is_one_line(tmp_path):
    path = str(tmp_path / "nope.jsonl")
    with pytest.raises(TraceError, match=rf"^{path}: cannot read the trace: No such file"):
        read_trace(path)


def test_a_trace_error_is_a_bad_setting():
    """So vllm-load reports it as one line with exit status 2, as every bad option."""
    assert issubclass(TraceError, SettingsError) and issubclass(TraceError, ValueError)


def test_trace_requests_are_frozen_and_compact():
    request = TraceRequest(1.0, 10, 5)
    assert request.hash_ids == () and request.index == 0
    with pytest.raises(AttributeError):
        request.at = 2.0  # type: ignore[misc]
    assert not hasattr(request, "__dict__")
