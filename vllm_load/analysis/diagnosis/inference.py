"""What a run's saturated levels show of the server's configuration where nobody said it, and
what they contradict of what was said (`docs/diagnosis.md`, "What the server is configured with").

A limit is inferred only where nothing else explains the evidence: a sequence cap from the
running gauge's plateau at `PLATEAU_LEVELS` saturated levels or more (`cap_plateau`), a token
budget from the tokens per engine step pinned at as many (`budget_pin`); where both fit, neither
(the levels stay `undetermined` and name both). With one workload at every level a cap pins the
tokens a step carries as a spent budget does, and a budget pins the batch as a cap does; what
tells them apart is the prefill: a spent budget chunks it over at least ~prompt / tokens-per-step
engine steps (`LevelEvidence.prefills_unchunked`), a cap leaves it whole; and a spent budget
leaves a prefill unfinished in most steps, so fewer tokens are generated a step than requests run
while the queue never empties, which a full batch never does (`LevelEvidence.prefills_carried`);
where every running request yields a token a step instead, no budget was spent
(`LevelEvidence.prefills_finished`).

A given or default flag the server's own figures
contradict is dropped and named (`contradicted`): the measured figure wins.
"""

from __future__ import annotations

from dataclasses import replace

from .facts import DEFAULT, GIVEN, INFERRED, READ, Fact, ServerFacts
from .verdict import WAITING_MIN, LevelEvidence

PLATEAU = 0.10  # running-gauge peaks within this relative spread of each other form a plateau
PLATEAU_LEVELS = 2  # ... at this many saturated levels at least (one level is no plateau)
BUDGET_PIN = 0.05  # mean tokens per engine step within this relative spread: pinned at a budget


def _waiting_for_capacity(levels: list[LevelEvidence], facts: ServerFacts) -> list[LevelEvidence]:
    """The levels (lowest first) where requests wait with room in the KV cache: a full batch or a
    spent token budget (or something no figure shows) holds them back."""
    return sorted(
        (lv for lv in levels if lv.waits and not lv.kv_full(facts)), key=lambda lv: lv.value
    )


def _sure(facts: ServerFacts, name: str) -> float | None:
    """A flag's value where the server or the user said it (a default may have been changed)."""
    fact = facts.get(name)
    return facts.number(name) if fact is not None and fact.source in (READ, GIVEN) else None


def _carried(held: list[LevelEvidence]) -> bool:
    """Prefills left unfinished at every one of the `held` levels (lowest first), and at the top
    one a backlog of a whole batch or more, where a cap's queue would not empty: a batch swinging
    under its peak while its queue empties between scrapes reads as unfinished prefills too (a
    cap of 8 at 16 users, 1.9 waiting on average, its one scrape at 1: 6.4 tokens a step), but
    not at such a backlog."""
    return all(lv.prefills_carried for lv in held) and held[-1].queued >= held[-1].running_max


def cap_plateau(levels: list[LevelEvidence], facts: ServerFacts) -> float | None:
    """A sequence cap the saturated `levels` show, or None: the running gauge's peak, the same
    within `PLATEAU` at `PLATEAU_LEVELS` levels or more where requests wait with room in the KV
    cache, the batch held at that peak, engine steps not full of tokens (a known budget's, else
    neither spread prefills nor a token count pinned within `BUDGET_PIN`), and more waiting at the
    higher level. One level is no plateau; a batch whose mean stays well under its peak is not
    held by a cap (a slow engine or a spent budget lets it swing); a spent budget pins the batch
    as a cap does, so full steps rule the cap out."""
    budget = _sure(facts, "max_num_batched_tokens")
    held = [
        lv
        for lv in _waiting_for_capacity(levels, facts)
        if lv.held_at_peak and not lv.steps_full(budget)
    ]
    if len(held) < PLATEAU_LEVELS or _carried(held):
        return None  # a cap leaves no prefill unfinished while requests wait: a budget does
    peaks = [lv.running_max for lv in held]
    if max(peaks) - min(peaks) > PLATEAU * max(peaks):
        return None
    if held[-1].queued - held[0].queued < WAITING_MIN:
        return None  # more load, and no more waiting: not a cap holding requests back
    tokens = [lv.step_tokens for lv in held if lv.step_tokens == lv.step_tokens]
    pinned = len(tokens) < len(held) or max(tokens) - min(tokens) <= BUDGET_PIN * max(tokens)
    if (
        budget is None
        and pinned
        and not all(lv.prefills_unchunked for lv in held)
        and not all(lv.prefills_finished for lv in held)
    ):
        # steps pinned at one token count fit a spent budget as well: on the simulator a budget
        # of 40 (and of 2048) held the batch at its peak at two levels just as a cap does; a
        # budget is ruled out only where no prefill was chunked as a spent one would chunk it,
        # or none was left unfinished while requests waited (a spent budget leaves one)
        return None
    return float(round(max(peaks)))


