"""Live per-level figures on the master, for the web UI while a test runs.

Fed with every attributed record row as it arrives; cheap per row (counters and mergeable
histograms); the time series for the charts is `timeline`'s, whose tokens/s come from the load
processes' counts of the tokens received so far (`streamed`), not from the rows. The levels'
figures are running figures over every finished request of a level, warm-up included; the
report's figures over each level's measured window are the ones to publish. With `verdicts`
(`live_verdict.LiveVerdicts`), each level carries its bottleneck verdict so far too.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from dataclasses import dataclass, field

from ..figures import Figure
from ..run_format.histogram import LogHistogram, bucket_of
from ..run_format.records import CANCELLED, COLUMNS
from .live_figures import LivePlan
from .live_series import Timeline
from .live_verdict import LiveVerdicts

_I = {name: COLUMNS.index(name) for name in COLUMNS}
_START, _END, _OK = (_I[c] for c in ("start_ts", "end_ts", "ok"))
_PROMPT, _REQUESTED_PROMPT = _I["prompt_tokens"], _I["requested_prompt_tokens"]
_COMPLETION = _I["completion_tokens"]
_LEVEL, _USERS, _USER_CLASS = _I["level"], _I["users"], _I["user_class"]
_TARGET, _ERROR = _I["target"], _I["error"]


@dataclass(slots=True)
class Finished:
    """What the live figures take from one record row (`LivePlan`: which columns): read once,
    then added to its level, its persona and the timeline (on the master, for every request)."""

    start: float
    end: float
    ok: bool
    tokens_in: int
    tokens_out: int
    buckets: list[int | None]  # per `LivePlan.timed`: its histogram bucket (None: no value)
    hists: list[list[tuple[int, int]]]  # per `LivePlan.histogram`: (bucket, count) pairs
    sums: list[float | None]  # per `LivePlan.summed`: the row's count (None: none)
    cancelled: bool = False  # closed by the client on purpose: neither a success nor a failure

    @classmethod
    def of(cls, row, plan: LivePlan) -> Finished:
        ok = bool(row[_OK])
        if ok:
            buckets = [None if (v := row[i]) is None else bucket_of(v) for i in plan.timed_at]
            hists = [parse_counts(row[i]) for i in plan.histogram_at]
            sums = [row[i] for i in plan.summed_at]
        else:  # a failure counts as one, and nothing of it goes into the figures
            buckets = [None] * len(plan.timed)
            hists = [[] for _ in plan.histogram]
            sums = [None] * len(plan.summed)
        return cls(
            row[_START],
            row[_END],
            ok,
            row[_PROMPT] or row[_REQUESTED_PROMPT] or 0,
            row[_COMPLETION] or 0,
            buckets,
            hists,
            sums,
            not ok and row[_ERROR] == CANCELLED,
        )


#: the persona of rows without a user class
UNNAMED = "(unnamed)"


@dataclass
class LiveLevel:
    """Running figures of one level, or of one persona (user class) within it: counts, and per
    per-request quantity of `plan` (by its `figures.PerRequest` key) a log histogram (`hists`:
    seconds) or a running [sum, count] (`sums`: tokens)."""

    level: int
    users: int
    user_class: str = ""
    plan: LivePlan = field(default_factory=LivePlan, repr=False)
    target: str = ""  # a target's tally, of a test of several (--hosts)
    ok: int = 0
    failed: int = 0
    cancelled: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    first_start: float = math.inf
    last_end: float = 0.0
    hists: dict[str, LogHistogram] = field(default_factory=dict)
    sums: dict[str, list[float]] = field(default_factory=dict)
    # the same tallies in the plan's order, for `add`
    _timed: list[Counter[int]] = field(init=False, repr=False)
    _histogram: list[Counter[int]] = field(init=False, repr=False)
    _sums: list[list[float]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        plan = self.plan
        for key, _ in (*plan.timed, *plan.histogram):
            self.hists.setdefault(key, LogHistogram())
        for key, _ in plan.summed:
            self.sums.setdefault(key, [0.0, 0])
        self._timed = [self.hists[key].counts for key, _ in plan.timed]
        self._histogram = [self.hists[key].counts for key, _ in plan.histogram]
        self._sums = [self.sums[key] for key, _ in plan.summed]

    def add(self, done: Finished) -> None:
        """One finished request."""
        # (for every request on the master: comparisons and dict.get, cheaper than min, max and
        # a Counter's += on a new bucket)
        if done.start < self.first_start:
            self.first_start = done.start
        if done.end > self.last_end:
            self.last_end = done.end
        if not done.ok:
            if done.cancelled:
                self.cancelled += 1
            else:
                self.failed += 1
            return
        self.ok += 1
        self.input_tokens += done.tokens_in
        self.output_tokens += done.tokens_out
        for counts, bucket in zip(self._timed, done.buckets):
            if bucket is not None:
                counts[bucket] = counts.get(bucket, 0) + 1
        for counts, pairs in zip(self._histogram, done.hists):
            get = counts.get
            for bucket, count in pairs:
                counts[bucket] = get(bucket, 0) + count
        for tally, value in zip(self._sums, done.sums):
            if value is not None:
                tally[0] += value
                tally[1] += 1

    def absorb(self, other: LiveLevel) -> None:
        """Add another tally's figures to this one's (a level is the sum of its personas)."""
        self.first_start = min(self.first_start, other.first_start)
        self.last_end = max(self.last_end, other.last_end)
        self.ok += other.ok
        self.failed += other.failed
        self.cancelled += other.cancelled
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        for key, hist in other.hists.items():
            self.hists[key].counts.update(hist.counts)
        for key, (total, count) in other.sums.items():
            self.sums[key][0] += total
            self.sums[key][1] += count

    def as_dict(self) -> dict:
        """The level's row: who and how many, then every figure the plan computes (its
        `LiveColumn.key`; None where there is nothing yet)."""
        span = self.last_end - self.first_start if self.last_end > self.first_start else math.nan
        finished = self.ok + self.failed
        row: dict = {
            "level": self.level,
            "users": self.users,
            **({"user_class": self.user_class} if self.user_class else {}),
            **({"target": self.target} if self.target else {}),
            "finished": finished,
        }
        for column in self.plan.computed:
            row[column.key] = self.figure(column.figure, span, finished)
        return row

    def figure(self, figure: Figure, span: float, finished: int) -> float | None:
        """One figure's running value: latencies in ms, the success rate in %."""
        source = figure.source
        if source is None:  # one of `live_figures.LEVEL_KEYS`
            if figure.key == "success_rate":
                return round(100.0 * self.ok / finished, 2) if finished else None
            if not span > 0:
                return None
            done = {
                "req_per_s": finished,
                "total_tok_per_s": self.input_tokens + self.output_tokens,
                "output_tok_per_s": self.output_tokens,
            }[figure.key]
            return round(done / span, 1)
        if source.unit == "s":
            hist = self.hists[source.key]
            if not hist.total:
                return None
            q = figure.percentile
            return round((hist.mean() if q is None else hist.percentile(q)) * 1000, 1)
        total, count = self.sums[source.key]
        return round(total / count, 1) if count else None


