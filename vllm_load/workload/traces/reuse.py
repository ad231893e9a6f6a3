"""The prefix reuse a trace implies: how many of each request's leading blocks an earlier request
already sent. Mooncake's hash ids are chained (an id stands for its block and all before it), but
a block counts as reused only where the same ids led up to it, so a file whose ids are not chained
is not over-counted. What a server's prefix cache can hit, given room enough."""

from __future__ import annotations

from typing import Sequence

from .replay_plan import Trace, TraceRequest


def reused_blocks(requests: Sequence[TraceRequest]) -> list[int]:
    """For each request in order, how many of its leading hash_ids an earlier request had at the
    same position after the same ids."""
    # a trie of the prefixes sent so far: (node of the prefix before, block id) -> node
    seen: dict[tuple[int, int], int] = {}
    reused = []
    for request in requests:
        node, count = 0, 0
        for block in request.hash_ids:
            child = seen.get((node, block))
            if child is None:
                break
            node, count = child, count + 1
        for block in request.hash_ids[count:]:
            child = seen[(node, block)] = len(seen) + 1
            node = child
        reused.append(count)
    return reused


def reuse_summary(trace: Trace) -> dict[str, float]:
    """The trace's requests, their blocks, how many of those blocks (and of the prompts' tokens)
    an earlier request had sent (`reused_blocks`), and the reused share of the blocks."""
    reused = reused_blocks(trace.requests)
    blocks = sum(len(r.hash_ids) for r in trace.requests)
    tokens = sum(
        min(n * trace.block_tokens, r.input_tokens) for n, r in zip(reused, trace.requests)
    )
    return {
        "requests": len(trace.requests),
        "blocks": blocks,
        "reused_blocks": sum(reused),
        "reused_share": sum(reused) / blocks if blocks else 0.0,
        "input_tokens": sum(r.input_tokens for r in trace.requests),
        "reused_tokens": tokens,
    }
