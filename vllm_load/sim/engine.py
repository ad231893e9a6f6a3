"""A continuous-batching engine model: vLLM's scheduler in miniature, with simulated time.

Every step the scheduler (like vLLM v1's) first serves the running sequences in admission
order, one token each for decodes and as much of the remaining prompt as the step's token
budget allows for prefills (chunked prefill), then admits waiting sequences while there is
room in the batch (`max_num_seqs`), in the budget (`max_num_batched_tokens`) and in the KV
cache (`num_gpu_blocks` x `block_size`). When a running sequence needs a new KV block and none
is free, the most recently admitted sequence is preempted: its blocks are freed and it goes
back to the front of the queue to be recomputed later (vLLM's recompute preemption).

With prefix caching (on by default, like vLLM V1; see prefix_cache.py) a sequence that brings
its prompt's block hashes is admitted with its leading cached blocks already computed, so only
the rest of its prompt is prefilled; its full prompt blocks are cached as it is scheduled, and
they stay cached, evictable, after it finishes or is preempted.

With speculative decoding (`Speculation`, off by default; draft_model.py) every decoding sequence also carries up
to K draft tokens into the step; the target verifies them in it, and the sequence keeps the
accepted prefix of the draft and one token of its own (vLLM's rejection sampling, with the
acceptance drawn per position).

A step lasts `StepCost.seconds(prefill tokens, decoding sequences) * time_scale`, plus the
speculation's share (`Speculation.seconds(draft tokens)`). Steps are
chained on absolute deadlines: the next step starts at the previous step's deadline, not at
the moment Python got round to it, so event-loop overhead is absorbed instead of added.
"""

from __future__ import annotations

import asyncio
import random
from collections import deque
from dataclasses import dataclass, field

from .config import EngineConfig
from .counters import (
    KV_CACHE,
    MAX_NUM_BATCHED_TOKENS,
    MAX_NUM_SEQS,
    PREEMPTION,
    Occupancy,
    ServerStats,
    SpecCounts,
)
from .draft_model import DraftModel
from .prefix_cache import PrefixCache
from .sequence import Sequence

# How far (real seconds) the step chain may lag behind its deadlines before it gives up
# catching up and restarts from "now" (a stalled process should not burst afterwards).
MAX_LAG = 0.25


