"""The live verdict of each level (`run.live_verdict`), on recorded scrapes.

tests/data/sim_max_num_seqs_4_server_metrics.csv is the server_metrics.csv of a run against
`vllm-load sim --max-num-seqs 4 --time-scale 0.2` (`vllm-load run --levels 1,2,8,16
--input-tokens 128 --output-tokens 32`), scraped every second; `LEVEL_STARTS` are the levels'
starts from its steps.csv. At 1 and 2 users nothing waits; at 8 and 16 four requests run and the
rest wait.
"""

from __future__ import annotations

import csv
import math
import os

import pytest
from support import DATA

from vllm_load.run.live import LiveStats
from vllm_load.run.live_verdict import (
    NO_SCRAPING,
    NOT_YET,
    LiveVerdicts,
    evidence_of,
    gpu_evidence_of,
)
from vllm_load.run.server_metrics import MetricsScraper
from vllm_load.server.dcgm import GPU_UTIL, POWER, SM_ACTIVE

RECORDED = os.path.join(DATA, "sim_max_num_seqs_4_server_metrics.csv")
LEVEL_STARTS = (
    (1, 1795643257.9718037),
    (2, 1795643266.7857332),
    (8, 1795643271.7895906),
    (16, 1795643274.8035216),
)
DRAIN = 1795643277.9129846
HEADER = {"model": "sim-llama-8b", "target": {}, "settings": {}}


def recorded() -> list[tuple[float, dict[str, float]]]:
    """The recorded scrapes as `MetricsScraper.recent` holds them (NaN for an empty cell)."""
    with open(RECORDED, newline="") as fh:
        rows = list(csv.DictReader(fh))
    return [
        (
            float(r.pop("ts")),
            {k: float(v) if v else math.nan for k, v in r.items() if k != "fetch_s"},
        )
        for r in rows
    ]


class Replay:
    """A scraper that has taken the recorded scrapes up to a time."""

    def __init__(self, until: float = math.inf):
        self.status = MetricsScraper("http://127.0.0.1:1", "/dev/null").status
        self.recent = [s for s in recorded() if s[0] <= until]
        self.status.samples = len(self.recent)


def judged(header: dict, until: float = DRAIN) -> dict[int, dict]:
    """Each level's verdict, the levels played to `until` (the drain when it is reached)."""
    verdicts = LiveVerdicts(Replay(until), header)
    for level, (users, start) in enumerate(LEVEL_STARTS):
        if start <= until:
            verdicts.level_started(level, users, start)
    if until >= DRAIN:
        verdicts.level_ended(DRAIN)
    return verdicts.verdicts(until)


def test_a_given_sequence_cap_names_the_levels_it_holds_back():
    given = {**HEADER, "meta": {"config.max_num_seqs": "4"}}
    verdicts = judged(given)
    assert [verdicts[lv]["kind"] for lv in range(4)] == [
        "not_saturated",
        "not_saturated",
        "max_num_seqs",
        "max_num_seqs",
    ]
    assert (
        verdicts[0]["reason"]
        == "room left: 0.0 requests waiting (fewer than 0.5), KV-cache usage at most 0%"
    )
    assert verdicts[1]["reason"].startswith(
        "room left: 0.0 requests waiting (fewer than 0.5), KV-cache usage at most 0%, throughput +"
    )
    assert verdicts[2]["reason"].startswith(
        "the batch is full: 4.0 requests in it against --max-num-seqs 4 (given), "
    )
    assert " waiting" in verdicts[3]["reason"]


def test_without_the_cap_the_waiting_levels_stay_undetermined_and_say_why():
    verdicts = judged(HEADER)  # nothing inferred live: the cap is not known
    for level in (2, 3):
        assert verdicts[level]["kind"] == "undetermined"
        assert "no sequence cap or token budget is known to explain it" in verdicts[level]["reason"]


