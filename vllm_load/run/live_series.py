"""The live time series behind the web UI's charts: a bounded list of points over the whole test.

Each point stands for the end of a step (1 s to begin with) and holds the figures of its window
(the 5 s before it, or the step once it is longer): total and output tokens/s, counted as they
were received (`tokens`); TTFT p50/p99, ITL p99 and failed requests/s of the requests that
finished in it; and the last sample before it of the requests in flight and the users running
(`sample`, taken by the run session on every shape tick, about once a second). Each point also
holds the figures of every persona (user class) active in its window (`PERSONA_FIGURES`), for the
charts by persona. Level marks say when each level started (and when the last level's drain did).

Only what the master already receives goes in: the record rows (by the second they ended in),
and each load process's running count of the tokens its requests have received
(`client/streamed.py`, in every worker report), never anything per chunk. Tokens are not taken
from the rows: a closed loop finishes its requests in waves, and a window counting the tokens of
the requests that finished in it holds 2 or 3 waves by turns (a saw-tooth of ±20 % at constant
load). A point is closed once its window is `settle` seconds old, so rows and counts that ride
in a worker report (sent every second) are in it; a row later still counts in the next point.
Memory stays bounded whatever the test's length: per-second buckets only for the seconds a point
still needs, and at most `max_points` points: past that, every other point is dropped and the
step doubles (a 20-minute test keeps one point a second).
"""

from __future__ import annotations

import math
from collections import Counter

from ..run_format.histogram import bucket_value

WINDOW_SECONDS = 5
SETTLE_SECONDS = 2.0
MAX_POINTS = 1200

#: the figures of a point, in the order of `Timeline.points`' tuples after the time
FIGURES = (
    "total_tok_per_s",
    "output_tok_per_s",
    "ttft_p50_ms",
    "ttft_p99_ms",
    "itl_p99_ms",
    "errors_per_s",
    "in_flight",
    "users",
)
#: the figures of each persona in a point: those of the whole that are the requests' own
PERSONA_FIGURES = FIGURES[:6]


class _Second:
    """One second: the requests that finished in it (counts, latency histograms: bucket -> count)
    and the tokens received in it."""

    __slots__ = ("ok", "failed", "tokens_in", "tokens_out", "ttft", "itl")

    def __init__(self) -> None:
        self.ok = self.failed = 0
        self.tokens_in = self.tokens_out = 0.0
        self.ttft: Counter[int] = Counter()
        self.itl: Counter[int] = Counter()

    def update(self, other: _Second) -> None:
        self.ok += other.ok
        self.failed += other.failed
        self.tokens_in += other.tokens_in
        self.tokens_out += other.tokens_out
        self.ttft.update(other.ttft)
        self.itl.update(other.itl)

    def figures(self, span: int) -> tuple:
        """`PERSONA_FIGURES` of a window of `span` seconds."""
        return (
            round((self.tokens_in + self.tokens_out) / span, 1),
            round(self.tokens_out / span, 1),
            _percentile_ms(self.ttft, 50),
            _percentile_ms(self.ttft, 99),
            _percentile_ms(self.itl, 99),
            round(self.failed / span, 2),
        )


def _percentile_ms(counts: Counter[int], q: float) -> float | None:
    total = sum(counts.values())
    if not total:
        return None
    rank, seen = max(1, math.ceil(q / 100.0 * total)), 0
    for bucket in sorted(counts):
        seen += counts[bucket]
        if seen >= rank:
            return round(bucket_value(bucket) * 1000, 1)
    return None  # pragma: no cover (the ranks add up to the total)


