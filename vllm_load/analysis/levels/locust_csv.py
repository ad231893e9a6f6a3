"""Levels and their figures from plain Locust CSVs (`locust --csv PREFIX --csv-full-history`).

What Locust writes (locust/stats.py, `StatsCSVFileWriter`, Locust 2.x), and what is used of it:

- `PREFIX_stats_history.csv` gets rows appended every `CSV_STATS_INTERVAL_SEC` (1 s: a 1 s
  sleep after each write). `Timestamp` is `int(time.time())`, whole seconds, truncated;
  `User Count` the runner's user count at the write. Without `--csv-full-history` a write is
  the `Aggregated` row alone, and its percentile columns cover the whole test so far: nothing
  per level, so such a file is refused. With it a write is one row per request name
  (Type, Name) and then the `Aggregated` row, and every row's percentile columns are Locust's
  *current* percentiles: over the responses logged in about the last 10 s
  (`CURRENT_RESPONSE_TIME_PERCENTILE_WINDOW`: the response-time histogram now minus a copy of
  it taken at a whole second ~10 s earlier, or up to 8 s either side when none was taken then),
  `0` when that window held no response (or no copy existed yet), `N/A` before any request.
- Before any percentile, Locust rounds each response time (`bucket_response_time`): to whole
  ms below 100 ms, then to two significant digits (147 → 150 ms, 3432 → 3400 ms), so a
  percentile is off by up to 0.5 ms, or 5 % above 100 ms (half a step at the start of a
  decade): they are approximate, and labelled so.
- `Total Request Count` and `Total Failure Count` are cumulative since the start, or since
  the statistics were reset (`--reset-stats`; a drop is read as a reset). A failure is also a
  request. `Total Average Response Time` (ms, unrounded, failures included) and
  `Total Average Content Size` (whatever each request event's `response_length` was: the body's
  bytes by default) are cumulative means, so mean × count is a cumulative total.
- `Requests/s`, `Failures/s` (Locust's 10 s moving averages) and the cumulative median, min and
  max are not used. `PREFIX_failures.csv` (whole test, by method, name and error) is shown as
  it is; `PREFIX_stats.csv` and `PREFIX_exceptions.csv` are not read.

Levels: a *plateau* is a run of consecutive `Aggregated` rows at one nonzero user count; one
held for at least `PlateauRule.min_level_s` (from its first row to its last) is a level,
anything shorter (the steps of a ramp) is skipped, as is a later plateau at a user count
already measured. Each plateau's rows are dated by a straight line through their whole
seconds (`row_dates`), each date kept inside its own second (the writes are evenly spaced, the stamps
truncated: a 5 s span read from the stamps alone is off by a whole second whenever a stamp
skips one). The first part of every plateau, the last included, is warm-up (`warmup`: a share
of its length or seconds); the rest, its *steady part*, from its first row to its last, is
measured:

- requests/s = the successful requests (the increase of the request count minus that of the
  failure count) / the steady part's length; failures and success rate the same way;
- total response length = the increase of mean size × count; tokens/s when the locustfile
  reports tokens as the response length (`length="tokens"`), otherwise no token figure;
- mean response time = the increase of mean × count / the increase of count (exact);
- percentiles (E2E: Locust times the whole request) = the median, over the steady part's rows
  whose ~10 s window lies inside the steady part, of that row's `Aggregated` percentile; when
  the steady part is shorter than the window, over the plateau's rows whose window lies in the
  plateau (warm-up included), else the plateau's last row (its window reaches into the level
  before); `pct_source` says which.

Locust counts a request when it ends, so a steady part should span several request durations.
In a distributed test the master's counts grow as the workers' reports arrive (every 3 s by
default), so a short steady part is measured coarsely there.
The module is pure: `vllm_load.run_format.locust_files` reads the files.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ...load_kinds import CONCURRENCY
from ...run_format.locust_files import AGGREGATED, HISTORY_SUFFIX, LocustCsvError

#: Locust's CURRENT_RESPONSE_TIME_PERCENTILE_WINDOW (s): what its current percentiles cover
PERCENTILE_WINDOW_S = 10.0
#: Locust's CSV_STATS_INTERVAL_SEC (s): it sleeps this long between two writes of the history
CSV_INTERVAL_S = 1.0
PERCENTILES: tuple[int, ...] = (50, 90, 95, 99)
LENGTHS = ("bytes", "tokens")
EPS = 1e-3  # s: dates this close count as equal (they are fitted to whole-second stamps)
#: the per-level columns `measure_levels` gives, in order
LEVEL_COLUMNS: tuple[str, ...] = (
    "level",
    "kind",  # a Locust user count is a concurrency (`load_kinds`) ...
    "value",  # ... its value the users
    "users",
    "level_start",
    "level_end",
    "window_start",
    "window_end",
    "window_s",
    "requests",
    "ok",
    "failed",
    "success_rate",
    "req_per_s",
    "output_tok_per_s",
    "length_per_s",
    "mean_length",
    "e2e_mean",
    *(f"e2e_p{p}" for p in PERCENTILES),
    "pct_rows",
    "pct_source",
    "first_row",
    "steady_row",
    "last_row",
)


@dataclass(frozen=True)
class PlateauRule:
    """Which plateaus are levels and how much of each is warm-up."""

    min_level_s: float = 5.0  # shorter plateaus (ramp steps) are not levels
    warmup: float = 0.25  # a share of each plateau's length, or seconds (`warmup_is_share`)
    warmup_is_share: bool = True
    window_s: float = PERCENTILE_WINDOW_S

    def warmup_s(self, span: float) -> float:
        return self.warmup * span if self.warmup_is_share else self.warmup

    def describe(self) -> str:
        warm = (
            f"its first {self.warmup:.0%}"
            if self.warmup_is_share
            else f"its first {self.warmup:g} s"
        )
        return (
            f"A level is a user count held for at least {self.min_level_s:g} s (from the first "
            f"history row at that count to the last); shorter plateaus (ramp steps) are skipped. "
            f"Of every level, the last included, {warm} is warm-up; the rest is measured."
        )


def parse_warmup(text: str) -> tuple[float, bool]:
    """(value, is_share) of a warm-up spec: `25%` of each plateau, or `30s` / `30` seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(%|s)?\s*", text)
    if not m:
        raise LocustCsvError(
            f"--locust-warmup takes a share like 25% or seconds like 30s, got {text!r}"
        )
    value = float(m.group(1))
    if m.group(2) == "%":
        if value >= 100:
            raise LocustCsvError(f"--locust-warmup must be below 100%, got {text!r}")
        return value / 100.0, True
    return value, False


