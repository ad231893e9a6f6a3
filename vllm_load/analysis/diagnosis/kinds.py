"""Every kind of bottleneck a level's verdict can name, declared once.

A declaration says what the kind is called (`name`: the verdict's `kind` in JSON, in the report
and in `tune --advice`), how a sentence names it (`label`), its colour on the report's evidence
chart, whether it is a limit of the server's configuration (`configured`: a level held there
counts even below the knee; `server`: a limit of the server's own, configured or compute), why it
may bind past the capacity model's knee, the advice it can give (`advice`: one of `advice`'s functions), why
the report gives none where it gives none, and why `tune --advice` has nothing to prove for it
(`nothing_to_prove`: "" for the server's own limits, whose advice the loop can run).

Everything reads them from here: the verdict's rules name the kind they give (`verdict`: the
rules stay there, in the order they are tried), the series' diagnosis its sentence and advice
(`advise`), the evidence chart its colours and legend, the "Why it saturates" section its
no-advice sentence, the live verdict, and `tune --advice` the kinds it knows and those it
refuses. Adding a kind is its declaration here, the rule that gives it (`verdict`) and, where it
advises, its advice function (`advice`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Mapping

from . import advice as advise_on
from . import deployment_advice as advise_deployment
from .advice import Advice, Situation, Workload
from .capacity import BUDGET, COMPUTE, KV, SEQS, Prediction
from .facts import ServerFacts

#: what a kind of advice is: the flags that move the limit, from the verdict's situation
AdviceRule = Callable[[Situation], "tuple[Advice, ...]"]


@dataclass(frozen=True)
class BottleneckKind:
    """A kind of verdict: see the module's docstring."""

    name: str
    label: str  # "limited by <label>"
    colour: str  # its levels' points on the evidence chart (a matplotlib colour)
    advice: AdviceRule = advise_on.no_advice
    configured: bool = False
    server: bool = False  # a limit of the server (configured, or compute)
    nothing_to_prove: str = ""  # why `tune --advice` refuses a series diagnosed so
    no_advice: str = ""  # the report's sentence where it advises nothing ({reason}: the verdict's)
    says: str = "limited by {label}: {reason}"  # a level's verdict as a sentence names it
    binds_later: str = ""  # why the limit may bind past the capacity model's knee
    from_levels: bool = True  # given by a level rule (False: by a decision across runs)

    def sentence(self, reason: str) -> str:
        return self.says.format(label=self.label, reason=reason)

    def why_no_advice(self, reason: str) -> str:
        """Why a series diagnosed so advises nothing; `reason`: its verdict's."""
        text = self.no_advice or (
            "No advice: no flag the evidence supports moves {name} here (the capacity model sees "
            "no room past it)."
        )
        return text.format(name=self.name, reason=reason)


SEQUENCE_CAP = BottleneckKind(
    SEQS, "the sequence cap (--max-num-seqs)", "tab:orange", advise_on.more_sequences,
    configured=True, server=True,
    binds_later="throughput keeps rising a little past a full batch while the waiting requests' "
    "prefills fill the steps",
)  # fmt: skip
KV_CACHE = BottleneckKind(
    KV, "the KV cache", "tab:purple", advise_on.more_kv_cache, configured=True, server=True,
    binds_later="vLLM allocates a request's KV blocks as it generates, so more requests run at "
    "once than fit at full length",
)  # fmt: skip
TOKEN_BUDGET = BottleneckKind(
    BUDGET, "the token budget (--max-num-batched-tokens)", "tab:brown",
    advise_on.bigger_token_budget, configured=True, server=True,
    binds_later="the model assumes every step is full; steps with room left carry more requests",
)  # fmt: skip
COMPUTE_BOUND = BottleneckKind(
    COMPUTE, "compute", "tab:red", advise_on.more_compute, server=True
)  # fmt: skip
CLIENT = BottleneckKind(
    "client", "the client", "tab:pink", advise_deployment.more_load_processes,
    nothing_to_prove="the load generator, not the server, was the limit: run again with more "
    "load processes (--workers); no server flag to prove",
)  # fmt: skip
FAILURES = BottleneckKind(
    "failures", "failures", "black",
    nothing_to_prove="its levels failed: find why (the report's failures) before tuning the server",
    no_advice="No advice: the level at the knee was left out for its failed requests; their "
    "causes come first.",
)  # fmt: skip
NOT_SATURATED = BottleneckKind(
    "not_saturated", "not_saturated", "tab:green",
    nothing_to_prove="the series did not saturate within its levels: no limit to move and no "
    "advice to prove (test higher levels first)",
    no_advice="No advice: the series does not saturate within the tested levels, so no limit "
    "binds.",
)  # fmt: skip
UNDETERMINED = BottleneckKind(
    "undetermined", "undetermined", "tab:gray",
    nothing_to_prove="the diagnosis could not name the limit (its signals were missing or "
    "contradicted each other): no advice to prove",
    no_advice="No advice: the limit is undetermined ({reason}).",
    says="the limit is undetermined: {reason}",
)  # fmt: skip

