"""Prompts whose blocks are named by a trace's hash ids, and the prefix-cache hits a vLLM server
will count for them.

A Mooncake trace names each 512-token block of a request's input by a hash id: requests that
share an id share that block (and, the ids being chained, everything before it). `BlockPrompts`
builds exact-length prompts from the calibrated atoms (`prompts.py`) so that they do:

    prompt = head (h tokens) + atoms + tail (t tokens),  h + t = PromptPlan.overhead

where the head is what comes before the first atom (BOS, the chat template's role header,
LEAD: `PromptPlan.head_tokens`) and the tail what comes after the last (the template's end and
generation prompt). Prompt block j is the prompt's tokens [j*B, (j+1)*B), B = `block_tokens`,
template included, as the trace's blocks are the input's: block 0 is the head and the first
B - h atoms, every later block B atoms, so block j ends at token (j+1)*B; the last block holds
what is left, the tail at its end (a tail that crosses a boundary spills into a block with no
atoms, which its id then names too). The atoms of block j are the first ones drawn from a
generator seeded by (salt, hash_ids[j]) only, so two prompts with the same leading ids have the
same leading text. Ids beyond the blocks a prompt has are ignored; blocks beyond its ids are
atoms of its own (drawn from the operating system's entropy), which nothing shares.

The salt is per run, so one run never finds blocks an earlier run left in the server's cache;
only the head is common to every prompt of every run (vLLM's own prompts share it too).

`predicted_cached_tokens` says what vLLM V1 then counts in `vllm:prefix_cache_hits`: a request's
hit is the longest run of full server blocks (`cache_config_info`'s block_size) that an earlier
prompt also had in full, and at most (prompt tokens - 1) rounded down to the block size, since
the last token is always computed (vllm/v1/core/kv_cache_manager.py, `get_computed_blocks`).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from functools import lru_cache

from .prompts import LEAD, PromptPlan, atom_text

#: the block a Mooncake trace's hash ids name, in tokens
TRACE_BLOCK_TOKENS = 512


class BlockPrompts:
    """Prompts whose `block_tokens`-token blocks are named by hash ids."""

    def __init__(
        self,
        plan: PromptPlan,
        salt: int,
        block_tokens: int = TRACE_BLOCK_TOKENS,
        *,
        own_seed: int | None = None,
    ) -> None:
        """`own_seed` seeds the atoms past a prompt's hash ids (None: the system's entropy, so
        that no two processes draw the same)."""
        if block_tokens < 1:
            raise ValueError(f"block_tokens must be at least 1, not {block_tokens}")
        self.plan = plan
        self.salt = salt
        self.block_tokens = block_tokens
        # an unknown head (approximate prompts): the whole overhead is taken as the head, so the
        # layout is the one above when there is no template (the approximate plan's LEAD alone)
        self.layout_head = plan.overhead if plan.head_tokens is None else plan.head_tokens
        self._own = random.Random(own_seed)
        self._stream = lru_cache(maxsize=4096)(self._block_stream)

    @property
    def min_tokens(self) -> int:
        """The shortest prompt: the template and LEAD, and one atom (every content ends with an
        atom, as in the prompts calibration checked)."""
        return self.plan.overhead + 1

    def content(self, input_tokens: int, hash_ids: Sequence[int]) -> str:
        """The message (chat) or prompt (completions) the server counts as exactly
        `input_tokens` prompt tokens, its blocks named by `hash_ids`."""
        if input_tokens < self.min_tokens:
            raise ValueError(
                f"a trace prompt needs at least {self.min_tokens} tokens on this target (its "
                f"template and lead take {self.plan.overhead}), not {input_tokens}"
            )
        words: list[str] = []
        end = input_tokens - self.plan.overhead + self.layout_head  # the last atom's end
        for j, start, stop in atom_blocks(self.layout_head, end, self.block_tokens):
            if j >= len(hash_ids):
                words += self._own.choices(self.plan.atoms, k=end - start)
                break
            words += self._stream(hash_ids[j])[: stop - start]
        return LEAD + atom_text(words)

    def predicted_cached_tokens(
        self, prompts: Sequence[tuple[int, Sequence[int]]], server_block: int
    ) -> list[int] | None:
        """`predicted_cached_tokens` for these prompts on this target (None when calibration
        could not tell the template's head: approximate prompts)."""
        if self.plan.head_tokens is None:
            return None
        return predicted_cached_tokens(
            prompts,
            self.plan.head_tokens,
            self.plan.overhead - self.plan.head_tokens,
            server_block,
            self.block_tokens,
        )

    def _block_stream(self, hash_id: int) -> tuple[str, ...]:
        """The atoms a block named `hash_id` is cut from: the first `block_tokens` of the
        generator seeded by this run's salt and the id (a string seed: hashed the same in every
        process and version)."""
        rng = random.Random(f"{self.salt}/{hash_id}")
        return tuple(rng.choices(self.plan.atoms, k=self.block_tokens))


def atom_blocks(head: int, end: int, block_tokens: int) -> list[tuple[int, int, int]]:
    """(block, first token, end token) of every prompt block that holds atoms, for a prompt whose
    atoms are its tokens [head, end)."""
    return [
        (j, max(j * block_tokens, head), min((j + 1) * block_tokens, end))
        for j in range(head // block_tokens, -(-end // block_tokens))
    ]


def predicted_cached_tokens(
    prompts: Sequence[tuple[int, Sequence[int]]],
    head_tokens: int,
    tail_tokens: int,
    server_block: int,
    block_tokens: int = TRACE_BLOCK_TOKENS,
) -> list[int]:
    """The prompt tokens each of these `BlockPrompts` prompts ((input tokens, hash ids), in the
    order sent) finds in a vLLM V1 server's prefix cache, when each is sent after the earlier
    ones' prefills are done and nothing was evicted (a request sent while an earlier one is still
    prefilling finds only the blocks computed so far; a full cache evicts). Nothing is cached
    before the first, so the first finds nothing: on a server that has already served prompts of
    this template, a head of a server block or more is found by it too.

    A hit is the longest leading run of full `server_block`-token blocks that an earlier prompt
    had in full, at most (input tokens - 1) // server_block blocks. Each prompt's blocks are
    known by what fills them (`BlockPrompts`' layout: `head_tokens` common tokens, then the
    atoms of the blocks' hash ids, then `tail_tokens` common tokens), chained as vLLM chains its
    block hashes; a block that holds atoms of the prompt's own (past its hash ids) and every
    block after it are nobody else's. Not counted: two draws that happen to agree (an atom of
    one id equal to the atom of another at the same place), which can move a hit by a server
    block only when `server_block` does not divide `block_tokens`, and, on the completions
    endpoint (no tail), a shorter prompt's generated tokens that happen to equal a longer
    one's next atoms."""
    if server_block < 1 or block_tokens < 1 or head_tokens < 0 or tail_tokens < 0:
        raise ValueError(
            f"server_block {server_block} and block_tokens {block_tokens} must be at least 1, "
            f"head_tokens {head_tokens} and tail_tokens {tail_tokens} at least 0"
        )
    links: dict[tuple, int] = {}  # (parent block, what fills this one) -> block
    cached: set[int] = set()
    found = []
    for input_tokens, hash_ids in prompts:
        end = input_tokens - tail_tokens  # the last atom's end
        if end <= head_tokens:
            raise ValueError(
                f"a prompt of {input_tokens} tokens has no atom after a {head_tokens}-token "
                f"head and before a {tail_tokens}-token tail"
            )
        chain = _block_chain(
            links, input_tokens, hash_ids, head_tokens, end, server_block, block_tokens
        )
        most = min(len(chain), (input_tokens - 1) // server_block)
        hit = 0
        while hit < most and chain[hit] in cached:
            hit += 1
        found.append(hit * server_block)
        cached.update(chain)
    return found


def _block_chain(
    links: dict[tuple, int],
    input_tokens: int,
    hash_ids: Sequence[int],
    head: int,
    end: int,
    server_block: int,
    block_tokens: int,
) -> list[int]:
    """The prompt's full server blocks that another prompt can share, named through `links`: a
    block is its parent and the hash ids whose atoms fill it, and where the tail starts once it
    has; the chain stops at the first block with atoms of the prompt's own."""
    chain: list[int] = []
    parent = -1
    for b in range(input_tokens // server_block):
        start, stop = b * server_block, (b + 1) * server_block
        first, last = max(start, head), min(stop, end)
        ids: tuple = ()
        if first < last:  # atoms in this block: those of the blocks j..k of the prompt
            j, k = first // block_tokens, (last - 1) // block_tokens
            if k >= len(hash_ids):
                break
            ids = tuple(hash_ids[j : k + 1])
        link = (parent, ids, end if stop > end else None)
        parent = links.setdefault(link, len(links))
        chain.append(parent)
    return chain
