"""What a replay's figures say: whether the client kept to the trace's schedule, and whether the
server's prefix cache saw the reuse the trace implies.

- **Lateness.** Each request's clock starts at its scheduled time; `queued_s` is how late it was
  sent after it. The client kept up when the replay's requests were sent within `LATE_LIMIT_S`
  (5 ms) of their schedule at the 99th percentile. When it did not, the late requests are told
  apart: those due while their load process had its share of the cap in flight (the level's
  `users`, split evenly among the processes that sent the replay) waited for a free slot; the
  others were late with one free: of those, the ones whose process's CPU the machine's hypervisor
  took while they waited (`stolen_s` > 0: "steal", client/steal.py) were held by the host, and the
  p99 counting them as sent on time (`p99_without_steal`) says whether the client itself kept up;
  the rest were late in a busy load process.
- **Prefix cache.** The server's hits over its queries (`vllm:prefix_cache_hits` /
  `vllm:prefix_cache_queries`, tokens) over the replay, against the hits the trace's `hash_ids`
  imply (run.json `trace.predicted_cached_tokens`, of `trace.prompt_tokens`): they agree within
  `PREFIX_TOLERANCE` (5 %) of the prediction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..levels import as_floats
from ..levels.scrapes import counter_delta

LATE_LIMIT_S = 0.005
PREFIX_TOLERANCE = 0.05


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:,.1f} ms" if seconds == seconds else "-"


@dataclass(frozen=True)
class Lateness:
    """How late the replay's requests were sent after their schedule (seconds)."""

    requests: int  # with their sending recorded
    p50: float
    p99: float
    max: float
    late: int  # sent more than LATE_LIMIT_S after schedule
    at_cap: int  # of those, due while their process had its share of the cap in flight
    cap: float
    processes: int
    stolen: int = 0  # of the late ones with a slot free, those the host stalled (steal)
    p99_without_steal: float = math.nan  # p99 with those `stolen` counted as sent on time

    @property
    def kept_up(self) -> bool | None:
        """Within LATE_LIMIT_S at p99 (None when no sending was recorded)."""
        return None if not self.requests else bool(self.p99 <= LATE_LIMIT_S)

    def sentence(self) -> str:
        limit = _ms(LATE_LIMIT_S)
        if not self.requests:
            return (
                "How late the requests were sent is not recorded (requests.csv has no queued_s): "
                "whether the client kept to the schedule is unknown."
            )
        figures = (
            f"p99 send lateness {_ms(self.p99)} (p50 {_ms(self.p50)}, max {_ms(self.max)}) "
            f"over {self.requests:,} requests"
        )
        if self.kept_up:
            return f"The client kept up with the trace: {figures}, within {limit} of schedule."
        share = self.late / self.requests
        text = (
            f"The client could not keep up with the trace: {figures}, over the {limit} a replay "
            f"allows; {self.late:,} requests ({share:.1%}) were sent more than {limit} late"
        )
        busy = self.late - self.at_cap - self.stolen
        why = []
        if self.at_cap:
            per = f" ({self.cap / self.processes:,.4g} per process)" if self.processes > 1 else ""
            why.append(
                f"{self.at_cap:,} due while the cap of {self.cap:,.0f} requests in flight{per} "
                "was taken (they waited for a free slot: raise the cap, or the server is slower "
                "than the trace)"
            )
        if self.stolen:
            why.append(
                f"{self.stolen:,} with a slot free while the machine's hypervisor took their load "
                "process's CPU (steal in /proc/stat: the host ran something else; a client machine "
                "of its own, or dedicated cores, avoids it)"
            )
        if busy:
            why.append(f"{busy:,} with a slot free (a busy load process: see client health)")
        text += ": " + ", ".join(why) + "."
        if self.stolen:
            own = "within" if self.p99_without_steal <= LATE_LIMIT_S else "over"
            text += (
                f" Counting the {self.stolen:,} sends the host stalled as on time, p99 send "
                f"lateness is {_ms(self.p99_without_steal)}, {own} {limit}."
            )
        return text


