"""Why the capacity model's knee and the measured one differ, in a sentence from the evidence at
both (`series.diagnose_series` gives it as the diagnosis' `gap`)."""

from __future__ import annotations

import math
from typing import Sequence

from .capacity import Prediction
from .kinds import Bottleneck, kind_named

#: requests the batch at the model's knee held fewer than at the measured knee, at least, for the
#: gap between them to be put down to an unfilled batch (half a request: more than the noise of a
#: mean over engine steps)
UNFILLED = 0.5


def knee_gap(
    prediction: Prediction,
    knee: float | None,
    noun: str,
    plural: str = "",
    verdicts: Sequence[Bottleneck] = (),
) -> str:
    """How far the measured knee is from the predicted one, and why, from the `verdicts`'
    evidence where it shows; `plural` names an open-loop series' levels (they are no numbers of
    requests in the batch)."""
    if plural:
        first = prediction.limits[0] if prediction.limits else None
        return (
            f"The capacity model's first limit, {first.text()}, counts requests in the batch; this "
            f"series' levels are {plural}, so it is not placed on them."
            if first
            else ""
        )
    if prediction.knee is None and knee is None:
        return ""
    if prediction.knee is None:
        return f"The capacity model could not place the knee ({'; '.join(prediction.unknown) or 'no limit within the tested levels'}); measured ~{knee:,.0f} {noun}."
    if knee is None:
        return f"The capacity model put the knee at ~{prediction.knee:,.0f} {noun} ({prediction.first}); the runs did not saturate."
    if prediction.knee == knee:
        return f"The measured knee (~{knee:,.0f} {noun}) is where the capacity model put it ({prediction.first})."
    return (
        f"The measured knee (~{knee:,.0f} {noun}) differs from the capacity model's ~{prediction.knee:,.0f} "
        f"({prediction.first}): "
        + (
            "a limit it does not know binds first"
            if knee < prediction.knee
            else _unfilled(prediction, verdicts, knee, noun) or _later(prediction.first)
        )
        + ". The headline and the tables use the measured knee: it is what the runs show, the "
        "model's is where a configured limit could first bind."
    )


def _unfilled(
    prediction: Prediction, verdicts: Sequence[Bottleneck], knee: float, noun: str
) -> str:
    """Why the measured knee lies past the model's, from the evidence at both: the throughput the
    runs measured where the model has it at its top already, and, where the batch there held
    fewer requests than at the measured knee, that ("" where the figures are missing)."""
    by_value = {v.value: v.evidence for v in verdicts}
    at, there = by_value.get(prediction.knee or math.nan), by_value.get(knee)
    tops = [e.get("total_tok_per_s", math.nan) for e in by_value.values()]
    peak = max((t for t in tops if t == t), default=math.nan)
    if at is None or there is None or not peak == peak:
        return ""
    rate = at.get("total_tok_per_s", math.nan)
    if not rate == rate:
        return ""
    text = (
        f"at ~{prediction.knee:,.0f} {noun}, where the model has throughput at its top already, "
        f"the runs measured {rate:,.0f} tok/s, {rate / peak:.0%} of the peak, short of the "
        f"saturation rule's tolerance; the knee is the next tested level, ~{knee:,.0f}"
    )
    batch, full = at.get("requests_in_batch", math.nan), there.get("requests_in_batch", math.nan)
    if batch == batch and full == full and batch < full - UNFILLED:
        text += (
            f" (the batch held {batch:,.1f} requests on average there against {full:,.1f} at "
            f"~{knee:,.0f}: a closed-loop user's place in it stays empty between its request's "
            "end and its next one's admission, so it stays full only with users to spare)"
        )
    return text


def _later(first: str) -> str:
    """Why a limit may bind at a higher level than the capacity model put it, for its kind."""
    why = kind_named(first).binds_later
    return "the limit binds later than the model assumes" + (f" ({why})" if why else "")