def budget_pin(levels: list[LevelEvidence], facts: ServerFacts) -> float | None:
    """A token budget the saturated `levels` show, or None: the mean tokens per engine step, the
    same within `BUDGET_PIN` at `PLATEAU_LEVELS` levels or more where requests wait with room in
    the KV cache, while the batch is not held at a cap (a full batch pins the tokens a step
    carries just as a spent budget does) unless, the cap unknown, prefills are spread at every
    one of them. A batch held at a cap the server or the user gave explains the pin outright: the
    demo at a given --max-num-seqs 16 had a budget of ~139 inferred from its full batch's steps,
    and its advice dropped, as a budget that small left the cap nothing to move."""
    cap = _sure(facts, "max_num_seqs")
    held = [
        lv
        for lv in _waiting_for_capacity(levels, facts)
        if lv.step_tokens == lv.step_tokens and lv.step_tokens > 0
    ]
    if len(held) < PLATEAU_LEVELS:
        return None
    tokens = [lv.step_tokens for lv in held]
    if max(tokens) - min(tokens) > BUDGET_PIN * max(tokens):
        return None
    carried = _carried(held)
    if (
        not carried
        and any(lv.batch_full(cap) for lv in held)
        and (cap or not all(lv.spread for lv in held))
    ):
        return None  # unless every level left prefills unfinished, which a full batch never does
    if all(lv.prefills_unchunked for lv in held) or all(lv.prefills_finished for lv in held):
        return None  # no prefill was chunked, or none left unfinished: no budget was spent
    return float(round(sum(tokens) / len(tokens)))


def contradicted(levels: list[LevelEvidence], facts: ServerFacts) -> ServerFacts:
    """`facts` without a given or default sequence cap below the requests the server ran at once,
    named in `conflicts`: the measured figure wins over what the server was said to have. (A
    budget is not checked so: a step's token count includes prompt tokens found in the prefix
    cache, so its mean can pass a budget the server keeps: 49.5 tokens a step at a budget of 40
    on the simulator.)"""
    fact, limit = facts.get("max_num_seqs"), facts.number("max_num_seqs")
    if fact is None or not limit or fact.source not in (GIVEN, DEFAULT):
        return facts
    over = [
        lv for lv in levels if lv.running_max == lv.running_max and lv.running_max > limit + 0.5
    ]
    if not over:
        return facts
    top = max(over, key=lambda lv: lv.running_max)
    note = (
        f"--max-num-seqs {fact.text()} contradicts the server: {top.running_max:,.1f} requests "
        f"ran at once (vllm:num_requests_running) at {top.value:,.0f}; the measured figure wins "
        "and the flag is taken as unknown"
    )
    return replace(facts.without("max_num_seqs"), conflicts=(*facts.conflicts, note))


def infer_limits(levels: list[LevelEvidence], facts: ServerFacts) -> ServerFacts:
    """`facts` with the sequence cap (`cap_plateau`) and the token budget (`budget_pin`) inferred
    from the saturated `levels` where neither the server nor the user gave them (a documented
    default gives way to what the levels show). Where the levels show both, neither is inferred:
    the levels stay undetermined and name both (`level_verdict`)."""
    cap = None if _sure(facts, "max_num_seqs") else cap_plateau(levels, facts)
    budget = None if _sure(facts, "max_num_batched_tokens") else budget_pin(levels, facts)
    if cap is not None and budget is not None:
        return facts
    if cap is not None:
        facts = facts.with_fact("max_num_seqs", Fact(cap, INFERRED))
    if budget is not None:
        facts = facts.with_fact("max_num_batched_tokens", Fact(budget, INFERRED))
    return facts
