"""The report's "Why it saturates" section, per series: what its diagnosis
(`analysis.diagnosis.series.SeriesDiagnosis`) says, laid out for the HTML and Markdown templates,
with the chart of the evidence per level (`evidence_charts`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..analysis.diagnosis.advice import Advice
from ..analysis.diagnosis.capacity import KV
from ..analysis.diagnosis.facts import SERVER_FLAGS, Fact
from ..analysis.diagnosis.headline import no_advice_reason
from ..analysis.diagnosis.series import SeriesDiagnosis
from ..run_format.advice_record import score
from .evidence_charts import EvidenceChart, evidence_chart
from .model import SeriesReport

_FLAG_OF_FACT = {name: flag for flag, name in SERVER_FLAGS.items()}


@dataclass(frozen=True)
class FactRow:
    name: str
    flag: str  # the server flag that sets it ("" when none does)
    value: str
    source: str  # read, given, default (with what it belongs to), inferred; or why unknown


@dataclass(frozen=True)
class VerdictRow:
    value: float
    kind: str
    reason: str
    knee: bool  # the level the series' verdict is for


@dataclass
class WhyView:
    """One series' section: the verdict and the capacity model in sentences, the advice (or why
    there is none), the facts, a verdict per level, and the evidence chart."""

    label: str
    anchor: str
    kind: str
    sentence: str
    capacity: str  # the capacity model's sentence
    gap: str  # the predicted knee against the measured one
    advised_knee: str  # where the model puts the knee after the first advice ("" when nowhere)
    advice: tuple[Advice, ...]
    no_advice: str  # why there is no advice ("" when there is some)
    facts: list[FactRow] = field(default_factory=list)
    conflicts: tuple[str, ...] = ()  # given or default facts the server's figures contradicted
    score: str = (
        ""  # how often `tune --advice` found advice of this kind paying off ("" if never tried)
    )
    levels: list[VerdictRow] = field(default_factory=list)
    chart: EvidenceChart | None = None


def _value(fact: Fact) -> str:
    v = fact.value
    return (
        f"{v:,.0f}"
        if isinstance(v, float) and v == int(v)
        else f"{v:g}"
        if isinstance(v, float)
        else str(v)
    )


def _source(name: str, fact: Fact, d: SeriesDiagnosis) -> str:
    """How a fact is known; vLLM's KV-cache concurrency with what it counts, beside the capacity
    model's for this workload (48 read against "kv_cache allows ~664" looked like two answers to
    one question: vLLM's is for requests of max_model_len tokens)."""
    known = f"{fact.source}: {fact.where}" if fact.where else fact.source
    if name != "kv_cache_max_concurrency":
        return known
    length = d.facts.number("max_model_len")
    per = f" of max_model_len ({length:,.0f} tokens)" if length else " of max_model_len"
    kv = next((lim for lim in d.prediction.limits if lim.kind == KV), None)
    model = (
        f"; for this workload's requests the capacity model's {kv.text()}" if kv is not None else ""
    )
    return f"{known}: vLLM's figure, for requests{per}{model}"


def _score(d: SeriesDiagnosis) -> str:
    """The advice record's sentence for the diagnosis' kind, where it gives advice and the kind
    has history."""
    found = score(d.kind) if d.advice else None
    return found.sentence() if found is not None else ""


def why_view(s: SeriesReport, anchor: str, draw: bool = True) -> WhyView | None:
    """The section of series `s` (None without a diagnosis); `draw`: with its chart."""
    d = s.diagnosis
    if d is None:
        return None
    noun = s.axis.noun
    tried = next((a for a in d.advice if a.to_value is not None), None)  # as the model tried it
    advised = (
        f"With {tried.flag} at {tried.to_value}, the capacity model puts the knee at "
        f"~{d.advised_knee:,.0f} {noun}."
        if tried is not None and d.advised_knee is not None
        else ""
    )
    return WhyView(
        label=s.label,
        anchor=anchor,
        kind=d.kind,
        sentence=d.sentence,
        capacity=d.prediction.sentence(noun),
        # without a knee or a known limit the capacity sentence already gives the reasons
        gap=d.gap if d.prediction.knee is not None or d.prediction.limits else "",
        advised_knee=advised,
        advice=d.advice,
        no_advice=no_advice_reason(d),
        facts=[
            FactRow(
                name,
                _FLAG_OF_FACT.get(name, ""),
                _value(fact),
                _source(name, fact, d),
            )
            for name, fact in sorted(d.facts.facts.items())
        ]
        + [
            FactRow(name, _FLAG_OF_FACT.get(name, ""), "not known", why)
            for name, why in sorted(d.facts.still_unknown().items())
        ],
        conflicts=d.facts.conflicts,
        score=_score(d),
        levels=[VerdictRow(v.value, v.kind, v.reason, v.value == d.value) for v in d.levels],
        chart=evidence_chart(s, anchor) if draw else None,
    )
