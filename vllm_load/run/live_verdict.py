"""The bottleneck verdict of each level while a test runs, for the web UI (the LLM tab's table,
the `/llm` page's header), on the master: from the `/metrics` scrapes the scraper keeps in
memory (`server_metrics.MetricsScraper.recent`), over the level so far, by the report's rules
(`analysis.diagnosis.verdict.level_verdict`). Plain Python: the master never imports pandas.

The evidence is the report's (`analysis.diagnosis.evidence`), from the first scrape of the level
to the latest: requests in the batch and waiting by Little's law on the time-in-RUNNING and
queue-time histograms' sums (their gauges where the histograms are missing), KV-cache usage at
its highest, preemptions per second, tokens and time per engine step, prefill steps; gauges are
averaged over the scrapes (taken at a steady interval). Unlike the report's measured window, the
level's ramp-up is in it, as in the live table's other figures.

Two things differ from the report, which knows the whole ladder:

- Where the knee is, is not known yet: a level counts as saturated when the server holds
  requests back (`WAITING_MIN` waiting) or its KV cache is full, or when throughput (the
  server's prompt + generated tokens per second) grew less than `GAIN_MIN` from the level below.
  Otherwise it is `not_saturated`, with the figures that show the room left.
- The server's facts are those known at the start (run.json's header: `/v1/models`, `/version`,
  what the user gave; `vllm:cache_config_info` from the first scrape): no sequence cap is inferred
  across levels.

The GPUs' telemetry (--gpu-metrics, --gpu-nvml) is read as the report reads it
(`analysis.diagnosis.gpu_evidence`: a busy GPU supports `compute`, an idle one rules it out):
from the reads the recorder keeps in memory (`gpu_scraper.GpuTelemetry.recent`) over the level
so far, each GPU's utilisation and SM activity averaged over its reads (taken at a steady
interval) and then over the GPUs, its power summed over them.

A level with fewer than two scrapes so far has no verdict yet (`NOT_YET`). Each level's verdict
is fixed when the next level (or the drain) starts.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING, Sequence

from ..analysis.diagnosis.facts import ServerFacts, server_facts
from ..analysis.diagnosis.gpu_evidence import GpuEvidence
from ..analysis.diagnosis.kinds import NOT_SATURATED, UNDETERMINED, Bottleneck
from ..analysis.diagnosis.verdict import (
    WAITING_MIN,
    LevelEvidence,
    client_over_compute,
    level_verdict,
    with_baseline,
)
from ..analysis.number_text import signed_pct
from ..server.dcgm import GPU_UTIL, POWER, SM_ACTIVE

if TYPE_CHECKING:
    from .gpu_scraper import GpuSample, GpuTelemetry
    from .server_metrics import MetricsScraper

NOT_YET = "not yet"
GAIN_MIN = 0.05  # throughput grew less than this share from the level below: saturated
NO_SCRAPING = "the run does not scrape the server's /metrics (--metrics-interval 0)"

Sample = tuple[float, dict[str, float]]  # a scrape's time and figures (`MetricsScraper.recent`)


def _finite(x: float | None) -> bool:
    return x is not None and x == x and not math.isinf(x)


def evidence_of(
    samples: Sequence[Sample], since: float, until: float, users: float
) -> LevelEvidence | None:
    """A level's evidence from the scrapes in [since, until]; None with fewer than two there."""
    inside = [(t, v) for t, v in samples if since <= t <= until]
    if len(inside) < 2:
        return None
    (a, first), (b, last) = inside[0], inside[-1]
    window = b - a

    def delta(column: str) -> float:
        x, y = first.get(column, math.nan), last.get(column, math.nan)
        return y - x if _finite(x) and _finite(y) and y >= x else math.nan  # (a restart: unknown)

    def per(num: float, den: float) -> float:
        return num / den if _finite(num) and _finite(den) and den > 0 else math.nan

    def gauge(column: str, how=lambda xs: sum(xs) / len(xs)) -> float:
        xs = [v[column] for _, v in inside if _finite(v.get(column))]
        return how(xs) if xs else math.nan

    batch = per(delta("inference_time_sum"), window)
    queued = per(delta("queue_time_sum"), window)
    steps = delta("steps")
    step_time = per(window, steps)
    prefill = per(delta("prefill_time_sum"), delta("prefill_time_count"))
    evidence = LevelEvidence(
        value=users,  # the live table names a level by its Locust users
        tok_per_s=per(delta("prompt_tokens_total") + delta("generation_tokens_total"), window),
        batch=batch if _finite(batch) else gauge("running"),
        queued=queued if _finite(queued) else gauge("waiting"),
        queue_time=per(delta("queue_time_sum"), delta("queue_time_count")),
        waiting_capacity=gauge("waiting_capacity"),
        kv_max=gauge("kv_cache_usage", max),
        preemptions_per_s=per(delta("preemptions_total"), window),
        step_tokens=per(delta("step_tokens_sum"), steps),
        step_time=step_time,
        prefill_steps=per(prefill, step_time),
    )
    return evidence