#: given by no level rule: where runs of several K measured the same load, a series whose K lost
#: to a smaller K (`decisions.speculation_k`, applied to the series' diagnosis by
#: `decisions.speculation_verdict`); its advice sets `num_speculative_tokens` (`server.command_settings`)
SPECULATION = BottleneckKind(
    "speculation", "speculative decoding's verification cost (num_speculative_tokens)",
    "tab:olive", configured=True, server=True, says="{reason}", from_levels=False,
)  # fmt: skip
NOT_MEASURED = BottleneckKind(
    "not_measured", "not_measured", "white",  # no point: a level with no measured request
    nothing_to_prove="its knee level measured no request: nothing to judge or prove",
    no_advice="No advice: {reason}.",
    says="{reason}",
)  # fmt: skip

_RATIO = (
    "a disaggregated deployment's instance counts and link are no vLLM flag the tune loop can "
    "change: change the prefill:decode ratio (or the link) and run again"
)
#: a disaggregated deployment (--role-metrics): the part of TTFT that grew most past the knee
KV_TRANSFER = BottleneckKind(
    "kv_transfer", "the KV transfer from prefill to decode", "tab:cyan",
    advise_deployment.faster_kv_transfer, nothing_to_prove=_RATIO,
)  # fmt: skip
PREFILL_SIDE = BottleneckKind(
    "prefill_side", "the prefill instances", "tab:olive", advise_deployment.more_prefill,
    nothing_to_prove=_RATIO,
)  # fmt: skip
DECODE_SIDE = BottleneckKind(
    "decode_side", "the decode instances", "tab:blue", advise_deployment.more_decode,
    nothing_to_prove=_RATIO,
)  # fmt: skip

#: every kind, by name, in the order a legend lists them
KINDS: Mapping[str, BottleneckKind] = {
    kind.name: kind
    for kind in (
        SEQUENCE_CAP, KV_CACHE, TOKEN_BUDGET, COMPUTE_BOUND, SPECULATION, CLIENT, FAILURES,
        NOT_SATURATED, UNDETERMINED, NOT_MEASURED, KV_TRANSFER, PREFILL_SIDE, DECODE_SIDE,
    )
}  # fmt: skip


def kind_named(name: str) -> BottleneckKind:
    """The kind a verdict names (an unknown name reads as `undetermined`)."""
    return KINDS.get(name, UNDETERMINED)


@dataclass(frozen=True)
class Bottleneck:
    """A level's verdict: its kind (a `KINDS` name), the figures it stands on, the sentence that
    says it with them, and (filled by `with_advice`) what to change."""

    kind: str
    value: float
    reason: str
    evidence: dict[str, float] = field(default_factory=dict)
    advice: tuple[Advice, ...] = ()

    def as_json(self) -> dict:
        return {
            "kind": self.kind,
            "reason": self.reason,
            "evidence": self.evidence,
            "advice": [a.as_json() for a in self.advice],
        }


def advise(
    verdict: Bottleneck,
    facts: ServerFacts,
    work: Workload,
    now: Prediction,
    noun: str = "concurrent",
) -> tuple[Advice, ...]:
    """The advice for a saturated level's verdict: its kind's."""
    situation = Situation(verdict.evidence, facts, work, now, noun)
    return kind_named(verdict.kind).advice(situation)


def with_advice(
    verdict: Bottleneck,
    facts: ServerFacts,
    work: Workload,
    now: Prediction,
    noun: str = "concurrent",
) -> Bottleneck:
    return replace(verdict, advice=advise(verdict, facts, work, now, noun))