def test_a_level_has_no_verdict_before_its_second_scrape_and_keeps_it_once_over():
    start = LEVEL_STARTS[2][1]
    first = next(t for t, _ in recorded() if t >= start)
    verdicts = judged({**HEADER, "meta": {"config.max_num_seqs": "4"}}, until=first + 0.01)
    assert verdicts[2] == {
        "kind": NOT_YET,
        "reason": "fewer than two /metrics scrapes in this level so far",
    }
    assert verdicts[1]["kind"] == "not_saturated"  # fixed when level 2 started

    # a level's verdict is fixed at the next start: later scrapes do not change it
    live = LiveVerdicts(Replay(), {**HEADER, "meta": {"config.max_num_seqs": "4"}})
    live.level_started(0, 8, LEVEL_STARTS[2][1])
    live.level_started(1, 16, LEVEL_STARTS[3][1])
    fixed = live.verdicts(DRAIN)[0]
    live.scraper.recent = [
        (t, {**v, "waiting": 0.0, "queue_time_sum": 0.0}) for t, v in live.scraper.recent
    ]
    assert live.verdicts(DRAIN)[0] == fixed and fixed["kind"] == "max_num_seqs"


def test_the_evidence_is_the_counters_growth_over_the_level_so_far():
    lo, hi = LEVEL_STARTS[2][1], LEVEL_STARTS[3][1]
    inside = [(t, v) for t, v in recorded() if lo <= t <= hi]
    ev = evidence_of(recorded(), lo, hi, 8)
    (a, first), (b, last) = inside[0], inside[-1]
    assert ev.queued == pytest.approx((last["queue_time_sum"] - first["queue_time_sum"]) / (b - a))
    tokens = sum(last[c] - first[c] for c in ("prompt_tokens_total", "generation_tokens_total"))
    assert ev.tok_per_s == pytest.approx(tokens / (b - a))
    assert ev.batch == pytest.approx(4.0)  # the running gauge: no time-in-RUNNING histogram here
    assert ev.kv_max == max(v["kv_cache_usage"] for _, v in inside)
    assert ev.preemptions_per_s == 0.0 and math.isnan(ev.step_time)
    assert evidence_of(recorded(), lo, lo + 0.5, 8) is None


def test_without_scraping_or_metrics_every_level_is_undetermined_with_the_reason():
    live = LiveVerdicts(None, HEADER)
    live.level_started(0, 4, 100.0)
    assert live.verdicts(200.0)[0] == {"kind": "undetermined", "reason": NO_SCRAPING}
    scraper = MetricsScraper("http://127.0.0.1:1", "/dev/null")
    scraper.status.note = "server metrics skipped: http://127.0.0.1:1/metrics answered HTTP 404"
    live = LiveVerdicts(scraper, HEADER)
    live.level_started(0, 4, 100.0)
    assert live.verdicts(200.0)[0] == {
        "kind": "undetermined",
        "reason": "no /metrics from the server: server metrics skipped: http://127.0.0.1:1/metrics answered HTTP 404",
    }


def test_the_live_snapshot_carries_each_levels_verdict_and_the_current_one():
    stats = LiveStats()
    stats.verdicts = LiveVerdicts(Replay(), {**HEADER, "meta": {"config.max_num_seqs": "4"}})
    for level, (users, start) in enumerate(LEVEL_STARTS):
        stats.level_started(level, users, at=start)
    snap = stats.snapshot(DRAIN, series=False)
    assert [row["verdict"] for row in snap["levels"]] == [
        "not_saturated",
        "not_saturated",
        "max_num_seqs",
        "max_num_seqs",
    ]
    assert snap["verdict"]["level"] == 3 and snap["verdict"]["kind"] == "max_num_seqs"
    assert snap["levels"][3]["verdict_reason"] == snap["verdict"]["reason"]
    assert LiveStats().snapshot(DRAIN, series=False)["verdict"] is None  # not judged


