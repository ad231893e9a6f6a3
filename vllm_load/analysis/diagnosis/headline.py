"""A series' headline: the five answers a reader takes in at a glance, first in the report and the
printed summary: peak throughput, the knee, what limits it, the one flag to change, and its
expected effect; one figure and one sentence each.

Every figure is read from the objects the tables below read (the saturation analysis' points, the
diagnosis and its advice) and written with the same cell formatters, so the headline cannot say
one number while a table says another.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..number_text import num, secs
from ..series.saturation import Saturation
from .kinds import kind_named
from .series import SeriesDiagnosis, limit_name

#: the throughput as every table writes it
TOK_SPEC = ",.0f"


@dataclass(frozen=True)
class HeadlineItem:
    """One answer: what it is about, its figure, and the sentence that says what it rests on."""

    label: str
    figure: str
    sentence: str

    def text(self) -> str:
        return f"{self.label}: {self.figure}. {self.sentence}"


@dataclass(frozen=True)
class Headline:
    items: tuple[HeadlineItem, ...]

    def lines(self) -> list[str]:
        return [item.text() for item in self.items]


def _peak(sat: Saturation) -> HeadlineItem:
    peak = sat.peak
    if peak is None:
        return HeadlineItem("Peak throughput", "none", "No level was kept to take a peak from.")
    return HeadlineItem(
        "Peak throughput",
        f"{num(peak.tok_per_s, TOK_SPEC)} tok/s",
        f"At {_level(sat, peak.value)}, p99 E2E {secs(peak.e2e_p99)}.",
    )


def _knee(sat: Saturation, d: SeriesDiagnosis | None) -> HeadlineItem:
    if not (sat.saturated and sat.saturation is not None):
        return HeadlineItem(
            "Knee", "none", f"Not saturated within the tested levels{_why(sat.reason)}."
        )
    point = sat.saturation
    model = d.prediction.knee if d is not None else None
    beside = (
        f"; the capacity model puts it at ~{num(model, ',.0f')} (see Why it saturates: why they "
        "differ)"
        if model is not None and model != point.value and not sat.axis.open_loop
        else ""
    )
    return HeadlineItem(
        "Knee",
        sat.status,  # as the summary table's saturation column writes it
        f"The saturation point measured: the lowest level whose throughput is within the "
        f"tolerance of the peak (Methodology), "
        f"{num(point.tok_per_s, TOK_SPEC)} tok/s there; past it only latency grows{beside}.",
    )


def _level(sat: Saturation, value: float) -> str:
    """A level as the findings write it: "32 concurrent"."""
    return f"{sat.axis.number(value)} {sat.axis.noun}"


def _why(reason: str) -> str:
    return f" ({reason})" if reason else ""


def _limit(sat: Saturation, d: SeriesDiagnosis | None) -> HeadlineItem:
    if d is None or d.kind in ("not_saturated", "undetermined"):
        why = "nothing limits it within the tested levels" if d is not None else "no diagnosis"
        if d is not None and d.kind == "undetermined":
            why = "the evidence does not settle it (see Why it saturates)"
        figure = "undetermined" if d is not None and d.kind == "undetermined" else "none"
        return HeadlineItem("Limited by", figure, _sentence(why))
    # the level the diagnosis' sentence quotes: one story from the headline to the section
    at = next((v for v in d.levels if v.value == d.at), None)
    if at is None or not kind_named(d.kind).from_levels:
        return HeadlineItem("Limited by", limit_name(d.kind), _sentence(d.sentence))
    where = _level(sat, at.value)
    if sat.saturation is not None and at.value > sat.saturation.value:
        where += " (past the knee)"
    return HeadlineItem("Limited by", limit_name(d.kind), f"At {where}: {at.reason}.")


def _sentence(text: str) -> str:
    text = text.rstrip(".")
    return f"{text[:1].upper()}{text[1:]}."


def _flag(sat: Saturation, d: SeriesDiagnosis | None) -> tuple[HeadlineItem, HeadlineItem]:
    advice = next((a for a in d.advice if a.to_value is not None), None) if d else None
    if d is None or advice is None:
        first = d.advice[0] if d is not None and d.advice else None
        if first is not None:  # advice without a single value to try (more replicas, ...)
            return (
                HeadlineItem("The flag", first.flag, f"Cost: {first.cost}."),
                HeadlineItem("Expected effect", "not placed", _sentence(first.expected)),
            )
        why = no_advice_reason(d) if d is not None else "No advice: no diagnosis."
        return (
            HeadlineItem("The flag", "none", _sentence(why.removeprefix("No advice: "))),
            HeadlineItem("Expected effect", "none", "No flag, no change to expect."),
        )
    change = f"{advice.flag} {advice.from_value or '(not known)'} → {advice.to_value}"
    flag = HeadlineItem("The flag", change, f"Cost: {advice.cost}.")
    if d.advised_knee is None:
        return flag, HeadlineItem("Expected effect", "not placed", _sentence(advice.expected))
    return flag, HeadlineItem(
        "Expected effect",
        f"knee ~{num(d.advised_knee, ',.0f')} {sat.axis.noun}",
        f"Where the capacity model puts the knee with {advice.flag} {advice.to_value}: "
        f"{advice.expected}.",
    )


def no_advice_reason(d: SeriesDiagnosis) -> str:
    """Why a series' diagnosis advises nothing ("" when it advises something)."""
    if d.advice:
        return ""
    chosen = next((v for v in d.levels if v.value == d.value), None)
    return kind_named(d.kind).why_no_advice(chosen.reason if chosen is not None else d.sentence)


def headline(sat: Saturation, diagnosis: SeriesDiagnosis | None) -> Headline:
    """The headline of a series from its saturation analysis and diagnosis."""
    return Headline(
        (_peak(sat), _knee(sat, diagnosis), _limit(sat, diagnosis), *_flag(sat, diagnosis))
    )