@dataclass(frozen=True)
class Plateau:
    """Consecutive `Aggregated` rows at one user count (indices into those rows)."""

    users: int
    first: int
    last: int
    start: float  # date of its first row
    end: float  # date of its last row
    steady: int | None = None  # index of the first measured row; None when not a level
    reason: str = ""  # why it is not a level, or ""

    @property
    def span(self) -> float:
        return self.end - self.start

    @property
    def used(self) -> bool:
        return self.steady is not None


@dataclass
class LocustLevels:
    """One Locust run, measured: a row per level (`LEVEL_COLUMNS`) and every plateau found."""

    metrics: pd.DataFrame
    plateaus: list[Plateau] = field(default_factory=list)
    dates: np.ndarray = field(default_factory=lambda: np.array([]))  # of the Aggregated rows


def _num(frame: pd.DataFrame, name: str) -> np.ndarray:
    if name not in frame:
        return np.full(len(frame), np.nan)
    return pd.to_numeric(frame[name], errors="coerce").to_numpy(np.float64)


def aggregated_rows(history: pd.DataFrame) -> pd.DataFrame:
    """The `Aggregated` rows, in file order, with `row` = their line number in the file."""
    agg = history[history["Name"].astype(str) == AGGREGATED].copy()
    agg["row"] = agg.index.to_numpy() + 2  # 1-based, after the header
    return agg.reset_index(drop=True)


