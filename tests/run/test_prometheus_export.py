"""The tester's own Prometheus metrics (--prometheus): the tallies taken from record rows, the
exposition text they make (parsed back with prometheus_client's own parser), the labels, the
histograms' buckets and resolution, the address option and its refusals.

The server itself (gevent's WSGI server in the Locust process) is tested end to end in
tests/e2e/test_prometheus_export.py; Locust and gevent stay out of pytest's process."""

from __future__ import annotations

import argparse
import math
import socket
from wsgiref.util import setup_testing_defaults

import numpy as np
import pytest
from prometheus_client import CONTENT_TYPE_LATEST
from support.prometheus_scrape import HOST, STATE, add, exposition
from support.prometheus_scrape import record_row as row

from vllm_load.run.live import LiveStats
from vllm_load.run.prometheus_export import (
    METRICS_PATH,
    PHASES,
    PrometheusExport,
    RunState,
    listen_socket,
)
from vllm_load.run.prometheus_tallies import (
    BUCKET_GROWTH,
    LATENCY_BOUNDS,
    RequestTallies,
    target_lookup,
)
from vllm_load.run_format.records import COLUMNS
from vllm_load.settings import Settings
from vllm_load.user_values import SettingsError


def buckets(samples: dict, name: str, **labels) -> dict[float, float]:
    """{le: cumulative count} of one histogram series."""
    out = {}
    for key, value in samples[name + "_bucket"].items():
        found = dict(key)
        le = found.pop("le")
        if found == labels:
            out[float(le)] = value
    return out


def test_the_bounds_are_log_spaced_from_a_tenth_of_a_millisecond_to_1000_s():
    bounds = np.array(LATENCY_BOUNDS)
    assert bounds[0] == 1e-4 and bounds[-1] == 1000.0 and len(bounds) == 141
    ratios = bounds[1:] / bounds[:-1]
    # 20 per decade, 4 significant digits each: 12.2 % apart, give or take the rounding
    assert BUCKET_GROWTH == pytest.approx(1.122, abs=1e-3)
    assert ratios.min() > 1.12 and ratios.max() < 1.1225


def test_requests_are_counted_by_outcome_user_class_task_and_target():
    tallies = RequestTallies(HOST)
    for r in [row(), row(), row(user_class="Code", task="fix"), row(ok=0), row(ok=0, error="timeout_ttft")]:  # fmt: skip
        add(tallies, r)
    requests = exposition(tallies)["vllm_load_requests_total"]

    def labels(outcome, user_class="Chat", task="ask"):
        return tuple(
            sorted(
                {"outcome": outcome, "user_class": user_class, "task": task, "target": HOST}.items()
            )
        )

    assert requests == {
        labels("ok"): 2,
        labels("ok", "Code", "fix"): 1,
        labels("http_status"): 1,
        labels("timeout_ttft"): 1,
    }


def test_latency_histograms_hold_the_successful_requests_cumulatively():
    ttfts = [0.0123, 0.05, 0.05, 0.31, 2.5, 2.5, 40.0]
    tallies = RequestTallies(HOST)
    for ttft in ttfts:
        add(tallies, row(ttft=ttft, e2e=ttft + 1.0))
    add(tallies, row(ok=0))  # a failure: in no histogram
    samples = exposition(tallies)
    ttft = buckets(samples, "vllm_load_ttft_seconds", user_class="Chat", target=HOST)
    assert len(ttft) == len(LATENCY_BOUNDS) + 1 and ttft[math.inf] == len(ttfts)
    for le, count in ttft.items():
        assert count == sum(v <= le for v in ttfts), le
    labels = (("target", HOST), ("user_class", "Chat"))
    assert samples["vllm_load_ttft_seconds_count"][labels] == len(ttfts)
    assert samples["vllm_load_ttft_seconds_sum"][labels] == pytest.approx(sum(ttfts))
    assert samples["vllm_load_e2e_seconds_sum"][labels] == pytest.approx(sum(ttfts) + len(ttfts))
    e2e = buckets(samples, "vllm_load_e2e_seconds", user_class="Chat", target=HOST)
    assert e2e[1.0] == 0 and e2e[math.inf] == len(ttfts)


