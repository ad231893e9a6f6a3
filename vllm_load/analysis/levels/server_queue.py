"""Whether requests waited in the server's queue at a level, from its `/metrics`
(`server_metrics.csv`): the evidence a finding needs before it blames TTFT on queueing.

A TTFT that grows with concurrency has more than one cause: requests waiting to be scheduled,
longer prefills in a fuller batch, a client reading late. Only the first is the server's queue,
and only the server can say it happened: vLLM's queue-time histogram
(`vllm:request_queue_time_seconds`, arrival to first scheduled) and its waiting gauge
(`vllm:num_requests_waiting`). A shared-prefix run on vLLM can double its TTFT with the queue
empty throughout.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..frame_records import row_dicts
from .scrapes import counter_delta, gauge_mean

#: a level has a server queue when its requests waited in it at least this long on average
#: (`vllm:request_queue_time_seconds`) and at least `QUEUE_TTFT_SHARE` of the level's TTFT p50 ...
QUEUE_TIME_MIN = 0.010
QUEUE_TTFT_SHARE = 0.1
#: ... or, for a server without that histogram, when at least this many requests waited in it
#: on average (`vllm:num_requests_waiting`)
QUEUE_WAITING_MIN = 1.0
#: the per-level columns `level_queue` adds to a run's table
QUEUE_COLUMNS = ("server_waiting", "server_queue_time")


def level_queue(server: pd.DataFrame, metrics: pd.DataFrame) -> pd.DataFrame:
    """Per level, over its measured window: the mean of `vllm:num_requests_waiting`
    (`server_waiting`) and the mean queue time of the requests the server scheduled then
    (`server_queue_time`, s, the queue-time histogram's sum over its count); NaN where the server
    did not expose one or its scrapes do not cover the window. Interpolated between scrapes:
    enough to say whether requests waited, not to compare figures to a few percent
    (`server_side` does that)."""
    rows = []
    for rec in row_dicts(metrics):
        a, b = rec["window_start"], rec["window_end"]
        count = counter_delta(server, "queue_time_count", a, b)
        total = counter_delta(server, "queue_time_sum", a, b)
        rows.append(
            {
                "level": rec["level"],
                "server_waiting": gauge_mean(server, "waiting", a, b),
                "server_queue_time": total / count if count and count == count else np.nan,
            }
        )
    return pd.DataFrame(rows, columns=["level", *QUEUE_COLUMNS])


def queued(waiting: float, queue_time: float, ttft_p50: float) -> bool | None:
    """Whether a level's server figures (`level_queue`, averaged across runs) show requests
    waiting in the server's queue: by their queue time where the server has the histogram (at
    least `QUEUE_TIME_MIN` and `QUEUE_TTFT_SHARE` of the level's TTFT p50), else by the waiting
    gauge (`QUEUE_WAITING_MIN`); None when the server said neither."""
    if queue_time == queue_time:
        share = QUEUE_TTFT_SHARE * ttft_p50 if ttft_p50 == ttft_p50 else 0.0
        return bool(queue_time >= max(QUEUE_TIME_MIN, share))
    if waiting == waiting:
        return bool(waiting >= QUEUE_WAITING_MIN)
    return None


def describe() -> str:
    """The rule, as the report's methodology prints it."""
    return (
        "A finding says requests waited in the server's queue only where the server's /metrics show "
        f"it at that level: a mean queue time (vllm:request_queue_time_seconds) of at least "
        f"{QUEUE_TIME_MIN * 1000:g} ms and {QUEUE_TTFT_SHARE:.0%} of the level's TTFT p50, or, for a "
        f"server without that histogram, at least {QUEUE_WAITING_MIN:g} request waiting on average "
        "(vllm:num_requests_waiting), over the level's measured window. Otherwise a TTFT that grows "
        "is stated with its figures and no cause."
    )