def row_dates(stamps: np.ndarray) -> np.ndarray:
    """Dates of consecutive rows written at a steady pace, from their truncated whole-second
    stamps: a straight line through every row's second [stamp, stamp + 1), its slope the one
    of the lines that fit closest to Locust's 1 s interval (a few seconds of rows cannot tell
    1.00 s from 1.03 s, and Locust sleeps 1 s plus the short write), each date kept inside its
    second when no line fits them all (an irregular pace)."""
    stamps = np.asarray(stamps, dtype=np.float64)
    if len(stamps) < 3:
        return stamps + 0.5
    i = np.arange(len(stamps), dtype=np.float64)
    t = stamps - stamps[0]

    def overshoot(slope: float) -> float:  # convex in slope: <= 0 when the line fits every second
        return float(np.max(t - slope * i) - np.min(t + 1.0 - slope * i))

    lo, hi = 0.25, 4.0
    for _ in range(60):  # ternary search of the convex overshoot: the best-fitting slope
        m1, m2 = lo + (hi - lo) / 3, hi - (hi - lo) / 3
        lo, hi = (lo, m2) if overshoot(m1) <= overshoot(m2) else (m1, hi)
    best = (lo + hi) / 2
    slope = best
    if overshoot(best) < 0:  # lines fit: the fitting slopes form [low, high] around `best`
        low = _bisect(overshoot, 0.25, best)
        high = _bisect(overshoot, 4.0, best)
        slope = min(max(CSV_INTERVAL_S, low), high)
    icpt = (np.max(t - slope * i) + np.min(t + 1.0 - slope * i)) / 2
    return np.clip(stamps[0] + icpt + slope * i, stamps, stamps + 1.0 - 1e-6)


def _bisect(f, outside: float, inside: float) -> float:
    """The point between `outside` (f > 0 there, or the bound) and `inside` (f < 0) where f
    turns 0."""
    if f(outside) <= 0:
        return outside
    for _ in range(60):
        mid = (outside + inside) / 2
        outside, inside = (outside, mid) if f(mid) <= 0 else (mid, inside)
    return inside


def find_plateaus(users: np.ndarray, stamps: np.ndarray, rule: PlateauRule) -> list[Plateau]:
    """Every run of rows at one nonzero user count, dated, with its steady part when it is a
    level (`rule`); `users` and `stamps` are the Aggregated rows' columns."""
    users = np.nan_to_num(np.asarray(users, dtype=np.float64), nan=0.0)
    out: list[Plateau] = []
    seen: set[int] = set()
    starts: np.ndarray = np.flatnonzero(np.r_[True, users[1:] != users[:-1]])
    if not len(users):
        return out
    for k, first in enumerate(starts):
        last = (starts[k + 1] if k + 1 < len(starts) else len(users)) - 1
        count = int(users[first])
        if count <= 0:
            continue
        d = row_dates(stamps[first : last + 1])
        p = Plateau(count, int(first), int(last), float(d[0]), float(d[-1]))
        if p.span < rule.min_level_s:
            n = p.last - p.first + 1
            held = f"held {p.span:.0f} s ({n} row{'s' if n != 1 else ''})"
            out.append(_skip(p, f"{held}, under {rule.min_level_s:g} s"))
            continue
        if count in seen:
            out.append(_skip(p, f"{count} users was already measured earlier in the run"))
            continue
        steady_from = p.start + rule.warmup_s(p.span)
        rows = np.flatnonzero(d >= steady_from - EPS)
        if len(rows) < 2 or d[-1] - d[rows[0]] <= 0:
            out.append(_skip(p, "fewer than 2 rows after its warm-up"))
            continue
        seen.add(count)
        out.append(Plateau(count, p.first, p.last, p.start, p.end, int(first + rows[0])))
    return out


def _skip(p: Plateau, reason: str) -> Plateau:
    return Plateau(p.users, p.first, p.last, p.start, p.end, None, reason)


def increase(values: np.ndarray) -> float:
    """How much a cumulative counter grew over consecutive samples; a drop is a reset (the
    counter restarted from 0), so the sample after it counts whole. NaN samples are skipped."""
    v = np.asarray(values, dtype=np.float64)
    v = v[~np.isnan(v)]
    if len(v) < 2:
        return np.nan
    d = np.diff(v)
    return float(np.where(d >= 0, d, v[1:]).sum())


