"""The simulated engine's draft model (`config.Speculation`): how many tokens it proposes for a
decoding sequence in a step, and how many of them the target accepts (docs/simulator.md)."""

from __future__ import annotations

import random

from .config import Speculation
from .sequence import Sequence


class DraftModel:
    """Draft sizes and acceptance draws; the draws have a random stream of their own, so turning
    speculation on leaves the engine's other draws (its steps' jitter) as they were."""

    def __init__(self, spec: Speculation, seed: int = 0) -> None:
        self.spec = spec
        self._rng = random.Random(f"speculation-{seed}")

    def draft_size(self, seq: Sequence, budget: int) -> int:
        """Draft tokens proposed for the decoding `seq` this step: K, but never more than the
        tokens it has left to generate after the target's own (so a step cannot overshoot its
        output length) nor than the step's token budget leaves (vLLM counts drafts in it)."""
        spec = self.spec
        if not spec.enabled:
            return 0
        return max(0, min(spec.tokens, seq.output_tokens - seq.num_generated - 1, budget - 1))

    def accepted(self, draft: int) -> int:
        """How many of a `draft`-token draft the target accepts: positions in order, each with
        its acceptance chance, up to the first rejection."""
        accepted = 0
        while accepted < draft and self._rng.random() < self.spec.at(accepted):
            accepted += 1
        return accepted
