"""A hostile trace is refused before any load, one line naming file and line, and reading it
takes bounded memory (issue 52): a length past the model's context or --trace-max-tokens, a
time that would make the replay wait for ever, more requests than --trace-max-requests. A
negative time (before the trace's start) is read, shifted, and said with its line."""

from __future__ import annotations

import http.server
import json
import resource
import threading

import pytest

from vllm_load.workload.traces import TraceError, TraceLimits, read_trace
from vllm_load.workload.traces.replay_plan import MAX_SPAN_DAYS

BURSTGPT_HEADER = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"
GOOD = '{"timestamp": 0, "input_length": 100, "output_length": 10, "hash_ids": [1]}'


def write(tmp_path, lines, name="trace.jsonl") -> str:
    path = tmp_path / name
    path.write_text("".join(line + "\n" for line in lines))
    return str(path)


def line(timestamp, input_length=100, output_length=10) -> str:
    return (
        f'{{"timestamp": {timestamp}, "input_length": {input_length}, '
        f'"output_length": {output_length}, "hash_ids": []}}'
    )


def refusal(path, limits=TraceLimits(), format="auto") -> str:
    with pytest.raises(TraceError) as caught:
        read_trace(path, format, limits)
    message = str(caught.value)
    assert "\n" not in message
    return message


def peak_rss_kib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


@pytest.mark.parametrize(
    "bad, says",
    [
        (line(5, input_length=1_000_000_000_000), "1000000000010 tokens (input_length"),
        (line(5, output_length=10**15), "tokens (input_length 100 + output_length"),
        (line("1e300"), f"more than {MAX_SPAN_DAYS} days"),
        (line("-1e300"), f"more than {MAX_SPAN_DAYS} days"),
        (line(10**30), f"more than {MAX_SPAN_DAYS} days"),
        (line("NaN"), "not valid JSON"),
        (line("Infinity"), "not valid JSON"),
        (line("1e400"), "not valid JSON"),
    ],
)
def test_a_hostile_mooncake_line_is_refused_with_its_line(tmp_path, bad, says):
    path = write(tmp_path, [GOOD, GOOD, bad, GOOD])
    message = refusal(path)
    assert message.startswith(f"{path}:3: ") and says in message, message


@pytest.mark.parametrize(
    "row, says",
    [
        ("5,ChatGPT,2000000,18,2000018,API log", "2000018 tokens"),
        ("1e300,ChatGPT,12,5,17,API log", f"more than {MAX_SPAN_DAYS} days"),
        ("-1e12,ChatGPT,12,5,17,API log", f"more than {MAX_SPAN_DAYS} days"),
    ],
)
def test_a_hostile_burstgpt_row_is_refused_with_its_line(tmp_path, row, says):
    path = write(tmp_path, [BURSTGPT_HEADER, "0,ChatGPT,12,5,17,API log", row], "t.csv")
    message = refusal(path)
    assert message.startswith(f"{path}:3: ") and says in message, message


def test_an_azure_trace_may_not_span_more_than_the_bound(tmp_path):
    rows = ["TIMESTAMP,ContextTokens,GeneratedTokens", "2023-11-16 18:15:46.68,10,5"]
    path = write(tmp_path, [*rows, "9999-11-16 18:15:46.68,10,5"], "t.csv")
    assert refusal(path).startswith(f"{path}:3: ")
    a_week = write(tmp_path, [*rows, "2023-11-23 18:15:46.68,10,5"], "week.csv")
    assert read_trace(a_week).duration == 7 * 86400


def test_the_token_limit_is_the_callers(tmp_path):
    """The model's max_model_len where the server gives it, --trace-max-tokens otherwise."""
    path = write(tmp_path, [GOOD, line(3, 4000, 100)])
    message = refusal(path, TraceLimits(tokens=4096, says="the model's max_model_len 4096"))
    assert message.startswith(f"{path}:2: 4100 tokens") and "max_model_len 4096" in message
    assert len(read_trace(path, "auto", TraceLimits(tokens=4100)).requests) == 2


def test_more_requests_than_the_bound_are_refused_without_reading_on(tmp_path):
    """Millions of lines: refused at the first past the bound, memory never grows with them."""
    path = tmp_path / "millions.jsonl"
    compact = '{"timestamp":0,"input_length":1,"output_length":1,"hash_ids":[]}\n'
    with open(path, "w") as fh:
        fh.write(compact * 1_000_000)
    before = peak_rss_kib()
    message = refusal(str(path), TraceLimits(requests=1000))
    assert (
        message.startswith(f"{path}:1001: more than 1,000 requests") and "--trace-max-" in message
    )
    assert peak_rss_kib() - before < 20_000  # KiB: the 1000 requests read, not the million


