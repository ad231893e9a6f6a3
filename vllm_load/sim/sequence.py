"""One request inside the simulated engine (`engine.Engine`): its sizes, progress and times."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field


@dataclass(eq=False)
class Sequence:
    """One request inside the engine: its sizes, progress and timestamps (loop time)."""

    prompt_tokens: int
    output_tokens: int  # tokens it will generate before it finishes (decided by the API layer)
    arrival: float
    num_computed: int = 0  # tokens whose KV is in the cache
    num_generated: int = 0
    num_blocks: int = 0  # KV blocks in its block table, cached ones included
    block_hashes: list[int] = field(default_factory=list, repr=False)  # of its full prompt blocks
    held: list[int] = field(default_factory=list, repr=False)  # cached blocks it holds, by hash
    next_block: int = 0  # its first prompt block not yet offered to the cache
    cached_tokens: int = 0  # prompt tokens found in the prefix cache when first admitted
    remote_tokens: int = 0  # prompt tokens whose KV came from a prefill instance (--disagg)
    num_preemptions: int = 0
    queued_at: float | None = None  # when it reached the engine (None: at its arrival)
    scheduled_at: float | None = None  # start of the first step that computed it
    first_token_at: float | None = None
    last_token_at: float | None = None
    finished: bool = False
    aborted: bool = False
    waiter: asyncio.Future | None = field(default=None, repr=False)

    @property
    def preempted(self) -> bool:
        return self.num_preemptions > 0

    @property
    def num_tokens(self) -> int:
        """Tokens known so far (prompt + generated): what a full recompute must process."""
        return self.prompt_tokens + self.num_generated

    def notify(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self, want: int) -> int:
        """Wait until at least `want` tokens (capped at the output length) exist; return how many do."""
        want = min(want, self.output_tokens)
        loop = asyncio.get_running_loop()
        while self.num_generated < want and not self.aborted:
            self.waiter = loop.create_future()
            await self.waiter
        return self.num_generated
