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
from vllm_load.run.live_verdict import NO_SCRAPING, NOT_YET, LiveVerdicts, evidence_of
from vllm_load.run.server_metrics import MetricsScraper

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
