"""vllm-load's own /metrics (--prometheus) in tests: record rows to feed the exporter, its
exposition parsed back, scrapes of a running test, and what requests.csv says they must hold."""

from __future__ import annotations

import json
import math
import os
import time

import numpy as np
import pandas as pd
import requests
from prometheus_client.parser import text_string_to_metric_families

from vllm_load.run.live import parse_counts
from vllm_load.run.prometheus_export import PrometheusExport, RunState
from vllm_load.run.prometheus_tallies import RequestTallies
from vllm_load.run_format.histogram import LogHistogram
from vllm_load.run_format.records import COLUMNS, RequestRecord

from . import ROOT

Samples = dict[str, dict[tuple, float]]
DASHBOARD = os.path.join(ROOT, "deploy", "grafana", "vllm-load.json")
HOST = "http://127.0.0.1:8000"
STATE = RunState("running", 1, "concurrency", "users", 8.0, 8, 5)


def record_row(
    ok=1, ttft=0.1, e2e=1.0, gaps=(0.02,) * 9, user_class="Chat", task="ask", error="", target=""
):
    """A requests.csv row as the master gets it: one request with these figures."""
    return RequestRecord(
        request_id="x",
        worker="w",
        level=0,
        users=4,
        endpoint="chat",
        stream=1,
        start_ts=1000.0,
        end_ts=1000.0 + e2e,
        ttft=ttft if ok else None,
        e2e=e2e,
        tpot=None,
        itl_mean=float(np.mean(gaps)) if ok and gaps else None,
        itl_p50=None,
        itl_p90=None,
        itl_p99=None,
        itl_max=None,
        itl_hist=LogHistogram.of(list(gaps)).format() if ok else "",
        n_chunks=len(gaps) + 1 if ok else 0,
        chunks_merged=0,
        chunk_marks="",
        prompt_tokens=100 if ok else None,
        completion_tokens=len(gaps) + 1 if ok else None,
        requested_prompt_tokens=100,
        requested_completion_tokens=len(gaps) + 1,
        ok=ok,
        status=200 if ok else 500,
        error="" if ok else (error or "http_status"),
        error_message="",
        user_class=user_class,
        task=task,
        target=target,
    ).to_row()


def add(tallies: RequestTallies, record: tuple) -> None:
    """A row into the tallies, its ITL histogram parsed as the live figures parse it."""
    tallies.add(record, parse_counts(record[COLUMNS.index("itl_hist")]))


def exposition(tallies: RequestTallies, state: RunState = STATE) -> Samples:
    """What a scrape of these tallies gets, parsed back."""
    export = PrometheusExport("127.0.0.1:1", HOST, None)
    export.tallies = tallies
    return parse(export.metrics(lambda: state, {"model": "m", "run_dir": "r"}).text().decode())


def parse(text: str) -> Samples:
    """{sample name: {labels as a sorted tuple of pairs: value}}."""
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def scrape(url: str) -> Samples | None:
    """The metrics at `url` now, or None while nothing listens there."""
    try:
        answer = requests.get(url, timeout=5)
    except requests.ConnectionError:
        return None
    answer.raise_for_status()
    return parse(answer.text)


def wait_until_refused(url: str, timeout: float) -> None:
    """Until nothing answers at `url` (the run closed its server)."""
    deadline = time.monotonic() + timeout
    while scrape(url) is not None:
        assert time.monotonic() < deadline, f"{url} still answers after {timeout} s"
        time.sleep(0.2)


def one(samples: Samples, name: str) -> float:
    (value,) = samples[name].values()
    return value


def phase(samples: Samples) -> str:
    (name,) = [dict(k)["phase"] for k, v in samples["vllm_load_phase"].items() if v == 1]
    return name


def buckets(samples: Samples, name: str) -> dict[float, float]:
    """{le: cumulative count} of a histogram summed over its series (`sum by (le)`)."""
    out: dict[float, float] = {}
    for key, value in samples[name + "_bucket"].items():
        le = float(dict(key)["le"])
        out[le] = out.get(le, 0.0) + value
    return out


def request_counts(samples: Samples) -> dict[tuple[str, str, str, str], float]:
    """{(outcome, user class, task, target): requests} as served."""
    return {
        (d["outcome"], d["user_class"], d["task"], d["target"]): v
        for d, v in ((dict(k), v) for k, v in samples.get("vllm_load_requests_total", {}).items())
    }


def expected_request_counts(rows: pd.DataFrame, target: str) -> dict[tuple, float]:
    """The same counts from requests.csv (every row went to `target`)."""
    outcome = np.where(rows["ok"] == 1, "ok", rows["error"].fillna("").astype(str))
    frame = pd.DataFrame(
        {"o": outcome, "u": rows["user_class"].fillna(""), "t": rows["task"].fillna("")}
    )
    counts = frame.groupby(["o", "u", "t"]).size()
    return {(o, u, t, target): float(n) for (o, u, t), n in counts.items()}


def check_histogram(served: dict[float, float], values: np.ndarray) -> None:
    """Each `le` bucket holds the values at or under it: requests.csv keeps 7 decimals, so a
    value within 1e-7 s of a bound may be on either side of it."""
    assert served[math.inf] == len(values)
    for le, count in served.items():
        assert (values <= le - 1e-7).sum() <= count <= (values <= le + 1e-7).sum(), le


def itl_gaps(rows: pd.DataFrame) -> int:
    """Every ITL gap of the successful rows (their own histograms)."""
    ok = rows[rows["ok"] == 1]
    return sum(LogHistogram.parse(str(t)).total for t in ok["itl_hist"].fillna(""))


def dashboard() -> dict:
    """deploy/grafana's dashboard."""
    with open(DASHBOARD, encoding="utf-8") as fh:
        return json.loads(fh.read())


def queries(board: dict) -> list[str]:
    """Every PromQL expression of the dashboard's panels, and of its template variables."""
    found = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            found.append(variable["query"]["query"])
    return found