def gpu_evidence_of(
    samples: Sequence[GpuSample], since: float, until: float, simulated: bool = False
) -> GpuEvidence:
    """The GPUs' figures from their reads in [since, until] (NaN where none was read), as
    `analysis.levels.gpu.level_gpu_figures` gives a level's: utilisation (as a share) and SM
    activity the mean over the GPUs of each one's mean, power the sum of each one's mean (NaN
    unless every GPU read one)."""
    per_gpu: dict[tuple, dict[str, list[float]]] = {}
    for t, gpus in samples:
        if since <= t <= until:
            for key, figures in gpus.items():
                mine = per_gpu.setdefault(key, {})
                for figure, value in figures.items():
                    if _finite(value):
                        mine.setdefault(figure, []).append(value)

    def means(figure: str) -> list[float]:
        return [
            sum(v[figure]) / len(v[figure]) if v.get(figure) else math.nan for v in per_gpu.values()
        ]

    def mean_of_known(xs: list[float]) -> float:
        known = [x for x in xs if _finite(x)]
        return sum(known) / len(known) if known else math.nan

    power = means(POWER)
    return GpuEvidence(
        util=mean_of_known(means(GPU_UTIL)) / 100.0,
        sm_active=mean_of_known(means(SM_ACTIVE)),
        power_w=sum(power) if power and all(_finite(p) for p in power) else math.nan,
        simulated=simulated,
    )


def live_verdict(
    lv: LevelEvidence, below: LevelEvidence | None, facts: ServerFacts, below_kind: str = ""
) -> Bottleneck:
    """A level's verdict so far (see the module's docstring for how the knee is guessed);
    `below_kind`: the level below's verdict (a late client over a compute-bound level names
    both, as the report's `client_over_compute`)."""
    gain = (
        lv.tok_per_s / below.tok_per_s - 1
        if below is not None and below.tok_per_s > 0
        else math.nan
    )
    stalled = _finite(gain) and gain < GAIN_MIN
    verdict = level_verdict(lv, below, facts, lv.waits or lv.kv_full(facts) or stalled)
    if verdict.kind != NOT_SATURATED.name:
        return client_over_compute(verdict, lv, below, below_kind)
    room = [
        f"{lv.queued:.1f} requests waiting (fewer than {WAITING_MIN})"
        if _finite(lv.queued)
        else "",
        f"KV-cache usage at most {lv.kv_max:.0%}" if _finite(lv.kv_max) else "",
        f"throughput {signed_pct(gain)} from the level below" if _finite(gain) else "",
    ]
    return replace(verdict, reason="room left: " + ", ".join(r for r in room if r))


class LiveVerdicts:
    """The verdict of every level of the test so far, from `scraper`'s scrapes (None: the run
    does not scrape), the GPUs' reads of `gpu` (None, or no sources: not recorded) and the facts
    of run.json's `header`."""

    def __init__(
        self, scraper: MetricsScraper | None, header: dict, gpu: GpuTelemetry | None = None
    ) -> None:
        self.scraper = scraper
        self.header = header
        self.gpu = gpu
        self.current: tuple[int, float, float] | None = None  # level, users, start
        self.fixed: dict[int, dict] = {}  # the levels that ended: their verdict
        self.below: LevelEvidence | None = None  # the last level that ended with evidence
        self.below_kind = ""  # ... and its verdict
        self.lowest: LevelEvidence | None = None  # the first, whose prefill steps are the base

    def facts(self) -> ServerFacts:
        scraped = self.scraper.status.cache_config if self.scraper is not None else {}
        return server_facts({**self.header, "server_metrics": {"cache_config": scraped}})

    def level_started(self, level: int, users: float, at: float) -> None:
        self.level_ended(at)
        self.current = (level, users, at)

    def level_ended(self, at: float) -> None:
        """Fix the current level's verdict over its scrapes up to `at` (a level or drain start)."""
        if self.current is None:
            return
        level, users, start = self.current
        verdict, evidence = self._judge(users, start, at)
        self.fixed[level] = verdict
        if evidence is not None:
            self.below, self.below_kind = evidence, verdict["kind"]
            if self.lowest is None:
                self.lowest = evidence
        self.current = None

    def _judge(self, users: float, since: float, until: float) -> tuple[dict, LevelEvidence | None]:
        if self.scraper is None:
            return {"kind": UNDETERMINED.name, "reason": NO_SCRAPING}, None
        status = self.scraper.status
        if not status.samples and status.note:
            return {
                "kind": UNDETERMINED.name,
                "reason": f"no /metrics from the server: {status.note}",
            }, None
        evidence = evidence_of(list(self.scraper.recent), since, until, users)
        if evidence is None:
            return {
                "kind": NOT_YET,
                "reason": "fewer than two /metrics scrapes in this level so far",
            }, None
        if self.gpu is not None:  # the GPUs' figures, as the report's `compute` reads them
            gpu = gpu_evidence_of(list(self.gpu.recent), since, until, self.gpu.simulated)
            evidence = replace(evidence, gpu=gpu)
        if self.lowest is not None:  # prefill steps against the lowest level's (verdict.py)
            evidence = with_baseline([self.lowest, evidence])[1]
        verdict = live_verdict(evidence, self.below, self.facts(), self.below_kind)
        return {"kind": verdict.kind, "reason": verdict.reason}, evidence

    def verdicts(self, now: float) -> dict[int, dict]:
        """Level -> its verdict ({"kind", "reason"}), the current level's as of `now`."""
        out = dict(self.fixed)
        if self.current is not None:
            level, users, start = self.current
            out[level] = self._judge(users, start, now)[0]
        return out