def test_itl_takes_every_gap_of_the_rows_own_histogram():
    gaps = [0.004] * 50 + [0.03] * 10 + [0.9]
    tallies = RequestTallies(HOST)
    add(tallies, row(gaps=gaps))
    add(tallies, row(gaps=gaps))
    samples = exposition(tallies)
    itl = buckets(samples, "vllm_load_itl_seconds", user_class="Chat", target=HOST)
    assert itl[math.inf] == 2 * len(gaps)
    # each row bucket (1 %) counted at its value: 4 ms, 30 ms and 900 ms land under the bounds
    # just above them
    assert itl[0.003981] == 0 and itl[0.004467] == 100
    assert itl[0.02818] == 100 and itl[0.03162] == 120 and itl[0.8913] == 120 and itl[1.0] == 122
    labels = (("target", HOST), ("user_class", "Chat"))
    assert samples["vllm_load_itl_seconds_sum"][labels] == pytest.approx(2 * sum(gaps))


def test_tokens_count_the_successful_requests_usage_else_what_was_asked():
    tallies = RequestTallies(HOST)
    add(tallies, row(gaps=(0.01,) * 19))  # 100 prompt, 20 completion tokens
    unreported = list(row(gaps=(0.01,) * 9))
    unreported[COLUMNS.index("prompt_tokens")] = None  # no usage: the requested counts
    unreported[COLUMNS.index("completion_tokens")] = None
    add(tallies, tuple(unreported))
    add(tallies, row(ok=0))
    samples = exposition(tallies)
    labels = (("target", HOST), ("user_class", "Chat"))
    assert samples["vllm_load_prompt_tokens_total"][labels] == 200
    assert samples["vllm_load_completion_tokens_total"][labels] == 30


def test_the_run_state_gauges():
    samples = exposition(RequestTallies(HOST))
    assert samples["vllm_load_in_flight"][()] == 5
    assert samples["vllm_load_users"][()] == 8
    assert samples["vllm_load_level_index"][()] == 1
    assert samples["vllm_load_level_value"] == {(("kind", "concurrency"), ("unit", "users")): 8.0}
    assert samples["vllm_load_phase"] == {(("phase", p),): float(p == "running") for p in PHASES}
    assert samples["vllm_load_run_info"] == {(("model", "m"), ("run_dir", "r")): 1.0}
    assert "process_cpu_seconds_total" in samples  # the master's own CPU
    before = exposition(RequestTallies(HOST), RunState("idle", -1, "", "", math.nan, 0, 0))
    assert before["vllm_load_level_index"][()] == -1 and "vllm_load_level_value" not in before


def test_expected_series_are_served_at_zero_before_their_first_request():
    tallies = RequestTallies(HOST)
    tallies.expect(["Chat", "Code"], [HOST])
    samples = exposition(tallies)
    counts = samples["vllm_load_ttft_seconds_count"]
    assert counts == {(("target", HOST), ("user_class", c)): 0 for c in ("Chat", "Code")}
    assert set(samples["vllm_load_completion_tokens_total"].values()) == {0}


def test_the_target_is_the_rows_own_and_the_runs_host_where_it_names_none():
    lookup = target_lookup(COLUMNS, HOST)
    assert lookup(row(target="http://10.0.0.2:8000")) == "http://10.0.0.2:8000"
    assert lookup(row()) == HOST  # one target: the record names none
    older = tuple(c for c in COLUMNS if c != "target")  # records from before the column
    assert target_lookup(older, HOST)(row()[: len(older)]) == HOST
    tallies = RequestTallies(HOST)
    add(tallies, row(target="http://10.0.0.2:8000"))
    add(tallies, row(target="http://10.0.0.3:8000"))
    targets = {dict(k)["target"] for k in exposition(tallies)["vllm_load_requests_total"]}
    assert targets == {"http://10.0.0.2:8000", "http://10.0.0.3:8000"}


def histogram_quantile(q: float, bounds: list[float], cumulative: list[float]) -> float:
    """Prometheus' histogram_quantile (promql/quantile.go): the bucket whose cumulative count
    first reaches q * total, linearly interpolated inside it (from 0 in the first)."""
    rank = q * cumulative[-1]
    b = next(i for i, c in enumerate(cumulative) if c >= rank)
    lower = bounds[b - 1] if b > 0 else 0.0
    below = cumulative[b - 1] if b > 0 else 0.0
    return lower + (bounds[b] - lower) * (rank - below) / (cumulative[b] - below)