def test_the_scraper_keeps_its_last_scrapes_in_memory_as_it_writes_them(tmp_path):
    scraper = MetricsScraper("http://127.0.0.1:1", str(tmp_path / "server_metrics.csv"))
    scrapes = iter(v for _, v in recorded()[:3])

    def fetch():
        scraper.sent_at, scraper.fetch_s = 1000.0 + scraper.status.samples, 0.01
        return next(scrapes, None)  # (the fetch after the stop)

    def sleep(_):
        if scraper.status.samples == 3:
            scraper.stop()

    scraper.fetch = fetch
    scraper.run(sleep)
    with open(tmp_path / "server_metrics.csv", newline="") as fh:
        written = list(csv.DictReader(fh))
    assert (
        [t for t, _ in scraper.recent]
        == [float(r["ts"]) for r in written]
        == [1000.005, 1001.005, 1002.005]
    )
    assert [v for _, v in scraper.recent] == [v for _, v in recorded()[:3]]


def _compute_scrapes() -> list[tuple[float, dict[str, float]]]:
    """Two levels of 10 s, one scrape a second: nothing waits, the batch (Little's law on the
    time in RUNNING) doubles from 2 to 4 while throughput grows 2 %: `compute` by the scrapes."""
    out, running, tokens = [], 0.0, 0.0
    for t in range(21):
        out.append(
            (
                float(t),
                {
                    "inference_time_sum": running,
                    "queue_time_sum": 0.0,
                    "prompt_tokens_total": 0.0,
                    "generation_tokens_total": tokens,
                    "waiting": 0.0,
                    "kv_cache_usage": 0.1,
                },
            )
        )
        running += 2.0 if t < 10 else 4.0
        tokens += 100.0 if t < 10 else 102.0
    return out


class _Gpu:
    """A GPU recorder that has read one GPU every second at `sm_active` (and 95 % utilisation)."""

    simulated = False

    def __init__(self, sm_active: float):
        figures = {GPU_UTIL: 95.0, SM_ACTIVE: sm_active, POWER: 300.0}
        self.recent = [(float(t) + 0.5, {("GPU-1",): figures}) for t in range(20)]


def _judged_with(gpu) -> dict[int, dict]:
    scraper = Replay()
    scraper.recent = _compute_scrapes()
    live = LiveVerdicts(scraper, HEADER, gpu)
    live.level_started(0, 4, 0.0)
    live.level_started(1, 8, 10.0)
    live.level_ended(20.0)
    return live.verdicts(20.0)


def test_the_live_verdict_reads_the_gpus_as_the_report_does():
    """The report's `compute` is ruled out by an idle GPU and supported by a busy one; the live
    verdict read only the scrapes, and said `compute` where the report would not."""
    assert _judged_with(None)[1]["kind"] == "compute"  # no GPU recorded: the scrapes alone
    idle = _judged_with(_Gpu(sm_active=0.3))[1]
    assert idle["kind"] == "undetermined" and "the GPU was not busy" in idle["reason"]
    busy = _judged_with(_Gpu(sm_active=0.9))[1]
    assert busy["kind"] == "compute" and "the GPU was busy: SM active 90% → 90%" in busy["reason"]


def test_the_gpu_figures_of_a_level_are_the_means_over_its_reads_and_gpus():
    samples = [
        (1.0, {("a",): {GPU_UTIL: 80.0, SM_ACTIVE: 0.6, POWER: 200.0}, ("b",): {GPU_UTIL: 40.0}}),
        (2.0, {("a",): {GPU_UTIL: 100.0, SM_ACTIVE: 0.8, POWER: 300.0}}),
        (9.0, {("a",): {GPU_UTIL: 0.0, SM_ACTIVE: 0.0, POWER: 0.0}}),  # after the window
    ]
    gpu = gpu_evidence_of(samples, 0.0, 5.0)
    assert gpu.util == pytest.approx((90.0 + 40.0) / 2 / 100)
    assert gpu.sm_active == pytest.approx(0.7)
    assert math.isnan(gpu.power_w)  # GPU b read no power: the sum is unknown
    assert gpu_evidence_of(samples, 1.5, 5.0).power_w == pytest.approx(300.0)
    assert math.isnan(gpu_evidence_of(samples, 20.0, 30.0).util)
