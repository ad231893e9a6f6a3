"""The server's throughput beside the client's over a stretch of a replay, from `/metrics`.

The two are compared over the part of the stretch between two of its scrapes (the first at or
after its start, the last at or before its end: `levels.server_side.scrape_window`), where the
server's counters need no interpolation: its prompt + generated tokens (`vllm:prompt_tokens`,
`vllm:generation_tokens`) and its generated tokens alone, each over that span, against the
tokens the client was served inside the same span (`levels.window_rates`). A stretch the
scrapes cannot resolve (fewer than `levels.server_side.MIN_INTERVALS` scrape intervals, or edges
dated too loosely: `levels.server_side.resolvable`) is not compared. (Unlike a level's latency
sums, a token counter has no jump a scrape could fall on the wrong side of: a request's tokens
come one at a time, so no scrape is set aside for a request event close to it.)

Generated tokens are counted alike on both sides, each as it came. A prompt is counted by vLLM
all at once when its prefill is done, and by the client spread over the time to its first
token, so over a short span the totals differ by the prompts whose prefill the span's edges
cut; the generated tokens' ratio is the one a disagreement is read from.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..levels.scrapes import counter_delta
from ..levels.server_side import resolvable, scrape_window
from ..levels.window_rates import RequestSpans, work_in_window

#: why a stretch was not compared when the server had no /metrics scraped
NOT_SCRAPED = "the server's /metrics were not scraped"


@dataclass(frozen=True)
class ServerSpan:
    """The server's and the client's tok/s over the scrapes' span of a stretch (NaN where the
    scrapes cannot resolve it, with `why_not`)."""

    compare_s: float = math.nan  # the span's length
    server_total_tok_per_s: float = math.nan
    server_output_tok_per_s: float = math.nan
    client_total_tok_per_s: float = math.nan
    client_output_tok_per_s: float = math.nan
    why_not: str = NOT_SCRAPED

    @property
    def total_ratio(self) -> float:
        """Client over server, prompt and generated tokens (1: they agree)."""
        return _ratio(self.client_total_tok_per_s, self.server_total_tok_per_s)

    @property
    def output_ratio(self) -> float:
        """Client over server, generated tokens."""
        return _ratio(self.client_output_tok_per_s, self.server_output_tok_per_s)


def _ratio(client: float, server: float) -> float:
    return client / server if server and server == server and client == client else math.nan


@dataclass(frozen=True)
class ServerView:
    """What the comparison needs: the scrapes, their interval and the client's served tokens."""

    server: pd.DataFrame
    step: float
    spans: RequestSpans

    def over(self, a: float, b: float) -> ServerSpan:
        lo, hi = scrape_window(self.server, a, b)
        why_not = resolvable(self.server, lo, hi, self.step)
        if why_not:
            return ServerSpan(why_not=why_not)
        t = self.server["ts"].to_numpy(np.float64)
        sa, sb = float(t[lo]), float(t[hi])
        length = sb - sa
        prompt = counter_delta(self.server, "prompt_tokens_total", sa, sb)
        generated = counter_delta(self.server, "generation_tokens_total", sa, sb)
        work = work_in_window(self.spans, sa, sb)
        return ServerSpan(
            compare_s=length,
            server_total_tok_per_s=(prompt + generated) / length,
            server_output_tok_per_s=generated / length,
            client_total_tok_per_s=(work.prompt_tokens + work.output_tokens) / length,
            client_output_tok_per_s=work.output_tokens / length,
            why_not="",
        )
