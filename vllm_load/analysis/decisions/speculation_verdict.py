"""A series' diagnosis where speculative decoding stops paying for it.

One run measures one K, so no level rule can tell that another K would have done better: the
verdict needs runs of several K of one workload (a `tune --matrix num_speculative_tokens=...`),
ranked per level by output tok/s (`decisions.speculation_k`: acceptance length and the draft
acceptance rate are its evidence, never its rank). A series whose K lost, beyond the tie, to a
smaller K (or to no speculation) at some level gets the `speculation` kind (`kinds.SPECULATION`)
for the first such level, with the advice to run that level's winner: `num_speculative_tokens`,
a setting `tune --advice` sets on the server command (`server.command_settings`). The series'
own limit at its knee stays in its level verdicts; the advice changes what costs throughput.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from ..diagnosis.advice import Advice
from ..diagnosis.kinds import SPECULATION
from ..diagnosis.series import SeriesDiagnosis
from .speculation_k import LevelChoice, stops_paying

#: the setting the advice changes (`server.command_settings.SETTINGS`)
SETTING = "num_speculative_tokens"


def speculation_diagnosis(
    diagnosis: SeriesDiagnosis, k: int | None, choices: Sequence[LevelChoice], unit: str
) -> SeriesDiagnosis:
    """`diagnosis` as it is, or, where the series' K (`k`) stops paying at one of `choices`'
    levels, the speculation verdict there with its advice."""
    if k is None:
        return diagnosis
    stop = stops_paying(choices, k)
    if stop is None:
        return diagnosis
    gain = stop.choice.throughput[stop.advised] / stop.choice.throughput[k] - 1
    winner = "without speculation" if stop.advised == 0 else f"with K = {stop.advised}"
    advice = Advice(
        SETTING,
        str(k),
        str(stop.advised),
        f"{gain:+.0%} output tok/s at {stop.value:,.4g} {unit}, as the runs {winner} measured "
        "there",
        "fewer tokens per step where drafts are accepted: below this load the larger K may "
        "still pay (the report's K per load)",
    )
    return replace(
        diagnosis,
        kind=SPECULATION.name,
        value=stop.value,
        at=stop.value,
        sentence=SPECULATION.sentence(stop.sentence(unit)) + ".",
        advice=(advice,),
        advised_knee=None,
    )
