"""What the simulator generates: how many tokens (max_tokens, min_tokens, ignore_eos and a
simulated end-of-sequence) and which text, pre-encoded for the streaming hot path."""

from __future__ import annotations

import math
import random
import zlib
from dataclasses import dataclass, replace
from typing import Any

import orjson

# Short English words: one token each (with their leading space) for the sim tokenizer and
# for most BPE vocabularies, so generated text re-tokenizes to about its token count.
OUTPUT_WORDS = """the of and to in is was for that on as with by he at from his it an were are which this be
has or had one their its new who they two her she been other when time all there into more may over
only most would some where then made also but him very see even old way work life home day man good
both just while own show run side set how long name few area land case body book car water place
word play point far low top sun sea sky red blue green king road hand head eye face door room tree""".split()

CYCLE = 4096  # length of the pseudo-random token cycle a request's text is read from


class OutputVocabulary:
    """The token texts the simulator emits, each also as a JSON string literal (bytes)."""

    def __init__(self, tokenizer, seed: int = 0) -> None:
        texts = []
        for word in OUTPUT_WORDS:
            piece = " " + word
            ids = tokenizer.encode(piece, add_special_tokens=False)
            if len(ids) == 1 and tokenizer.decode(ids) == piece:
                texts.append(piece)
        if len(texts) < 8:
            texts = self._any_tokens(tokenizer)
        self.texts: list[str] = texts
        rng = random.Random(seed)
        self.cycle: list[int] = [rng.randrange(len(texts)) for _ in range(CYCLE)]
        self.json: list[bytes] = [orjson.dumps(t) for t in texts]

    @staticmethod
    def _any_tokens(tokenizer) -> list[str]:
        """A tokenizer none of whose words is a single token: take plain-text ids as they come."""
        texts = []
        for token_id in range(min(getattr(tokenizer, "vocab_size", 1000), 50000)):
            try:
                text = tokenizer.decode([token_id])
            except Exception:  # ids with no text of their own
                continue
            if text.strip() and text.replace(" ", "").isalnum() and "<" not in text:
                texts.append(text)
            if len(texts) >= 64:
                break
        if not texts:
            raise ValueError("the tokenizer has no plain-text tokens to generate")
        return texts

    def text(self, offset: int, start: int, end: int) -> str:
        """The text of tokens [start, end) of a request whose text starts at `offset`."""
        texts, cycle = self.texts, self.cycle
        return "".join(texts[cycle[(offset + i) % CYCLE]] for i in range(start, end))

    def json_of_one(self, offset: int, index: int) -> bytes:
        return self.json[self.cycle[(offset + index) % CYCLE]]


@dataclass(frozen=True)
class OutputPlan:
    """How a request's output ends, decided when it arrives."""

    length: int  # tokens generated, the simulated EOS included
    finish_reason: (
        str  # "stop": the last token is the EOS (it has no text); "length": max_tokens reached
    )
    offset: int  # where in the vocabulary cycle its text starts
    reasoning_tokens: int = 0  # its first tokens that are reasoning (a reasoning model's chat)
    tool_call: Any = None  # a `tool_replies.ToolCallText`: its tokens are that call's

    @property
    def text_tokens(self) -> int:
        return self.length - 1 if self.finish_reason == "stop" else self.length


class OutputPlanner:
    """Chooses output lengths and texts: seeded, so runs are reproducible.

    A request that neither sets `ignore_eos` nor forbids EOS with `min_tokens` may stop early:
    each token after the first `min_tokens` is the EOS with probability `eos_probability`
    (a geometric length). The randomness comes from the request's `seed` if given, from its
    prompt if `temperature` is 0 (greedy: same prompt, same output), else from the server's
    seeded generator.
    """

    def __init__(self, eos_probability: float, seed: int = 0) -> None:
        self.eos_probability = eos_probability
        self._rng = random.Random(seed)

    def plan(
        self,
        max_tokens: int,
        min_tokens: int,
        ignore_eos: bool,
        seed: int | None = None,
        temperature: float | None = None,
        prompt_key: str = "",
        reasoning_tokens: int = 0,
    ) -> OutputPlan:
        """The plan; its first `reasoning_tokens` tokens (all of them, if it is shorter) are
        reasoning."""
        plan = self._plan(max_tokens, min_tokens, ignore_eos, seed, temperature, prompt_key)
        if reasoning_tokens:
            return replace(plan, reasoning_tokens=min(reasoning_tokens, plan.length))
        return plan

    def _plan(
        self,
        max_tokens: int,
        min_tokens: int,
        ignore_eos: bool,
        seed: int | None,
        temperature: float | None,
        prompt_key: str,
    ) -> OutputPlan:
        if seed is not None:
            rng = random.Random(seed)
        elif temperature == 0:
            rng = random.Random(zlib.crc32(prompt_key.encode("utf-8", "replace")))
        else:
            rng = self._rng
        offset = rng.randrange(CYCLE)
        p = self.eos_probability
        if ignore_eos or p <= 0 or min_tokens >= max_tokens:
            return OutputPlan(max_tokens, "length", offset)
        # index of the EOS token: min_tokens + a geometric number of ordinary tokens
        u = 1.0 - rng.random()  # (0, 1]
        eos_index = min_tokens + (int(math.log(u) / math.log1p(-p)) if p < 1 else 0)
        if eos_index < max_tokens:
            return OutputPlan(eos_index + 1, "stop", offset)
        return OutputPlan(max_tokens, "length", offset)
