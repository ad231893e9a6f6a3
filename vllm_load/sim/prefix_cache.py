"""Automatic prefix caching as vLLM V1 does it, reduced to what changes timing and counters.

A prompt's token ids are cut into full blocks of `block_size` tokens (a partial last block is
never cached). Each block is named by a hash chained over its parent block's hash and its own
token ids, so one hash stands for the whole prefix up to the end of its block, and two prompts
share block i only if they agree on every token before its end. A new request's leading run of
blocks found in the cache is a hit: those tokens are not prefilled again.

The cache does not own memory: it remembers which of the engine's KV blocks hold a known full
block and how many running sequences hold each. A block no sequence holds stays cached but is
*evictable*: it counts as free KV memory (as in vLLM, where it sits in the free-block queue)
and is forgotten, least recently used first, only when the engine needs its memory and has no
empty block left. vLLM frees a request's blocks tail first, so that a prompt's end, the part
least likely to be shared, is evicted before its beginning; `release` does the same.

What is simplified: only prompt blocks are hashed (vLLM also hashes generated tokens as their
blocks fill, so a next turn may hit a little further, into the previous reply), and a block
that a sequence computes while an identical one is already cached stays private to it (vLLM
caches both copies under one hash; either way the content is found once).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

# The parent of a prompt's first block: any fixed value (vLLM seeds its own from
# PYTHONHASHSEED or at random). Python hashes tuples of ints the same in every process.
ROOT_HASH = 0x5EED_CAC4E


def block_hashes(token_ids: Sequence[int], block_size: int) -> list[int]:
    """The chained hash of every full block of `token_ids`, in order."""
    ids = tuple(token_ids)  # slices of a tuple are tuples: one copy, not two per block
    hashes = []
    parent = ROOT_HASH
    for start in range(0, len(ids) - block_size + 1, block_size):
        parent = hash((parent, ids[start : start + block_size]))
        hashes.append(parent)
    return hashes


class PrefixCache:
    """The cached full blocks, by chained hash: how many running sequences hold each, and the
    unheld (evictable) ones in least-recently-used order."""

    __slots__ = ("_holders", "_evictable")

    def __init__(self) -> None:
        self._holders: dict[int, int] = {}
        self._evictable: OrderedDict[int, None] = OrderedDict()  # first = evicted first

    def __len__(self) -> int:
        return len(self._holders)

    def __contains__(self, block_hash: object) -> bool:
        return block_hash in self._holders

    @property
    def num_evictable(self) -> int:
        """Cached blocks no sequence holds: free memory that still has content."""
        return len(self._evictable)

    def holders(self, block_hash: int) -> int:
        """Running sequences holding the block (0: evictable); KeyError if it is not cached."""
        return self._holders[block_hash]

    def lookup(self, hashes: Sequence[int], max_blocks: int) -> tuple[int, int]:
        """(blocks, evictable): the length of the leading run of `hashes` (at most `max_blocks`)
        that is cached, and how many of those blocks no sequence holds (taking them takes free
        memory)."""
        holders = self._holders
        hit = evictable = 0
        for block_hash in hashes[:max_blocks]:
            n = holders.get(block_hash)
            if n is None:
                break
            hit += 1
            evictable += n == 0
        return hit, evictable

    def acquire(self, hashes: Sequence[int]) -> None:
        """A sequence takes the cached blocks `hashes` (a hit): they are no longer evictable."""
        holders, evictable = self._holders, self._evictable
        for block_hash in hashes:
            n = holders[block_hash]
            if n == 0:
                del evictable[block_hash]
            holders[block_hash] = n + 1

    def insert(self, block_hash: int) -> bool:
        """A sequence has just filled a block with this content: cache it, held by that
        sequence. False when the content is cached already (the sequence's copy stays private)."""
        if block_hash in self._holders:
            return False
        self._holders[block_hash] = 1
        return True

    def release(self, hashes: Sequence[int]) -> int:
        """A sequence lets go of its cached blocks `hashes` (in block order); how many nobody
        holds any more (they return to free memory, still cached, tail first in eviction order)."""
        holders, evictable = self._holders, self._evictable
        freed = 0
        for block_hash in reversed(hashes):
            n = holders[block_hash] - 1
            holders[block_hash] = n
            if n == 0:
                evictable[block_hash] = None
                freed += 1
        return freed

    def evict(self, n: int) -> int:
        """Forget up to `n` evictable blocks, least recently used first (their memory is being
        reused); how many were forgotten."""
        holders, evictable = self._holders, self._evictable
        n = min(n, len(evictable))
        for _ in range(n):
            block_hash, _ = evictable.popitem(last=False)
            del holders[block_hash]
        return n