def _percentiles(agg: pd.DataFrame, dates: np.ndarray, p: Plateau, window_s: float):
    """({p: seconds}, rows used, source) of one level: see the module docstring."""
    assert p.steady is not None
    idx = np.arange(p.first, p.last + 1)
    # rows whose window starts after the steady part's start, else after the plateau's start
    rows, source = idx[dates[idx] - window_s >= dates[p.steady] - EPS], "steady"
    if not len(rows):
        rows, source = idx[dates[idx] - window_s >= p.start - EPS], "plateau"
    if not len(rows):
        rows, source = np.array([p.last]), "last_row"
    out = {}
    for q in PERCENTILES:
        vals = _num(agg, f"{q}%")[rows]
        vals = vals[vals > 0]  # 0: no response in the window (or no snapshot yet)
        out[q] = float(np.median(vals)) / 1000.0 if len(vals) else np.nan
    return out, len(rows), source


def measure_levels(
    history: pd.DataFrame, rule: PlateauRule = PlateauRule(), length: str = "bytes"
) -> LocustLevels:
    """The levels of one Locust history (every row of `PREFIX_stats_history.csv`): one row of
    `LEVEL_COLUMNS` per level, throughput and failures over its steady part (module docstring).
    `length`: what Locust's response length counts (`tokens` gives tokens/s)."""
    if length not in LENGTHS:
        raise LocustCsvError(f"the response length is one of {', '.join(LENGTHS)}, got {length!r}")
    agg = aggregated_rows(history)
    users, stamps = _num(agg, "User Count"), _num(agg, "Timestamp")
    good = ~np.isnan(stamps)
    agg, users, stamps = agg[good].reset_index(drop=True), users[good], stamps[good]
    plateaus = find_plateaus(users, stamps, rule)
    dates = stamps + 0.5
    for p in plateaus:
        dates[p.first : p.last + 1] = row_dates(stamps[p.first : p.last + 1])
    count, fails = _num(agg, "Total Request Count"), _num(agg, "Total Failure Count")
    rt_total = count * _num(agg, "Total Average Response Time")
    size_total = count * _num(agg, "Total Average Content Size")
    records = []
    for level, p in enumerate(q for q in plateaus if q.used):
        assert p.steady is not None
        rows = slice(p.steady, p.last + 1)
        window = float(dates[p.last] - dates[p.steady])
        n, failed = increase(count[rows]), increase(fails[rows])
        ok = n - failed
        length_total = increase(size_total[rows])
        pct, pct_rows, source = _percentiles(agg, dates, p, rule.window_s)
        records.append(
            {
                "level": level,
                "kind": CONCURRENCY.name,
                "value": float(p.users),
                "users": float(p.users),
                "level_start": p.start,
                "level_end": p.end,
                "window_start": float(dates[p.steady]),
                "window_end": float(dates[p.last]),
                "window_s": window,
                "requests": n,
                "ok": ok,
                "failed": failed,
                "success_rate": ok / n if n > 0 else np.nan,
                "req_per_s": ok / window,
                "output_tok_per_s": length_total / window if length == "tokens" else np.nan,
                "length_per_s": length_total / window,
                "mean_length": length_total / n if n > 0 else np.nan,
                "e2e_mean": increase(rt_total[rows]) / n / 1000.0 if n > 0 else np.nan,
                **{f"e2e_p{q}": pct[q] for q in PERCENTILES},
                "pct_rows": pct_rows,
                "pct_source": source,
                "first_row": int(agg["row"].iloc[p.first]),
                "steady_row": int(agg["row"].iloc[p.steady]),
                "last_row": int(agg["row"].iloc[p.last]),
            }
        )
    metrics = pd.DataFrame(records, columns=list(LEVEL_COLUMNS))
    return LocustLevels(metrics=metrics, plateaus=plateaus, dates=dates)


def no_level_message(prefix: str, levels: LocustLevels, rule: PlateauRule) -> str:
    """The one line said when a history holds no level."""
    held = sorted({p.users for p in levels.plateaus})
    seen = f" (user counts seen: {', '.join(map(str, held))})" if held else " (no users at all)"
    return (
        f"{prefix}{HISTORY_SUFFIX}: no user count was held long enough to measure{seen}; a level "
        f"needs at least {rule.min_level_s:g} s at one user count and 2 history rows after its "
        "warm-up: step the users with a LoadTestShape (or lower --locust-min-level)"
    )