class Timeline:
    """Points every `step` seconds from the first activity until `stop`, at most `max_points`."""

    def __init__(
        self,
        window: int = WINDOW_SECONDS,
        settle: float = SETTLE_SECONDS,
        max_points: int = MAX_POINTS,
    ) -> None:
        self.window, self.settle, self.max_points = window, settle, max_points
        self.step = 1
        self.points: list[tuple] = []  # (t, *FIGURES, {persona: PERSONA_FIGURES' tuple})
        self.marks: list[dict] = []
        self._seconds: dict[int, dict[str, _Second]] = {}  # second -> persona -> what finished
        self._samples: list[tuple[float, int, int]] = []  # (time, users, in flight), recent only
        self._next: int | None = None  # end of the next point to close
        self._stop_at: float | None = None

    # input ---------------------------------------------------------------------------------------
    def _begin(self, t: float) -> None:
        if self._next is None:
            self._next = (int(t) // self.step + 1) * self.step

    def mark(
        self,
        t: float,
        kind: str,
        level: int,
        users: int,
        rate: float | None = None,
        label: str = "",
    ) -> None:
        """A level boundary: `kind` "start" (a level began) or "drain" (the last level's users
        stopped sending); starting again after `stop` (a new test from the UI) goes on from here.
        `label`: the level as its kind of load names it (`load_kinds`), for the charts."""
        self._stop_at = None
        self._begin(t)
        mark = {"t": t, "kind": kind, "level": level, "users": users, "rate": rate}
        self.marks.append({**mark, "label": label} if label else mark)

    def sample(self, t: float, users: int, in_flight: int) -> None:
        if self._stop_at is not None:
            return
        self._begin(t)
        self._samples.append((t, users, in_flight))

    def _entry(self, second: int, persona: str) -> _Second:
        """The bucket of one persona in one second; a second whose points are closed gives the
        next open one (whose points are the next to close)."""
        assert self._next is not None
        second = max(second, self._next - 1)
        personas = self._seconds.get(second)
        if personas is None:
            personas = self._seconds[second] = {}
        entry = personas.get(persona)
        if entry is None:
            entry = personas[persona] = _Second()
        return entry

    def add(
        self,
        end_ts: float,
        ok: bool,
        ttft_bucket: int | None,
        itl: list[tuple[int, int]],
        persona: str = "",
    ) -> None:
        """One finished request, by the second it ended in (a late one: the next open second);
        `ttft_bucket` its TTFT's histogram bucket (None: no first token), `itl` its ITL
        histogram's (bucket, count) pairs, `persona` its user class."""
        self._begin(end_ts)
        entry = self._entry(int(end_ts), persona)
        if not ok:
            entry.failed += 1
            return
        entry.ok += 1
        if ttft_bucket is not None:
            entry.ttft[ttft_bucket] += 1
        counts = entry.itl
        for bucket, count in itl:
            counts[bucket] += count

    def tokens(
        self, since: float, until: float, tokens_in: float, tokens_out: float, persona: str = ""
    ) -> None:
        """Prompt and output tokens received from `since` to `until` (one process's count between
        two of its reports), spread evenly over that time, second by second."""
        self._begin(until)
        span = until - since
        if span <= 0:
            entry = self._entry(int(until), persona)
            entry.tokens_in += tokens_in
            entry.tokens_out += tokens_out
            return
        second = int(since)
        while second < until:
            share = (min(until, second + 1) - max(since, second)) / span
            entry = self._entry(second, persona)
            entry.tokens_in += tokens_in * share
            entry.tokens_out += tokens_out * share
            second += 1

    def stop(self, t: float) -> None:
        """The test is over at `t`: close the points up to it, and take no more."""
        self._stop_at = t

    # points --------------------------------------------------------------------------------------
    def advance(self, now: float) -> None:
        """Close every point whose window is at least `settle` seconds old (and not past `stop`)."""
        if self._next is None:
            return
        limit = now - self.settle
        if self._stop_at is not None:
            limit = min(limit, self._stop_at + self.step)  # the point that holds the stop
        while self._next <= limit:
            self._close(self._next)
            self._next += self.step
            if len(self.points) > self.max_points:
                self._halve()

    def _close(self, t: int) -> None:
        span = max(self.window, self.step)
        by_persona: dict[str, _Second] = {}
        for second in range(t - span, t):
            for persona, entry in self._seconds.get(second, {}).items():
                mine = by_persona.get(persona)
                if mine is None:
                    mine = by_persona[persona] = _Second()
                mine.update(entry)
        total = _Second()
        for mine in by_persona.values():
            total.update(mine)
        users = in_flight = 0
        for at, sampled_users, sampled_flight in self._samples:
            if at >= t:
                break
            users, in_flight = sampled_users, sampled_flight
        self.points.append(
            (
                t,
                *total.figures(span),
                in_flight,
                users,
                {persona: mine.figures(span) for persona, mine in by_persona.items()},
            )
        )
        # keep what the next points need: their windows, and a window twice as long (after a halving)
        keep_from = t + self.step - 2 * max(self.window, 2 * self.step)
        for second in [s for s in self._seconds if s < keep_from]:
            del self._seconds[second]
        while len(self._samples) > 1 and self._samples[1][0] < t:
            self._samples.pop(0)

    def _halve(self) -> None:
        """Every other point goes (those off the doubled step's grid); later points come at it."""
        self.step *= 2
        self.points = [p for p in self.points if p[0] % self.step == 0]
        assert self._next is not None
        self._next = -(-self._next // self.step) * self.step

    def as_dict(self, now: float, since: float | None = None) -> dict:
        """The points (after `since`, when given) as columns, the step, the window and the marks;
        `personas`: {persona: {figure: column}}, None where a point has nothing of it."""
        self.advance(now)
        points = self.points
        if since is not None:
            first = len(points)
            while first > 0 and points[first - 1][0] > since:
                first -= 1
            points = points[first:]
        columns = list(zip(*points)) if points else [()] * (len(FIGURES) + 2)
        names = sorted({persona for p in points for persona in p[-1]})
        empty = (None,) * len(PERSONA_FIGURES)
        personas = {
            name: {
                figure: [p[-1].get(name, empty)[i] for p in points]
                for i, figure in enumerate(PERSONA_FIGURES)
            }
            for name in names
        }
        return {
            "step": self.step,
            "window": max(self.window, self.step),
            "t": list(columns[0]),
            **{name: list(columns[i + 1]) for i, name in enumerate(FIGURES)},
            "personas": personas,
            "marks": self.marks,
        }