def test_hostile_lines_are_refused_in_bounded_memory(tmp_path):
    """A 10^12-token line and a 10^300 ms time are refused before anything of their size is
    made: the process's peak memory does not move."""
    before = peak_rss_kib()
    for bad in (line(5, input_length=10**12), line("1e300"), line(5, output_length=10**18)):
        refusal(write(tmp_path, [GOOD, bad]))
    assert peak_rss_kib() - before < 5_000


def test_a_negative_time_is_read_shifted_and_said_with_its_line(tmp_path):
    path = write(tmp_path, [line(0), line(1000), line(-2000), line(-500)])
    trace = read_trace(path)
    assert [r.at for r in trace.requests] == [0.0, 1.5, 2.0, 3.0]
    assert trace.notes == (
        f"{path}:3: timestamp -2000 is before the trace's start (2 such lines): every request "
        "is shifted 2 s later so that the earliest is at 0 s",
    )
    assert read_trace(write(tmp_path, [line(5), line(7)], "plain.jsonl")).notes == ()


def test_a_speed_that_would_make_the_replay_wait_for_ever_is_refused(tmp_path):
    trace = read_trace(write(tmp_path, [line(0), line(1000)]))
    with pytest.raises(TraceError, match=f"more than {MAX_SPAN_DAYS} days"):
        trace.faster(1e-300)


def test_the_default_limits_take_real_traces(tmp_path):
    """A Mooncake sample line of 128k tokens and a BurstGPT span of four months are read."""
    long = json.dumps(
        {"timestamp": 0, "input_length": 131072, "output_length": 4096, "hash_ids": []}
    )
    assert read_trace(write(tmp_path, [long])).requests[0].input_tokens == 131072
    rows = [BURSTGPT_HEADER, "0,ChatGPT,12,5,17,API log", f"{121 * 86400},ChatGPT,12,5,17,API log"]
    assert read_trace(write(tmp_path, rows, "b.csv")).duration == 121 * 86400


class Models(http.server.BaseHTTPRequestHandler):
    """/v1/models of a server whose model has a context of 4096 tokens."""

    def do_GET(self):  # noqa: N802 (http.server's name)
        body = json.dumps({"data": [{"id": "m", "max_model_len": 4096}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def models_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Models)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_request_longer_than_the_models_context_is_refused_before_any_load(
    tmp_path, models_server
):
    """`vllm-load run`'s check of the target: the server's max_model_len, with the line."""
    from vllm_load.cli.preflight import check_input_files
    from vllm_load.cli.target_check import check_target
    from vllm_load.settings import Settings
    from vllm_load.user_values import SettingsError

    path = write(tmp_path, [GOOD, line(3, 4000, 100), GOOD])
    settings = Settings(trace=path, model="m")
    segment = check_input_files(settings)  # within --trace-max-tokens
    assert segment is not None and len(segment.requests) == 3
    with pytest.raises(SettingsError) as caught:
        check_target(models_server, settings, exact_prompts=False, trace=segment)
    assert str(caught.value).startswith(f"--trace: {path}:2: 4100 tokens")
    assert "max_model_len 4096" in str(caught.value)
    fits = write(tmp_path, [GOOD, line(3, 4000, 96)], "fits.jsonl")
    trace = check_input_files(Settings(trace=fits, model="m"))
    assert check_target(models_server, settings, exact_prompts=False, trace=trace)[0] == "m"


def test_the_ceiling_is_an_option(tmp_path):
    from vllm_load.client.replay_share import trace_segment
    from vllm_load.settings import Settings
    from vllm_load.user_values import SettingsError

    path = write(tmp_path, [GOOD, line(3, 4000, 100), GOOD])
    with pytest.raises(SettingsError, match=f"{path}:2: 4100 tokens .* --trace-max-tokens 4000"):
        trace_segment(Settings(trace=path, trace_max_tokens=4000))
    with pytest.raises(SettingsError, match=f"{path}:3: more than 2 requests"):
        trace_segment(Settings(trace=path, trace_max_requests=2))
    assert len(trace_segment(Settings(trace=path)).requests) == 3
