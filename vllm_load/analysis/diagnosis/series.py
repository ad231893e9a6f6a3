"""One series' diagnosis: a verdict per level (of the series' curve, and of each of its runs),
the capacity model's knee beside the measured one, and the advice for the knee's limit."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Mapping, Sequence

import pandas as pd

from ...run_format.gpu_metrics import simulated
from ..frame_records import row_dicts
from ..series.saturation import Saturation
from .advice import Advice, Workload
from .capacity import Prediction, fit_step_cost, predict
from .facts import GIVEN, Fact, ServerFacts, no_server_reason, server_facts
from .gap import knee_gap
from .inference import contradicted, infer_limits
from .kinds import (
    COMPUTE_BOUND,
    FAILURES,
    NOT_MEASURED,
    NOT_SATURATED,
    UNDETERMINED,
    Bottleneck,
    kind_named,
    with_advice,
)
from .verdict import (
    LevelEvidence,
    client_over_compute,
    level_verdict,
    past_useful_gain,
    with_baseline,
)

#: what a level none of whose requests was measured reads instead of a verdict
NOT_MEASURED_REASON = (
    "not measured: the level ended before any of its measured requests had (its stop reason "
    "says why), so there is nothing to judge"
)


@dataclass
class SeriesDiagnosis:
    """What limits a series at its knee, why, and what to change."""

    kind: str
    value: float | None  # the level the verdict is for: the knee (None when not saturated)
    sentence: str
    advice: tuple[Advice, ...]
    prediction: Prediction
    advised_knee: float | None
    gap: str  # the predicted knee against the measured one
    facts: ServerFacts
    levels: list[Bottleneck] = field(default_factory=list)  # one per curve row
    #: the level whose figures the sentence quotes (the knee, or the first level past it)
    at: float | None = None

    def as_json(self) -> dict:
        return {
            "kind": self.kind,
            "value": self.value,
            "sentence": self.sentence,
            "advice": [a.as_json() for a in self.advice],
            "predicted_knee": self.prediction.knee,
            "advised_knee": self.advised_knee,
            "gap": self.gap,
            "capacity": self.prediction.as_json(),
            "server_facts": self.facts.as_json(),
            "conflicts": list(self.facts.conflicts),
        }


def _workload(curve: pd.DataFrame, suffix: str) -> Workload:
    """Mean prompt and generated tokens per request (each level's token rates over its request
    rate, averaged over the levels: the server's usage counts), and the tested levels."""

    def num(name: str) -> pd.Series:
        col = f"{name}{suffix}"
        return (
            pd.to_numeric(curve[col], errors="coerce") if col in curve else pd.Series(dtype=float)
        )

    levels = tuple(float(u) for u in curve["value"]) if "value" in curve else ()
    req = num("req_per_s")
    per_in = (num("input_tok_per_s") / req).mean()
    per_out = (num("output_tok_per_s") / req).mean()
    return Workload(float(per_in), float(per_out), levels)


def configured_lengths(
    run: dict, image_charges: Mapping[int, int] | None = None
) -> tuple[float, float] | None:
    """The prompt and output lengths every request of a run was sent with, where they are exact
    (prompts calibrated to `--input-tokens`, outputs forced to `--output-tokens`); with `--images`
    the prompt is its text plus what the server charged for that many images (`image_charges`,
    `analysis.levels.measure.image_charges`: the client cannot count it beforehand). None for a
    workload whose lengths vary (a trace, a dataset, agentic sessions, length distributions, approximate prompts,
    outputs not forced) or images whose charge is unknown. The capacity model reads these rather
    than the levels' means: a mean a token over 640 moved a KV limit from 819 to 682 requests
    between two runs, and the means put 2,344 tokens on requests of 2,370 with an image."""
    settings = run.get("settings")
    if not isinstance(settings, dict):
        return None
    # an agentic session's prompt grows by each reply and tool result: --input-tokens is its first
    varying = (
        "trace",
        "dataset",
        "input_lengths",
        "output_lengths",
        "approximate_prompts",
        "agentic",
    )
    if any(settings.get(k) for k in varying) or settings.get("vllm_params") is False:
        return None
    try:
        prompt, output = float(settings["input_tokens"]), float(settings["output_tokens"])
        images = int(settings.get("images") or 0)
    except (KeyError, TypeError, ValueError):
        return None
    if images:
        charge = (image_charges or {}).get(images)
        if charge is None:
            return None
        prompt += charge
    shared = float(settings.get("shared_prefix_tokens") or 0)
    return (prompt, output) if prompt > 0 and output > 0 and shared <= prompt else None


def _knee(saturation: Saturation) -> float | None:
    if saturation.saturated and saturation.saturation is not None:
        return float(saturation.saturation.value)
    return None


def _left_out(saturation: Saturation) -> set[float]:
    return {float(f.value) for f in saturation.failed if f.excluded}


def level_verdicts(
    rows: list[dict],
    suffix: str,
    facts: ServerFacts,
    saturation: Saturation,
    no_server: str = "",
    gpu_simulated: bool = False,
) -> tuple[list[Bottleneck], ServerFacts]:
    """A verdict per level row (sorted by value), and the facts with what the rows inferred;
    `gpu_simulated`: the rows' GPU figures came from the simulator (a verdict says so)."""
    knee, left = _knee(saturation), _left_out(saturation)
    evidence = []
    unmeasured = set()
    for row in sorted(rows, key=lambda r: float(r["value"])):
        lv = LevelEvidence.of(row, suffix)
        gpu = replace(lv.gpu, simulated=gpu_simulated)
        evidence.append(replace(lv, left_out=lv.value in left, gpu=gpu))
        if _not_measured(row, suffix):
            unmeasured.add(lv.value)
    evidence = with_baseline(evidence)
    kept = [lv for lv in evidence if not lv.left_out and lv.value not in unmeasured]
    past = [lv for lv in kept if knee is None or lv.value >= knee]
    facts = infer_limits(past, contradicted(kept, facts))
    verdicts, below, below_kind = [], None, ""
    for lv in evidence:
        if lv.value in unmeasured:  # nothing to judge: its figures are no level's
            verdicts.append(Bottleneck(NOT_MEASURED.name, lv.value, NOT_MEASURED_REASON))
            continue
        verdict = level_verdict(lv, below, facts, knee is not None and lv.value >= knee, no_server)
        if verdict.kind == NOT_SATURATED.name:
            verdict = past_useful_gain(lv, below) or verdict
        if knee is None and lv.waits and not lv.left_out:
            # no knee by throughput (still rising, or too noisy to tell), yet a level may already
            # hold requests back at a configured limit: more load there adds waiting requests
            held = level_verdict(lv, below, facts, True, no_server)
            verdict = held if kind_named(held.kind).configured else verdict
        verdict = client_over_compute(verdict, lv, below, below_kind)
        verdicts.append(verdict)
        if not lv.left_out:
            below, below_kind = lv, verdict.kind
    return verdicts, facts


def _not_measured(row: dict, suffix: str) -> bool:
    """A level none of whose requests was measured (in every run of a curve row): it ended
    before any of them had (a time cap, an interruption, a lost worker)."""
    try:
        measured = float(row.get(f"measured{suffix}", math.nan))
    except (TypeError, ValueError):
        return False
    return measured == 0


def diagnose_series(
    curve: pd.DataFrame,
    saturation: Saturation,
    facts: ServerFacts,
    no_server: str = "",
    noun: str = "concurrent",
    tolerance: float = 0.05,
    gpu_simulated: bool = False,
    lengths: tuple[float, float] | None = None,
) -> SeriesDiagnosis:
    """The series' diagnosis from its curve (per level across runs, `_mean` columns);
    `gpu_simulated`: some run's GPU figures came from the simulator; `lengths`: the exact prompt
    and output lengths the requests were sent with (`configured_lengths`), else the levels'
    means are the capacity model's workload."""
    rows = row_dicts(curve)
    verdicts, facts = level_verdicts(rows, "_mean", facts, saturation, no_server, gpu_simulated)
    work = _workload(curve, "_mean")
    if lengths is not None:
        work = replace(work, input_tokens=lengths[0], output_tokens=lengths[1])
    rate = saturation.axis.open_loop
    if rate:  # the model counts requests in the batch; an open-loop series' levels are rates
        work = replace(work, levels=())
    step_cost = fit_step_cost(
        [v.evidence.get("requests_in_batch", math.nan) for v in verdicts],
        [v.evidence.get("step_time_s", math.nan) for v in verdicts],
    )
    prediction = predict(
        facts, work.input_tokens, work.output_tokens, work.levels, step_cost, tolerance
    )
    if rate:  # its first limit is a number of requests in the batch, not a rate to compare
        prediction = replace(prediction, knee=None)
    knee = _knee(saturation)
    at_knee = next((v for v in verdicts if knee is not None and v.value == knee), None)
    if at_knee is not None:
        # what stops throughput shows past the knee (the knee is the last level that grew, its
        # batch just short of a cap): the first determined level past it; where every level past
        # it is undetermined, the first of them (the knee's own verdict names what slowed its
        # growth, not what stopped it: a knee whose throughput still rose 54 % read `compute`
        # while the cap past it went unseen); a knee held at a configured limit keeps its own
        past = [
            v for v in verdicts if knee is not None and v.value > knee and v.kind != FAILURES.name
        ]
        fallback = past[0] if past and at_knee.kind == COMPUTE_BOUND.name else at_knee
        at_knee = next((v for v in past if v.kind != UNDETERMINED.name), fallback)
    advice_noun = "in the batch" if rate else noun
    verdicts = [
        with_advice(v, facts, work, prediction, advice_noun) if v.kind != NOT_SATURATED.name else v
        for v in verdicts
    ]
    held_first = next((v for v in verdicts if knee is None and kind_named(v.kind).server), None)
    if at_knee is None and held_first is not None:
        at_knee = held_first
    if at_knee is None:
        kind = NOT_SATURATED if saturation.peak is not None else UNDETERMINED
        sentence = (
            "Not saturated within the tested levels: no limit to name."
            if kind == NOT_SATURATED
            else "No level to judge."
        )
        return SeriesDiagnosis(
            kind.name,
            None,
            sentence,
            (),
            prediction,
            None,
            knee_gap(prediction, None, noun, saturation.axis.plural if rate else "", verdicts),
            facts,
            verdicts,
        )
    chosen = next(v for v in verdicts if v.value == at_knee.value)
    advised = next((a for a in chosen.advice if a.to_value is not None), None)
    advised_knee = None
    if advised is not None and advised.flag in _FACT_OF_FLAG and advised.to_value is not None:
        together = [(advised.flag, advised.to_value), *((a.flag, a.to_value) for a in advised.also)]
        changed = ServerFacts(
            {
                **facts.facts,
                **{
                    _FACT_OF_FLAG[flag]: Fact(float(value.replace(",", "")), GIVEN)
                    for flag, value in together
                    if flag in _FACT_OF_FLAG
                },
            }
        )
        after = predict(
            changed, work.input_tokens, work.output_tokens, work.levels, step_cost, tolerance
        )
        advised_knee = after.knee
        if advised_knee is None and after.limits:  # beyond the tested levels: where it fills
            advised_knee = after.limits[0].concurrency
    if knee is None:
        held = (
            "the server is compute-bound past the point of useful gain"
            if chosen.kind == COMPUTE_BOUND.name
            else "requests wait at a configured limit"
        )
        sentence = (
            f"Throughput grew up to the highest level (no knee by the saturation rule), yet from "
            f"{chosen.value:,.0f} {noun} on {held}: at {chosen.value:,.0f} it is {_describe(chosen)}."
        )
    elif chosen.value == knee:
        sentence = f"At ~{knee:,.0f} {noun} (the knee): {_describe(chosen)}."
    else:
        sentence = (
            f"At ~{knee:,.0f} {noun} (past the knee, at {chosen.value:,.0f}): {_describe(chosen)}."
        )
    return SeriesDiagnosis(
        chosen.kind,
        chosen.value if knee is None else knee,
        sentence,
        chosen.advice,
        prediction,
        advised_knee,
        knee_gap(prediction, knee, noun, saturation.axis.plural if rate else "", verdicts),
        facts,
        verdicts,
        chosen.value,
    )


_FACT_OF_FLAG = {
    "--max-num-seqs": "max_num_seqs",
    "--max-num-batched-tokens": "max_num_batched_tokens",
    "--num-gpu-blocks-override": "num_gpu_blocks",
}


def limit_name(kind: str) -> str:
    """A verdict kind as a sentence names the limit: "the sequence cap (--max-num-seqs)"."""
    return kind_named(kind).label


def _describe(v: Bottleneck) -> str:
    return kind_named(v.kind).sentence(v.reason)


def diagnose_runs(
    runs: Sequence[tuple[dict, pd.DataFrame]],
    curve: pd.DataFrame,
    saturation: Saturation,
    tolerance: float = 0.05,
    image_charges: Mapping[int, int] | None = None,
) -> tuple[SeriesDiagnosis, list[dict[float, dict]]]:
    """A series' diagnosis from its runs (run.json, per-level table) and curve, and each run's own
    level verdicts on the series' knee, as JSON by level. A run's level shares the series' advice
    where it has the same limit. `image_charges`: the prompt tokens the server charged per image
    count (the first run's; `configured_lengths`)."""
    facts = server_facts(runs[0][0])
    no_server = next((why for run, _ in runs if (why := no_server_reason(run))), "")
    diagnosis = diagnose_series(
        curve,
        saturation,
        facts,
        no_server,
        saturation.axis.noun,
        tolerance,
        any(simulated(run) for run, _ in runs),
        configured_lengths(runs[0][0], image_charges),
    )
    series_levels = {v.value: v for v in diagnosis.levels}
    per_run = []
    for run, metrics in runs:
        verdicts, _ = level_verdicts(
            row_dicts(metrics),
            "",
            diagnosis.facts,
            saturation,
            no_server_reason(run),
            simulated(run),
        )
        mine = {}
        for v in verdicts:
            same = series_levels.get(v.value)
            advice = same.advice if same is not None and same.kind == v.kind else ()
            mine[v.value] = {**v.as_json(), "advice": [a.as_json() for a in advice]}
        per_run.append(mine)
    return diagnosis, per_run