@pytest.mark.parametrize("seed", range(5))
def test_a_p99_read_from_the_histogram_is_within_one_bucket_of_the_exact_one(seed):
    values = np.random.default_rng(seed).lognormal(math.log(0.3), 1.0, 2000)
    tallies = RequestTallies(HOST)
    for v in values:
        add(tallies, row(ttft=float(v)))
    (series,) = tallies.series.values()
    cumulative = series.ttft.cumulative()[:-1]
    estimate = histogram_quantile(0.99, list(LATENCY_BOUNDS), cumulative)
    exact = float(np.percentile(values, 99))
    assert 1 / BUCKET_GROWTH < estimate / exact < BUCKET_GROWTH


def test_metrics_are_served_at_metrics_only():
    export = PrometheusExport("127.0.0.1:1", HOST, None)
    export.tallies = RequestTallies(HOST)
    app = export.metrics(lambda: STATE, {"model": "m", "run_dir": "r"}).app
    answers = {}
    for method, path in (("GET", METRICS_PATH), ("GET", "/"), ("GET", "/other"), ("POST", METRICS_PATH)):  # fmt: skip
        environ: dict = {}
        setup_testing_defaults(environ)
        environ.update(PATH_INFO=path, REQUEST_METHOD=method)
        body = b"".join(app(environ, lambda status, headers: answers.__setitem__((method, path), (status, dict(headers)))))  # fmt: skip
        if (method, path) == ("GET", METRICS_PATH):
            assert b"vllm_load_phase" in body and b"process_cpu_seconds_total" in body
    assert answers[("GET", METRICS_PATH)] == ("200 OK", {"Content-Type": CONTENT_TYPE_LATEST})
    assert {k: v[0] for k, v in answers.items()} == {
        ("GET", METRICS_PATH): "200 OK",
        ("GET", "/"): "404 Not Found",
        ("GET", "/other"): "404 Not Found",
        ("POST", METRICS_PATH): "405 Method Not Allowed",
    }


def test_label_values_are_quoted_as_the_text_format_wants():
    tallies = RequestTallies(HOST)
    odd = 'Odd "class"\\ with\na newline'
    add(tallies, row(user_class=odd, task='t"'))
    (key,) = exposition(tallies)["vllm_load_requests_total"]
    assert dict(key)["user_class"] == odd and dict(key)["task"] == 't"'


@pytest.mark.parametrize(
    "given, expected",
    [
        ("9647", "127.0.0.1:9647"),  # a port alone: this machine only
        ("0.0.0.0:9647", "0.0.0.0:9647"),
        ("[::1]:9647", "[::1]:9647"),
        ("", ""),
    ],
)
def test_the_address_option(given, expected):
    assert Settings.from_options(argparse.Namespace(prometheus=given)).prometheus == expected


@pytest.mark.parametrize("given", ["x", "0", "70000", ":9647", "host:port"])
def test_a_bad_address_is_one_line(given):
    with pytest.raises(SettingsError, match=r"^--prometheus: .* give PORT or HOST:PORT"):
        Settings.from_options(argparse.Namespace(prometheus=given))


def test_a_port_in_use_is_refused_in_one_line_and_a_free_one_is_freed_again():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        settings = Settings.from_options(argparse.Namespace(prometheus=str(port)))
        with pytest.raises(SettingsError, match=rf"^--prometheus 127.0.0.1:{port}: cannot listen"):
            PrometheusExport.open(settings, HOST)
    export = PrometheusExport.open(settings, HOST)  # free now
    record = row()
    export.add(record, LiveStats().add(record))  # the ITL pairs as the live figures parsed them
    assert export.tallies is not None
    assert export.tallies.series[("Chat", HOST)].itl.count == 9
    export.stop()
    listen_socket(settings.prometheus).close()  # and free again


def test_without_the_option_nothing_listens_or_counts():
    export = PrometheusExport.open(Settings.from_options(argparse.Namespace()), HOST)
    record = row()
    export.add(record, LiveStats().add(record))
    assert export.listener is None and export.tallies is None
    export.stop()
