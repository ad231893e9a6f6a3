"""A load process's part in replaying a trace (--trace): the segment, and its requests' prompts.

Every process reads the same segment of the trace (`trace_segment`: the file, its window, its
speed), so the master's plan and each process's share agree on it; the run session's level
message says which share a process takes and when the segment starts (`LevelShare`).

A request with `hash_ids` gets a prompt whose blocks are named by them (`block_prompts`): the
requests that share a block id share that block of prompt, so the server's prefix cache sees the
reuse the trace has, and only that (the run's salt keeps an earlier run's blocks out). One
without gets a prompt unique from its first tokens, like the built-in test's. Either is exact:
the server counts the trace's input length, unless that is shorter than the shortest exact
prompt on this target, which is sent instead (counted, and logged once).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from ..settings import Settings
from ..user_values import SettingsError
from ..workload.arrivals import DEFAULT_ARRIVALS
from .prompts import PromptFactory, PromptPlan

if TYPE_CHECKING:  # (a run without --trace never loads them)
    from ..workload.traces import Trace, TraceRequest
    from .block_prompts import BlockPrompts

logger = logging.getLogger(__name__)


def trace_segment(settings: Settings) -> Trace:
    """The part of --trace this run replays: --trace-start and --trace-duration of it (trace
    seconds), --trace-speed times faster, its first request at the time the window starts.
    Each line is checked as it is read (--trace-max-tokens, --trace-max-requests, the span of
    its times), so a hostile file is refused before anything of its size is made."""
    from ..workload.traces import TraceError, TraceLimits, read_trace, resolve_trace

    limits = TraceLimits(tokens=settings.trace_max_tokens, requests=settings.trace_max_requests)
    try:
        trace = read_trace(resolve_trace(settings.trace), settings.trace_format, limits)
    except TraceError as e:
        raise SettingsError(f"--trace: {e}") from None
    if (trace.format == "agentic") != settings.agentic:
        raise SettingsError(
            f"--trace {settings.trace}: an agentic trace replays sessions: give it with --agentic"
            if settings.agentic is False
            else f"--trace {settings.trace}: --agentic replays an agentic trace's sessions, and "
            f"this is a {trace.format} trace (give it without --agentic)"
        )
    window = trace.window(settings.trace_start, settings.trace_duration or None)
    if not window.requests:
        raise SettingsError(
            f"--trace {settings.trace}: no request in the window from {settings.trace_start:g} s "
            f"({len(trace.requests)} requests over {trace.duration:,.1f} s): choose "
            "--trace-start and --trace-duration inside the trace"
        )
    return window.faster(settings.trace_speed)


def check_trace_fits(segment: Trace, context: int | None) -> None:
    """Refuse, naming its line, a trace with a request longer than the model's context
    (`max_model_len` from /v1/models; None: the server does not say, --trace-max-tokens alone
    bounds it)."""
    from ..workload.traces import TraceError

    try:
        segment.check_context(context)
    except TraceError as e:
        raise SettingsError(f"--trace: {e}") from None


@dataclass(frozen=True)
class LevelShare:
    """What the run session tells a load process when a level starts: the level's kind of load
    (`load_kinds`) and this process's part of it."""

    level: int
    kind: str
    value: float
    rate: float = 0.0  # a rate level: this process's share of it (requests/s) ...
    phase: float = 0.0  # ... its constant arrivals this share of a gap late ...
    arrivals: str = DEFAULT_ARRIVALS  # ... and how they are spaced
    processes: int = 1  # a trace segment: this process takes every `processes`-th request ...
    index: int = 0  # ... from this one ...
    at: float = 0.0  # ... each due at this wall time plus its time in the segment
    salt: int = 0  # names this run's prompt blocks