def lateness(requests: pd.DataFrame, level: int, cap: float) -> Lateness:
    """How late the requests of `level` were sent (`queued_s`), and how many late ones were
    due while their process had its share of `cap` in flight (the module doc)."""
    mine = requests[as_floats(requests["level"]) == level]
    due = as_floats(mine["start_ts"])
    queued = as_floats(mine["queued_s"]) if "queued_s" in mine else np.full(len(mine), np.nan)
    known = ~np.isnan(queued)
    if not known.any():
        return Lateness(0, math.nan, math.nan, math.nan, 0, 0, cap, 1)
    sent, end = due + np.nan_to_num(queued), as_floats(mine["end_ts"])
    late = known & (queued > LATE_LIMIT_S)
    worker = mine["worker"].astype("string").fillna("") if "worker" in mine else None
    workers = worker.to_numpy(dtype=object) if worker is not None else np.full(len(mine), "")
    names = np.unique(workers)
    share = max(1, math.floor(cap / len(names))) if cap == cap else math.inf
    at_cap = np.zeros(len(mine), dtype=bool)
    for name in names:
        own = workers == name
        sends, ends = np.sort(sent[own]), np.sort(end[own])
        mask = own & late
        due_late = due[mask]
        flying = np.searchsorted(sends, due_late, "right") - np.searchsorted(
            ends, due_late, "right"
        )
        at_cap[np.flatnonzero(mask)[flying >= share]] = True
    stolen = late & ~at_cap
    stolen &= as_floats(mine["stolen_s"]) > 0 if "stolen_s" in mine else False
    q = queued[known]
    return Lateness(
        requests=int(known.sum()),
        p50=float(np.percentile(q, 50)),
        p99=float(np.percentile(q, 99)),
        max=float(q.max()),
        late=int(late.sum()),
        at_cap=int(at_cap.sum()),
        cap=cap,
        processes=len(names),
        stolen=int(stolen.sum()),
        p99_without_steal=float(np.percentile(np.where(stolen, 0.0, queued)[known], 99)),
    )


@dataclass(frozen=True)
class PrefixCacheCheck:
    """The server's prefix-cache hits over the replay against the trace's prediction."""

    server_hits: float  # tokens found in the cache (NaN: not scraped)
    server_queries: float  # tokens looked up
    predicted_hits: int | None  # what the trace's hash_ids imply (None: the format has none)
    prompt_tokens: int  # prompt tokens the replay scheduled (-1: unknown)
    covered: bool  # the scrapes span the whole replay

    @property
    def server_rate(self) -> float:
        q = self.server_queries
        return self.server_hits / q if q and q == q else math.nan

    @property
    def predicted_rate(self) -> float:
        if self.predicted_hits is None or self.prompt_tokens <= 0:
            return math.nan
        return self.predicted_hits / self.prompt_tokens

    @property
    def difference(self) -> float:
        """Server hits over predicted hits, minus 1 (NaN where either is unknown)."""
        if self.predicted_hits is None or self.server_hits != self.server_hits:
            return math.nan
        if self.predicted_hits == 0:
            return 0.0 if self.server_hits == 0 else math.inf
        return self.server_hits / self.predicted_hits - 1.0

    @property
    def agrees(self) -> bool | None:
        d = self.difference
        return None if d != d else bool(abs(d) <= PREFIX_TOLERANCE)

    def _predicted(self) -> str:
        of = f" of {self.prompt_tokens:,} prompt tokens" if self.prompt_tokens >= 0 else ""
        rate = f" ({self.predicted_rate:.1%})" if self.predicted_rate == self.predicted_rate else ""
        return f"the trace's hash_ids imply {self.predicted_hits:,} cached{of}{rate}"

    def sentence(self) -> str:
        seen = self.server_hits == self.server_hits
        server = (
            f"the server's prefix cache hit {self.server_hits:,.0f} of the "
            f"{self.server_queries:,.0f} prompt tokens it looked up over the replay "
            f"({self.server_rate:.1%}, vllm:prefix_cache_hits / queries)"
        )
        partial = "" if self.covered else " (its scrapes covered only part of the replay)"
        if self.predicted_hits is None:
            return (
                f"Prefix cache: {server}{partial}; the trace implies no reuse to compare with "
                "(its format has no hash_ids)."
            )
        if not seen:
            return (
                f"Prefix cache: {self._predicted()}; the server's prefix-cache counters were not "
                "scraped, so the hits it saw are unknown."
            )
        text = f"Prefix cache: {server}{partial}; {self._predicted()}: "
        d = self.difference
        if self.agrees:
            return text + f"hits {d:+.1%} from the prediction, within {PREFIX_TOLERANCE:.0%}."
        gap = f"{d:+.1%}" if d != math.inf else "where it implies none"
        return text + (
            f"hits {gap} from the prediction, beyond {PREFIX_TOLERANCE:.0%} (a cache smaller "
            "than the trace's reuse evicts blocks; a block size other than the trace's, "
            "earlier traffic in the cache, or other traffic on the server move it too)."
        )


def prefix_cache(
    server: pd.DataFrame | None,
    start: float,
    end: float,
    predicted_hits: int | None,
    prompt_tokens: int,
) -> PrefixCacheCheck | None:
    """The server's hits and queries over [start, end] (clipped to its scrapes) beside the
    trace's prediction; None when neither is there."""
    hits = queries = math.nan
    covered = False
    if server is not None and "prefix_cache_hits" in server and len(server) >= 2:
        t = server["ts"].to_numpy(np.float64)
        a, b = max(start, float(t[0])), min(end, float(t[-1]))
        covered = bool(t[0] <= start and t[-1] >= end)
        hits = counter_delta(server, "prefix_cache_hits", a, b)
        queries = counter_delta(server, "prefix_cache_queries", a, b)
    if hits != hits and predicted_hits is None:
        return None
    return PrefixCacheCheck(hits, queries, predicted_hits, prompt_tokens, covered)
