"""Key findings grounded in evidence (issue 35, Why 6): how the run ended opens them, in the HTML
and the Markdown; a level with failures is explained by its failures; TTFT is put down to the
server's queue only where the server's /metrics show one; no sentence contradicts another."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from support.report_summary import report_summary
from support.reports import report, synthetic_runs

from vllm_load.analysis.levels.measure import measure_levels
from vllm_load.report.render import md

#: the text columns of requests.csv, read as such when a test rewrites the file
TEXT = {"error": object, "error_message": object, "itl_hist": object, "chunk_marks": object}


def read_requests(run: str) -> pd.DataFrame:
    return pd.read_csv(f"{run}/requests.csv", dtype=TEXT)


def measured_failures(run: str) -> pd.Series:
    """The last level's measured requests that failed, by category (its warm-up's left out)."""
    steps = pd.read_csv(f"{run}/steps.csv", dtype={"stop_reason": object})
    labelled = measure_levels(read_requests(run), steps).labelled
    last = labelled[(labelled["level"] == labelled["level"].max()) & (labelled["ok"] != 1)]
    return last["error"].value_counts()


def edit_run_json(run: str, **changes) -> None:
    with open(f"{run}/run.json") as fh:
        info = json.load(fh)
    info.update(changes)
    with open(f"{run}/run.json", "w") as fh:
        json.dump(info, fh)


def key_findings(html: str, markdown: str) -> tuple[str, str]:
    """The key-findings sections of the HTML and the Markdown report."""
    html_part = html[html.index('<section id="findings">') : html.index('<section id="why">')]
    md_part = markdown[markdown.index("## Key findings") : markdown.index("## Why it saturates")]
    return html_part, md_part


def stop_during(run: str, level: int, outcome: str) -> None:
    """Rewrite a run as if it had stopped (`outcome`) two thirds into `level`: the levels after
    it never ran, and its requests that would have ended later are gone."""
    steps = pd.read_csv(f"{run}/steps.csv", dtype={"stop_reason": object})
    requests = read_requests(run)
    ends = requests.loc[requests["level"] == level, "end_ts"].sort_values()
    stop = float(ends.iloc[len(ends) * 2 // 3])
    keep = (requests["level"] < level) | (
        (requests["level"] == level) & (requests["end_ts"] <= stop)
    )
    requests[keep].to_csv(f"{run}/requests.csv", index=False)
    steps = steps[steps["level"] <= level].copy()
    steps.loc[steps["level"] == level, ["end_ts", "stop_reason"]] = [stop, outcome]
    steps.to_csv(f"{run}/steps.csv", index=False)
    edit_run_json(run, outcome=outcome, requests_recorded=int(keep.sum()))


@pytest.mark.parametrize(
    "outcome, words",
    [("interrupted", "was interrupted"), ("workers_lost", "lost every load worker")],
)
def test_a_run_that_stopped_early_says_so_first_and_never_asks_for_higher_levels(
    tmp_path, outcome, words
):
    (run,) = synthetic_runs(tmp_path, 1)
    stop_during(run, 1, outcome)  # 10 users, then 50 users cut short; 100 and 200 never ran
    summary, html, markdown = report([run], tmp_path / "r.html")
    findings = summary["series"][0]["findings"]
    run_id = summary["runs"][0]["run_id"]
    assert findings[0] == (
        f"Run {run_id} {words} during level 50 concurrent (run.json outcome: {outcome}): "
        "50 concurrent was cut short (ended before its measured requests had finished); "
        "100, 200 concurrent never ran. These findings cover only the levels it reached; run the "
        "whole ladder to know the rest."
    )
    rising = next(f for f in findings if f.startswith("Throughput is still rising"))
    assert "highest level reached (50 concurrent" in rising and "test higher" not in rising
    assert "50, 100, 200 concurrent not run to their end" in rising
    in_html, in_md = key_findings(html, markdown)
    for part in (in_html, in_md):
        assert f"Run {run_id} {words} during level 50 concurrent" in part
        assert "test higher concurrency" not in part
    assert '<li class="warn outcome">Run ' in in_html
    assert in_md.split("\n- ", 1)[1].startswith(f"⚠ Run {run_id} {words}")


def kill_server_during_last_level(run: str, share: float = 0.75) -> int:
    """Rewrite a run as if its server had died `share` into the requests of its last level:
    requests in flight then are cut (`disconnect`), later ones fail to connect at once, nothing
    succeeds after. Returns the number of failures."""
    requests = read_requests(run)
    requests = requests.astype(
        {c: np.float64 for c in ("ttft", "prompt_tokens", "completion_tokens", "tpot")}
    )
    last = requests["level"] == requests["level"].max()
    death = float(requests.loc[last, "end_ts"].quantile(1 - share))
    dead = last & (requests["end_ts"] > death)
    cut = dead & (requests["start_ts"] < death)
    requests.loc[dead, ["ok", "status", "n_chunks"]] = [0, 0, 0]
    requests.loc[cut, ["end_ts", "error", "error_message"]] = [death, "disconnect", "reset"]
    refused = dead & ~cut
    requests.loc[refused, "end_ts"] = requests.loc[refused, "start_ts"] + 0.001
    requests.loc[refused, ["error", "error_message"]] = ["connect", "Cannot connect to host"]
    requests["e2e"] = requests["end_ts"] - requests["start_ts"]
    for col in ("ttft", "prompt_tokens", "completion_tokens", "tpot", "itl_mean", "itl_p50"):
        requests.loc[dead, col] = np.nan
    for col in ("itl_p90", "itl_p99", "itl_max"):
        requests.loc[dead, col] = np.nan
    requests.loc[dead, ["itl_hist", "chunk_marks"]] = ""
    requests.to_csv(f"{run}/requests.csv", index=False)
    return int(dead.sum())


def test_a_killed_server_is_said_and_its_level_explained_by_its_failures(tmp_path):
    (run,) = synthetic_runs(tmp_path, 1, requests_per_level=400, warmup_requests=200)
    kill_server_during_last_level(run)
    summary, html, markdown = report([run], tmp_path / "dead.html")
    requests = read_requests(run)
    failed = requests[requests["ok"] != 1]
    counts = failed["error"].value_counts()
    findings = summary["series"][0]["findings"]
    run_id = summary["runs"][0]["run_id"]
    # what server/loss.py's rule sees in the requests opens the findings
    assert findings[0] == (
        f"Run {run_id}: the target stopped answering during level 200 concurrent: the run ended on "
        f"{counts['connect']:,} connect failures, {counts['disconnect']:,} disconnect failures with "
        "no success after them, so its levels from there on measured failures, not serving."
    )
    # the level is explained by its measured requests' failures, counted by category, never by
    # the client
    level = next(f for f in findings if f.startswith("Level 200 concurrent is left out"))
    measured = measured_failures(run)
    assert (
        f"(its failed requests: {measured['connect']:,} connect, "
        f"{measured['disconnect']:,} disconnect)" in level
    )
    joined = " ".join(findings)
    assert "did not keep every user's request in flight" not in joined
    assert "Achieved concurrency fell short" not in joined
    in_html, in_md = key_findings(html, markdown)
    for part in (in_html, in_md):
        assert f"Run {run_id}: the target stopped answering during level 200 concurrent" in part


def test_a_level_answered_with_503s_names_the_status_and_is_not_a_lost_target(tmp_path):
    (run,) = synthetic_runs(tmp_path, 1)
    requests = read_requests(run)
    top = requests["level"] == requests["level"].max()
    shed = top & (np.arange(len(requests)) % 4 == 0)  # a quarter shed at once, as overload does
    requests.loc[shed, ["ok", "status", "error", "error_message"]] = [0, 503, "http_status", "503"]
    requests.loc[shed, "end_ts"] = requests.loc[shed, "start_ts"] + 0.002
    requests.to_csv(f"{run}/requests.csv", index=False)
    summary, html, _ = report([run], tmp_path / "503.html")
    findings = summary["series"][0]["findings"]
    level = next(f for f in findings if f.startswith("Level 200 concurrent is left out"))
    assert (
        f"(its failed requests: {measured_failures(run)['http_status']:,} http_status 503)" in level
    )
    assert not any("stopped answering" in f for f in findings)
    assert '<td class="l">http_status 503</td>' in html  # the runs' errors table too


def test_a_run_that_lost_one_worker_says_so_in_its_findings(tmp_path):
    (run,) = synthetic_runs(tmp_path, 1)
    edit_run_json(run, workers_lost=[{"worker": "host_1f2e", "lost_at": 1.0, "level": 1}])
    summary, _, markdown = report([run], tmp_path / "w.html")
    run_id = summary["runs"][0]["run_id"]
    sentence = (
        f"Run {run_id} lost load worker host_1f2e during level 50 concurrent: its requests in "
        "flight were never recorded and its users moved to the remaining workers; that level "
        "held less than its load meanwhile, so its achieved concurrency is the loss's, not the "
        "client's."
    )
    assert summary["series"][0]["findings"][0] == sentence
    assert f"- ⚠ {md(sentence)}" in markdown  # (names escaped as Markdown)


def thin_out_level(run: str, level: int) -> None:
    """Drop every other request of `level` from requests.csv, as if half its users' requests had
    gone (the level then held about half its concurrency)."""
    requests = read_requests(run)
    at = np.flatnonzero(requests["level"].to_numpy() == level)
    requests.drop(index=at[1::2]).to_csv(f"{run}/requests.csv", index=False)


SHORT = "Achieved concurrency fell short of the requested one"


def test_a_level_a_worker_was_lost_during_is_not_put_down_to_the_client(tmp_path):
    (run,) = synthetic_runs(tmp_path, 1)
    thin_out_level(run, 1)
    summary, _, _ = report([run], tmp_path / "short.html")
    findings = summary["series"][0]["findings"]
    assert any(f.startswith(SHORT) and "first at 50 (" in f for f in findings)  # the client's
    entry = {
        "worker": "vm_1f2e",
        "lost_at": 1.0,
        "level": 1,
        "host": "vm",
        "pid": 4242,
        "found": "process_exited",
        "in_flight": 25,
    }
    edit_run_json(run, workers_lost=[entry])
    summary, _, _ = report([run], tmp_path / "lost.html")
    findings = summary["series"][0]["findings"]
    assert not any(f.startswith(SHORT) for f in findings)  # the loss's, not the client's
    named = (
        f"Run {summary['runs'][0]['run_id']} lost load worker vm_1f2e (host vm, pid 4242) during "
        "level 50 concurrent: its 25 request(s) in flight were abandoned (never recorded)"
    )
    assert any(f.startswith(named) for f in findings)


def write_server_metrics(run: str, waiting: dict[int, float], queue_s: dict[int, float]) -> None:
    """A server_metrics.csv scraped every 0.5 s over `run`: `waiting` requests on average and each
    request `queue_s` seconds in the queue, per level (0 where not given)."""
    requests = read_requests(run)
    steps = pd.read_csv(f"{run}/steps.csv")
    ts = np.arange(requests["start_ts"].min() - 1, requests["end_ts"].max() + 1, 0.5)
    level = np.searchsorted(steps["start_ts"].to_numpy(), ts, side="right") - 1
    starts = np.sort(requests["start_ts"].to_numpy())
    waits = requests["level"].map(lambda lv: queue_s.get(int(lv), 0.0)).to_numpy()
    order = np.argsort(requests["start_ts"].to_numpy())
    done = np.searchsorted(starts, ts, side="right")
    total = np.concatenate([[0.0], np.cumsum(waits[order])])
    pd.DataFrame(
        {
            "ts": ts,
            "running": 0.0,
            "waiting": [waiting.get(int(lv), 0.0) for lv in level],
            "queue_time_sum": total[done],
            "queue_time_count": done.astype(float),
        }
    ).to_csv(f"{run}/server_metrics.csv", index=False)


def slow_first_tokens(run: str, factor: float = 3.0) -> None:
    """Make the first tokens of the run's last level `factor` times slower (TTFT p99 then grows
    more than twofold from the first level), whatever the reason."""
    requests = read_requests(run)
    top = requests["level"] == requests["level"].max()
    slower = np.minimum(requests["ttft"] * factor, 0.9 * requests["e2e"])
    requests.loc[top, "ttft"] = slower[top]
    requests.to_csv(f"{run}/requests.csv", index=False)


def ttft_finding(findings: list[str]) -> str:
    return next(f for f in findings if f.startswith("TTFT p99 grows"))


def test_ttft_growth_without_server_metrics_names_no_cause(tmp_path):
    (run,) = synthetic_runs(tmp_path, 1)
    slow_first_tokens(run)
    summary = report_summary(run)
    text = ttft_finding(summary["series"][0]["findings"])
    assert text.startswith("TTFT p99 grows") and text.endswith("at 200 concurrent.")
    assert "queue" not in text


def test_ttft_growth_with_an_empty_server_queue_is_not_put_down_to_it(tmp_path):
    # a shared-prefix run on vLLM: TTFT doubled while nothing waited
    (run,) = synthetic_runs(tmp_path, 1)
    slow_first_tokens(run)
    write_server_metrics(run, waiting={}, queue_s={})
    # the whole report: of this file's runs only this one draws an evidence chart with no
    # saturation point to mark (evidence_charts 191→193)
    summary, _, _ = report([run], tmp_path / "r.html")
    text = ttft_finding(summary["series"][0]["findings"])
    assert "requests wait in" not in text and "before their first token" not in text
    assert text.endswith(
        "; the server's metrics show no queue at 200 (0.0 requests waiting on average "
        "(vllm:num_requests_waiting) and a mean queue time of 0 ms "
        "(vllm:request_queue_time_seconds))."
    )


def test_ttft_growth_with_requests_waiting_cites_the_servers_figures(tmp_path):
    (run,) = synthetic_runs(tmp_path, 1)
    slow_first_tokens(run)
    write_server_metrics(run, waiting={3: 100.0}, queue_s={3: 0.3})
    summary = report_summary(run)
    text = ttft_finding(summary["series"][0]["findings"])
    assert (
        "; at 200 the server's metrics show 100.0 requests waiting on average "
        "(vllm:num_requests_waiting) and a mean queue time of 300 ms "
        "(vllm:request_queue_time_seconds): requests wait in its queue before their first token."
    ) in text
    levels = {lv["value"]: lv for lv in summary["series"][0]["levels"]}
    assert levels[200]["server_queue_time_mean"] == pytest.approx(0.3)
    assert levels[10]["server_waiting_mean"] == 0.0


def test_the_client_health_never_says_it_kept_up_beside_late_levels(tmp_path):
    (run,) = synthetic_runs(tmp_path, 1)
    requests = read_requests(run)
    requests.loc[requests["level"] == 1, "chunks_merged"] = requests["n_chunks"]
    requests.to_csv(f"{run}/requests.csv", index=False)
    _, html, _ = report([run], tmp_path / "late.html")
    assert "Client late at 1 level(s)" in html
    assert "kept up" not in html
    assert (
        "No load process went over 80% CPU or 10 ms mean event-loop lag during any measured "
        "window, but the client was late at 1 level(s) (below)."
    ) in html


def test_a_worker_lost_after_its_level_ended_is_said_without_blaming_a_level(tmp_path):
    (run,) = synthetic_runs(tmp_path, 1)
    thin_out_level(run, 1)
    entry = {"worker": "vm_1f2e", "lost_at": 1.0, "level": 1, "in_flight": 0}
    edit_run_json(run, workers_lost=[{**entry, "during_level": False}])
    summary, _, _ = report([run], tmp_path / "after.html")
    findings = summary["series"][0]["findings"]
    run_id = summary["runs"][0]["run_id"]
    assert (
        f"Run {run_id} lost load worker vm_1f2e after level 50 concurrent had ended, while no "
        "level ran (0 requests in flight abandoned): no level held less than its load for it."
    ) in findings
    # the level's short concurrency is the client's to explain, not the loss's
    assert any(f.startswith(SHORT) and "first at 50 (" in f for f in findings)