class TraceReplay:
    """One process's replay: the segment (read once per test) and its requests' prompts."""

    def __init__(self, settings: Settings) -> None:
        self.segment = trace_segment(settings)
        self._blocks: BlockPrompts | None = None
        self._salt: int | None = None
        self.lengthened = 0  # requests sent longer than the trace says (shorter than possible)

    def share(self, share: LevelShare) -> tuple[TraceRequest, ...]:
        self._salt = share.salt
        self._blocks = None
        return self.segment.share(share.processes, share.index)

    def prompt(
        self, request: TraceRequest, prompts: PromptFactory, plan: PromptPlan
    ) -> tuple[str, int]:
        """`request`'s prompt and the prompt tokens the server will count for it."""
        tokens = sent_tokens(request.input_tokens, request.hash_ids, plan)
        if request.hash_ids:
            content = self._block_prompts(plan).content(tokens, request.hash_ids)
        else:
            content = prompts.next_content(tokens)
        if tokens != request.input_tokens:
            self.lengthened += 1
            if self.lengthened == 1:
                logger.warning(
                    "trace request %d asks for a %d-token prompt; the shortest exact prompt on "
                    "this target is %d tokens, sent instead (the report counts such requests)",
                    request.index,
                    request.input_tokens,
                    tokens,
                )
        return content, tokens

    def _block_prompts(self, plan: PromptPlan) -> BlockPrompts:
        if self._blocks is None:
            from .block_prompts import BlockPrompts

            self._blocks = BlockPrompts(plan, self._salt or 0, self.segment.block_tokens)
        return self._blocks


def sent_tokens(input_tokens: int, hash_ids: Sequence[int], plan: PromptPlan | None) -> int:
    """The prompt tokens a trace request is sent with: its own, or the shortest exact prompt on
    this target where it asks for fewer (block prompts: the template, lead and one atom,
    `BlockPrompts.min_tokens`; others: `PromptFactory.min_tokens`). Unchanged without a plan."""
    if plan is None:
        return input_tokens
    shortest = plan.overhead + 1 if hash_ids else plan.input_tokens - plan.body_atoms
    return max(input_tokens, shortest)


def replay_header(
    settings: Settings, segment: Trace, plan: PromptPlan | None, labels: dict
) -> dict:
    """run.json's `trace`: the segment replayed, what it asks of the server, and the prefix-cache
    hits its hash_ids imply on this server (`block_prompts.predicted_cached_tokens`: each request
    sent after the earlier ones' prefills, nothing evicted; None where it cannot be told: no
    calibrated prompts, or no block size from the server's /metrics)."""
    from .block_prompts import BlockPrompts

    sent = [(sent_tokens(r.input_tokens, r.hash_ids, plan), r.hash_ids) for r in segment.requests]
    outputs = [r.output_tokens for r in segment.requests]
    if segment.format == "agentic":  # every turn of the sessions is sent, the subagents' too
        turns = [t for r in segment.requests for t in r.session.all_turns()]
        sent = [(sent_tokens(t.input_tokens, (), plan), ()) for t in turns]
        outputs = [t.output_tokens for t in turns]
    predicted: int | None = None
    block = labels.get("block_size")
    if segment.format == "agentic":
        pass  # (a session's history is its own prefix, not hash_ids: not predicted here)
    elif plan is not None and str(labels.get("enable_prefix_caching", "True")) == "False":
        predicted = 0
    elif plan is not None and block and str(block).isdigit():
        hits = BlockPrompts(plan, 0, segment.block_tokens).predicted_cached_tokens(sent, int(block))
        predicted = None if hits is None else sum(hits)
    return {
        "path": settings.trace,
        "format": segment.format,
        "start": settings.trace_start,
        "duration": segment.duration,
        "speed": settings.trace_speed,
        "requests": len(sent),
        "prompt_tokens": sum(tokens for tokens, _ in sent),
        "output_tokens": sum(outputs),
        "block_tokens": segment.block_tokens,
        "server_block": int(block) if block and str(block).isdigit() else None,
        "predicted_cached_tokens": predicted,
    }
