"""Choosing what to send from a `Dataset`: keeping the conversations whose lengths in tokens fit
(`filter_by_length`), and handing them out in a seeded, shuffled order (`DatasetSampler`)."""

from __future__ import annotations

import dataclasses
import random
from collections import Counter
from typing import Callable, Sequence

from ..user_values import SettingsError
from .datasets import Conversation, Dataset, Turn


def filter_by_length(
    dataset: Dataset,
    count_tokens: Callable[[str], int],
    *,
    min_prompt: int | None = None,
    max_prompt: int | None = None,
    min_output: int | None = None,
    max_output: int | None = None,
    reply_as_output: bool = True,
) -> Dataset:
    """The conversations of `dataset` whose lengths fit, the others counted by reason.

    The prompt is the first turn's system and user messages, counted apart and added (the chat
    template's own tokens are not counted). With `reply_as_output`, a turn that has a scripted
    reply but no `output_tokens` gets its reply's token count as its `output_tokens`: this is
    how vLLM's benchmarks take output lengths from ShareGPT. A conversation is dropped when any
    turn's known `output_tokens` is outside min_output..max_output (each request of it asks for
    that many). `count_tokens` (a tokenizer's `len(encode(text))`, or a stand-in) is called once
    per distinct string, so a system prompt shared by many entries is counted once.
    """
    counts: dict[str, int] = {}

    def count(text: str) -> int:
        n = counts.get(text)
        if n is None:
            n = counts[text] = count_tokens(text)
        return n

    kept: list[Conversation] = []
    dropped: Counter[str] = Counter(dataset.skip_reasons)
    for conversation in dataset.conversations:
        first = conversation.turns[0]
        prompt = count(first.user) + (count(conversation.system) if conversation.system else 0)
        if min_prompt is not None and prompt < min_prompt:
            dropped["prompt under min_prompt"] += 1
            continue
        if max_prompt is not None and prompt > max_prompt:
            dropped["prompt over max_prompt"] += 1
            continue
        if reply_as_output:
            conversation = _outputs_from_replies(conversation, count)
        outputs = [t.output_tokens for t in conversation.turns if t.output_tokens is not None]
        if min_output is not None and any(n < min_output for n in outputs):
            dropped["output under min_output"] += 1
            continue
        if max_output is not None and any(n > max_output for n in outputs):
            dropped["output over max_output"] += 1
            continue
        kept.append(conversation)
    if not kept:
        limits = ", ".join(
            f"{name}={value}"
            for name, value in (
                ("min_prompt", min_prompt),
                ("max_prompt", max_prompt),
                ("min_output", min_output),
                ("max_output", max_output),
            )
            if value is not None
        )
        raise SettingsError(
            f"dataset {dataset.path}: none of its {len(dataset.conversations)} conversations "
            f"fits {limits or 'the lengths'}"
        )
    return Dataset(dataset.path, tuple(kept), dict(dropped))


def _outputs_from_replies(conversation: Conversation, count: Callable[[str], int]) -> Conversation:
    turns: list[Turn] = []
    changed = False
    for turn in conversation.turns:
        if turn.reply is not None and turn.output_tokens is None:
            # a reply of 0 tokens (whitespace the tokenizer drops) still asks for one
            turn = dataclasses.replace(turn, output_tokens=max(1, count(turn.reply)))
            changed = True
        turns.append(turn)
    return dataclasses.replace(conversation, turns=tuple(turns)) if changed else conversation


class DatasetSampler:
    """Hands out conversations in a shuffled order without replacement: every conversation is
    used once before any is used again, and each pass is shuffled afresh. The order depends only
    on the conversations and `seed`.

    `next()` does not yield, so the users of one gevent process can share one sampler. Samplers
    in different processes should get different seeds (the process's index added, say): the same
    seed sends the same conversations in the same order from each, and a server's prefix cache
    would then see every prompt repeated.
    """

    def __init__(self, dataset: Dataset | Sequence[Conversation], seed: int | None = None):
        conversations = dataset.conversations if isinstance(dataset, Dataset) else tuple(dataset)
        if not conversations:
            raise ValueError("DatasetSampler needs at least one conversation")
        self._conversations = conversations
        self._rng = random.Random(seed)
        self._order: list[int] = []
        self._at = 0
        self.passes = 0
        """How many passes have been started (1 once the first conversation is handed out)."""

    def next(self) -> Conversation:
        """The next conversation; after the last of a pass, the first of a new shuffled pass."""
        if self._at == len(self._order):
            self._order = list(range(len(self._conversations)))
            self._rng.shuffle(self._order)
            self._at = 0
            self.passes += 1
        conversation = self._conversations[self._order[self._at]]
        self._at += 1
        return conversation

    def __len__(self) -> int:
        return len(self._conversations)