def parse_counts(text: str) -> list[tuple[int, int]]:
    """The (bucket, count) pairs of a `bucket:count;...` histogram text (parsed once per row:
    one split and `int` over all the numbers, then paired)."""
    if not text:
        return []
    numbers = map(int, text.replace(";", ":").split(":"))
    return list(zip(numbers, numbers))


class LiveStats:
    """Per-level running figures and the test's time series (`timeline`) for the charts.

    Each request is tallied once, in its level's persona (user class); a level's figures are
    the sum of its personas', made when a snapshot is asked for (every few seconds), not per
    request.
    """

    def __init__(self) -> None:
        self.users: dict[int, int] = {}  # every level started or seen, with its users
        self.personas: dict[tuple[int, str], LiveLevel] = {}  # per level and user class
        self.targets: dict[tuple[int, str], LiveLevel] = {}  # per level and target (--hosts)
        self.current_level: int | None = None
        self.current_users = 0
        self.timeline = Timeline()
        self._streamed: dict[str, tuple[float, dict]] = {}  # process -> its last token counts
        self.verdicts: LiveVerdicts | None = None  # each level's bottleneck verdict, when judged
        self.plan = LivePlan()  # what the levels show (`figures.LIVE`), read once

    def level_started(
        self,
        level: int,
        users: int,
        at: float | None = None,
        rate: float | None = None,
        label: str = "",
    ) -> None:
        """A level began; `label` names it as its kind of load does (`64 users`, `0 s into the
        trace`) on the charts."""
        at = time.time() if at is None else at
        self.current_level, self.current_users = level, users
        self.users.setdefault(level, users)
        self.timeline.mark(at, "start", level, users, rate, label)
        if self.verdicts is not None:
            self.verdicts.level_started(level, users if rate is None else rate, at)

    def drain_started(self, level: int, users: int, at: float) -> None:
        self.timeline.mark(at, "drain", level, users)
        if self.verdicts is not None:
            self.verdicts.level_ended(at)

    def sample(self, now: float, users: int, in_flight: int) -> None:
        """The users running and the requests in flight now (the run session's shape tick)."""
        self.timeline.sample(now, users, in_flight)

    def stopped(self, at: float) -> None:
        self.timeline.stop(at)
        if self.verdicts is not None:
            self.verdicts.level_ended(at)

    def add(self, row) -> Finished:
        """One attributed record row: to its level's persona and the timeline. Returns what it
        read of the row, for the run's other per-row tallies (`prometheus_export`) to reuse."""
        plan = self.plan
        done = Finished.of(row, plan)
        level = row[_LEVEL]
        key = (level, row[_USER_CLASS] or "")
        persona = self.personas.get(key)
        if persona is None:
            users = self.users.setdefault(level, row[_USERS])
            persona = self.personas[key] = LiveLevel(level, users, key[1] or UNNAMED, plan)
        persona.add(done)
        if target := row[_TARGET]:  # (a test of several targets: each one's tally too)
            tally = self.targets.get((level, target))
            if tally is None:
                tally = self.targets[(level, target)] = LiveLevel(
                    level, persona.users, plan=plan, target=target
                )
            tally.add(done)
        if done.cancelled:  # (in no rate of the charts: no success, no failure)
            return done
        self.timeline.add(
            done.end,
            done.ok,
            done.buckets[plan.ttft_at],
            done.hists[plan.itl_at],
            persona.user_class,
        )
        return done

    def streamed(self, process: str, at: float, counts: dict[str, list[float]]) -> None:
        """One load process's tokens received so far, per user class, at `at` (its
        `client.streamed.StreamedTokens.report`): what they grew by since its previous report
        goes to the timeline, spread over the time between the two. A process's first report
        in a test only sets where it starts from (its counts run from when it started)."""
        before = self._streamed.get(process)
        self._streamed[process] = (at, counts)
        if before is None:
            return
        since, earlier = before
        for user_class, (tokens_in, tokens_out) in counts.items():
            was_in, was_out = earlier.get(user_class, (0.0, 0.0))
            if tokens_in != was_in or tokens_out != was_out:
                self.timeline.tokens(
                    since, at, tokens_in - was_in, tokens_out - was_out, user_class or UNNAMED
                )

    def level(self, level: int) -> LiveLevel:
        """One level's figures: the sum of its personas'."""
        total = LiveLevel(level, self.users[level], plan=self.plan)
        for (of_level, _), persona in self.personas.items():
            if of_level == level:
                total.absorb(persona)
        return total

    def snapshot(self, now: float, series: bool = True, since: float | None = None) -> dict:
        """The levels (and personas); with `series`, the time series too (only its points after
        `since`, when given: a page that has the earlier ones asks for the new ones only)."""
        levels = [self.level(k).as_dict() for k in sorted(self.users)]
        # a figure shown only with another (TTFAT: with reasoning) is shown where a level has it
        present = lambda key: any((row[key] or 0) > 0 for row in levels)  # noqa: E731
        verdict = None
        if self.verdicts is not None:  # each level's verdict: kind, and the figures it stands on
            judged = self.verdicts.verdicts(now)
            for row in levels:
                found = judged.get(row["level"])
                row["verdict"] = found["kind"] if found else None
                row["verdict_reason"] = found["reason"] if found else None
            if self.current_level in judged:
                verdict = {"level": self.current_level, **judged[self.current_level]}
        data: dict = {
            "current_level": self.current_level,
            "current_users": self.current_users,
            "verdict": verdict,  # the current level's (None when not judged)
            # the figures of the levels' table, in order: [key in each row, header]
            "figures": self.plan.table_columns(present),
            "levels": levels,
            # always, so that Locust's "LLM by persona" tab names the one persona there is;
            # the /llm page shows its persona table only when there are several
            "personas": [self.personas[k].as_dict() for k in sorted(self.personas)],
            # a test of several targets (--hosts): per level and target ([] with one)
            "targets": [self.targets[k].as_dict() for k in sorted(self.targets)],
        }
        if series:
            data["series"] = self.timeline.as_dict(now, since)
        return data