class Engine:
    """Schedules sequences step by step on the running event loop."""

    def __init__(self, config: EngineConfig, stats: ServerStats, seed: int = 0) -> None:
        self.config = config
        self.stats = stats
        if config.speculation.tokens != stats.speculation.positions:  # vLLM exposes K positions
            stats.speculation = SpecCounts(config.speculation.tokens)
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.free_blocks = config.num_gpu_blocks
        self._watermark = max(
            1, config.num_gpu_blocks // 100
        )  # admission keeps 1% free, like vLLM v0
        self._plan: StepPlan | None = None
        self._deadline: float | None = None  # end of the step in flight; None when idle
        self._rng = random.Random(seed)
        self.drafts = DraftModel(config.speculation, seed)
        self._loop: asyncio.AbstractEventLoop | None = None
        self.cache: PrefixCache | None = PrefixCache() if config.enable_prefix_caching else None
        self._busy_done = (
            0.0  # seconds of finished steps: the simulated GPU's busy time (dcgm_exporter.py)
        )
        self._step_start = 0.0

    # --- API for the HTTP layer -----------------------------------------------------------

    def add(self, seq: Sequence) -> None:
        """Queue a sequence; starts the step chain if the engine was idle."""
        loop = self._loop = asyncio.get_running_loop()
        seq.queued_at = loop.time()
        self.waiting.append(seq)
        if self._deadline is None:
            self._start_step(seq.queued_at)

    def abort(self, seq: Sequence) -> None:
        """The client went away: drop the sequence and free its KV blocks."""
        if seq.finished or seq.aborted:
            return
        seq.aborted = True
        if seq in self.running:
            self.running.remove(seq)
            self._release(seq)
        else:
            try:
                self.waiting.remove(seq)
            except ValueError:
                pass
        seq.notify()

    def busy_seconds(self, now: float) -> float:
        """Seconds (loop time) the engine has spent in steps up to `now`, the step in flight's
        part included: the simulated GPU's busy time (`dcgm`)."""
        plan, deadline = self._plan, self._deadline
        if plan is None or deadline is None:
            return self._busy_done
        return self._busy_done + min(max(now - self._step_start, 0.0), plan.duration)

    def occupancy(self) -> Occupancy:
        used = 1.0 - self.free_blocks / self.config.num_gpu_blocks
        return Occupancy(len(self.running), len(self.waiting), used)

    # --- scheduling -----------------------------------------------------------------------

    def _blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.config.block_size)

    def _allocate(self, need: int) -> None:
        """Take `need` free blocks, empty ones first, then the least recently used cached ones."""
        cache = self.cache
        if cache is not None:
            short = need - (self.free_blocks - cache.num_evictable)
            if short > 0:
                cache.evict(short)
        self.free_blocks -= need

    def _cache_blocks(self, seq: Sequence, computed: int) -> None:
        """Offer the prompt blocks that `computed` tokens fill to the cache (vLLM caches them
        when they are scheduled, so a request admitted in the next step can hit them)."""
        cache = self.cache
        end = min(computed // self.config.block_size, len(seq.block_hashes))
        if cache is None or end <= seq.next_block:
            return
        for block_hash in seq.block_hashes[seq.next_block : end]:
            if cache.insert(block_hash):
                seq.held.append(block_hash)
        seq.next_block = end

    def _release(self, seq: Sequence) -> None:
        """Give back a sequence's blocks: private ones are free at once, cached ones once no
        other sequence holds them (and they stay cached until evicted)."""
        self.free_blocks += seq.num_blocks - len(seq.held)
        if seq.held:
            assert self.cache is not None  # only a cache hands out held blocks
            self.free_blocks += self.cache.release(seq.held)
            seq.held = []
        seq.num_blocks = 0
        seq.next_block = 0

    def _admit_hit(self, seq: Sequence) -> tuple[int, int]:
        """(blocks, blocks taken from free memory) of the waiting `seq`'s prefix-cache hit.
        Like vLLM, the hit stops short of the last token, which must be computed for its logits:
        a prompt that hits entirely recomputes its whole last block."""
        if self.cache is None or not seq.block_hashes:
            return 0, 0
        return self.cache.lookup(seq.block_hashes, (seq.num_tokens - 1) // self.config.block_size)

    def _preempt(self, victim: Sequence) -> None:
        self.running.remove(victim)
        self._release(victim)
        victim.num_computed = 0
        victim.num_preemptions += 1
        self.waiting.appendleft(victim)
        self.stats.preemptions += 1

    def schedule(self) -> "StepPlan":
        """Choose the next step's work (and take the KV blocks it needs)."""
        budget = self.config.max_num_batched_tokens
        work: list[tuple[Sequence, int]] = []
        drafts: dict[Sequence, int] = {}
        prefill = decodes = 0
        preempted = False
        i = 0
        while i < len(self.running) and budget > 0:
            seq = self.running[i]
            new = min(seq.num_tokens - seq.num_computed, budget)
            decoding = new == 1 and seq.num_generated > 0
            draft = self.drafts.draft_size(seq, budget) if decoding else 0
            new += draft
            # a rejected draft's slots stay allocated (as in vLLM): the next step may need none
            need = max(0, self._blocks_for(seq.num_computed + new) - seq.num_blocks)
            while need > self.free_blocks and self.running[-1] is not seq:
                self._preempt(self.running[-1])
                preempted = True
            if need > self.free_blocks:  # nothing left to take from: preempt this one too
                self._preempt(seq)
                preempted = True
                continue
            self._allocate(need)
            seq.num_blocks += need
            self._cache_blocks(seq, seq.num_computed + new)
            work.append((seq, new))
            budget -= new
            if decoding:
                decodes += 1
                if draft:
                    drafts[seq] = draft
            else:
                prefill += new
            i += 1
        kv_full = False
        if not preempted:  # like vLLM: no admissions in a step that had to preempt
            config = self.config
            while self.waiting and budget > 0 and len(self.running) < config.max_num_seqs:
                seq = self.waiting[0]
                hit, taken = self._admit_hit(seq)
                if self._kv_short(seq, hit, taken):
                    kv_full = True
                    break  # admit only when the whole (re)computation fits
                self.waiting.popleft()
                cached = hit * config.block_size
                cache = self.cache
                if hit and cache is not None:
                    held = seq.block_hashes[:hit]
                    cache.acquire(held)
                    self.free_blocks -= taken
                    seq.held = held
                    seq.next_block = hit
                if not seq.preempted:  # vLLM counts a request's lookup once, when first admitted
                    seq.cached_tokens = cached
                    if cache is not None:
                        self.stats.prefix_cache_queries += seq.num_tokens
                        self.stats.prefix_cache_hits += cached
                    # KV read from a prefill instance (--disagg): computed, but for the last
                    # token, which yields the first token here (a preempted one recomputes)
                    cached = max(cached, seq.remote_tokens)
                seq.num_computed = cached
                new = min(seq.num_tokens - cached, budget)
                need = self._blocks_for(cached + new) - hit
                self._allocate(need)
                seq.num_blocks = hit + need
                self._cache_blocks(seq, cached + new)
                self.running.append(seq)
                work.append((seq, new))
                budget -= new
                prefill += new
        config = self.config
        draft_tokens = sum(drafts.values())
        duration = (
            config.cost.seconds(prefill, decodes) + config.speculation.seconds(draft_tokens)
        ) * config.time_scale
        factor = 1.0
        if config.jitter:
            factor = max(0.0, self._rng.gauss(1.0, config.jitter))
            duration *= factor
        if work:
            fixed = config.cost.base * config.time_scale * factor
            blocked = self._blocked(preempted, kv_full, budget)
            at_cap = len(self.running) >= config.max_num_seqs
            self.stats.steps.count(duration, fixed, blocked, at_cap, budget <= 0)
        return StepPlan(work, prefill, decodes, duration, drafts)

    def _kv_short(self, seq: Sequence, hit: int, taken: int) -> bool:
        """Whether the waiting `seq`'s whole (re)computation does not fit the free KV blocks
        (its prefix-cache hit of `hit` blocks, `taken` of them from free memory)."""
        fresh = self._blocks_for(seq.num_tokens) - hit
        return fresh + taken > self.free_blocks - self._watermark

    def _blocked(self, preempted: bool, kv_full: bool, budget: int) -> tuple[str, ...]:
        """What kept the waiting queue's head out of the step just planned (`BLOCKED_BY`), or ()
        when nothing waits. Every limit that would have stopped it counts: the batch full, the
        budget spent, its blocks not free (a step that preempted admits nothing: that alone)."""
        if not self.waiting:
            return ()
        if preempted:
            return (PREEMPTION,)
        if kv_full:  # the admission loop stopped there: the batch and the budget had room
            return (KV_CACHE,)
        reasons: tuple[str, ...] = ()
        if len(self.running) >= self.config.max_num_seqs:
            reasons += (MAX_NUM_SEQS,)
        if budget <= 0:
            reasons += (MAX_NUM_BATCHED_TOKENS,)
        head = self.waiting[0]
        if self._kv_short(head, *self._admit_hit(head)):
            reasons += (KV_CACHE,)
        return reasons

    def complete(self, plan: "StepPlan", now: float) -> None:
        """Apply a finished step at loop time `now`: sequences advance, sample a token where their
        known tokens are all computed, finish at their output length and wake their handlers."""
        stats = self.stats
        started = now - plan.duration
        itl_gap, itl_n = 0.0, 0
        generated = step_prompt = 0  # this step's tokens, for vllm:iteration_tokens_total
        finished_any = False
        for seq, new in plan.work:
            if seq.aborted:
                continue
            if seq.scheduled_at is None:
                seq.scheduled_at = started
            produced = 1
            draft = plan.drafts.get(seq, 0)
            if draft:  # keep the accepted drafts' KV; the rejected ones' is discarded
                accepted = self.drafts.accepted(draft)
                stats.speculation.observe(draft, accepted)
                new, produced = 1 + accepted, 1 + accepted
            seq.num_computed += new
            if seq.num_computed < seq.num_tokens:
                continue  # a prefill chunk: no token yet
            seq.num_generated += produced
            generated += produced
            if seq.first_token_at is None:
                seq.first_token_at = now
                # like vLLM, the whole prompt counts in the step that yields the first token
                step_prompt += seq.prompt_tokens
                stats.ttft.observe(now - seq.arrival)
            elif seq.last_token_at is not None:
                gap = now - seq.last_token_at
                if itl_n and gap != itl_gap:
                    stats.itl.observe(gap)
                else:  # the decodes of one step usually share one gap: observed in bulk below
                    itl_gap = gap
                    itl_n += 1
            seq.last_token_at = now
            if seq.num_generated >= seq.output_tokens:
                seq.finished = True
                finished_any = True
                self._release(seq)
                assert seq.scheduled_at is not None and seq.first_token_at is not None  # set above
                stats.finish_request(
                    seq.arrival if seq.queued_at is None else seq.queued_at,
                    seq.scheduled_at,
                    seq.first_token_at,
                    now,
                    seq.prompt_tokens,
                    seq.cached_tokens,
                    seq.num_generated,
                    seq.num_preemptions,
                )
            seq.notify()
        if itl_n:
            stats.itl.observe(itl_gap, itl_n)
        if generated:  # vLLM observes the steps that output a token, not prefill chunks
            stats.generation_tokens += generated
            stats.prompt_tokens += step_prompt
            stats.iteration_tokens.observe(generated + step_prompt)
        if finished_any:
            self.running = [s for s in self.running if not s.finished]

    # --- the step chain on the event loop -------------------------------------------------

    def _start_step(self, start: float) -> None:
        """Plan a step that starts at `start` and arm its deadline; go idle if there is no work."""
        plan = self.schedule()
        if not plan.work:
            self._deadline = None
            self._plan = None
            return
        loop = self._loop
        assert loop is not None  # add() sets it before the first step
        self._plan = plan
        self._step_start = start
        self._deadline = start + plan.duration
        loop.call_at(self._deadline, self._finish_step)

    def _finish_step(self) -> None:
        """The step's deadline: apply it, and start the next one at this deadline (or now, if the
        loop fell too far behind to catch up)."""
        plan, deadline, loop = self._plan, self._deadline, self._loop
        assert plan is not None and deadline is not None and loop is not None  # a step is in flight
        now = loop.time()
        self._busy_done += plan.duration
        self.complete(plan, now)
        self._start_step(deadline if now - deadline < MAX_LAG else now)


@dataclass
class StepPlan:
    """One step: [(sequence, tokens computed for it)], its prefill tokens, decoding sequences
    and modelled duration (seconds, time scale applied); `drafts`: the draft tokens each
    speculating sequence brought (counted in its tokens computed)."""

    work: list[tuple[Sequence, int]]
    prefill_tokens: int
    decode_seqs: int
    duration: float
    drafts: dict[Sequence, int] = field(default_factory=dict)
