"""The personas of a synthetic run (`synthetic.SyntheticRun.personas`): which user is which
Locust user class, how much slower or faster its requests are, and its conversations' turns.

A user keeps its persona for the whole level. A conversation persona's k-th request is turn
k % turns of its user's (k // turns)-th conversation; each turn's prompt is `turn_tokens` longer
than the last one's, which the server's prefix cache holds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class Persona:
    """A Locust user class of a synthetic run: its share of the users and how its requests differ."""

    name: str
    weight: float = 1.0  # its share of each level's users is weight / the weights' sum
    latency_scale: float = 1.0  # multiplies its requests' prefill and decode times (their ITL
    # columns keep the level's pattern: only TTFT, E2E and TPOT tell the personas apart)
    turns: int = 0  # > 0: its requests are conversations of this many turns
    turn_tokens: int = 256  # prompt tokens each turn adds (the last answer and a new question)


def _user_personas(personas: tuple[Persona, ...], users: int) -> np.ndarray:
    """Each user's persona (an index into `personas`): shares proportional to the weights and
    interleaved (a golden-ratio sequence over the weights' cumulative shares), with no randomness
    so a run without personas draws exactly what it always drew."""
    weights = np.array([p.weight for p in personas], dtype=np.float64)
    edges = np.cumsum(weights / weights.sum())
    where = (np.arange(users) * 0.6180339887498949 + 0.5) % 1.0
    return np.minimum(np.searchsorted(edges, where, side="right"), len(personas) - 1)


@dataclass(frozen=True)
class PersonaShape:
    """Per-request persona figures, indexed by (user, k-th request of that user)."""

    personas: tuple[Persona, ...]
    persona: np.ndarray  # per user
    scale: np.ndarray  # per user: latency scale
    turns: np.ndarray  # per user: turns per conversation (0: none)
    turn_tokens: np.ndarray  # per user

    @classmethod
    def of(cls, personas: tuple[Persona, ...], users: int) -> PersonaShape | None:
        if not personas:
            return None
        idx = _user_personas(personas, users)
        pick = lambda attr: np.array([getattr(p, attr) for p in personas])[idx]  # noqa: E731
        return cls(personas, idx, pick("latency_scale"), pick("turns"), pick("turn_tokens"))

    def turn(self, user: np.ndarray, k: np.ndarray) -> np.ndarray:
        turns = self.turns[user]
        return np.where(turns > 0, k % np.maximum(turns, 1), 0)

    def prompt(self, user: np.ndarray, k: np.ndarray, input_tokens: int) -> np.ndarray:
        return input_tokens + self.turn(user, k) * self.turn_tokens[user]


def label_requests(
    frame: pd.DataFrame,
    persona: PersonaShape,
    input_tokens: int,
    level: int,
    user: np.ndarray,
    k: np.ndarray,
) -> None:
    """The persona columns of a level's requests, and a conversation turn's longer prompt."""
    names = np.array([p.name for p in persona.personas], dtype=object)
    turns = persona.turns[user]
    talking = turns > 0
    turn = persona.turn(user, k)
    prompt = persona.prompt(user, k, input_tokens)
    ok = frame["ok"].to_numpy() == 1
    frame["user_class"] = names[persona.persona[user]]
    frame["task"] = np.where(talking, "conversation", "single")
    conv = k // np.maximum(turns, 1)
    frame["conversation"] = np.where(
        talking,
        [f"syn-l{level}-u{u}-c{c}" for u, c in zip(user, conv)],
        "",
    )
    frame["turn"] = turn
    frame["prompt_tokens"] = np.where(ok, prompt, np.nan)
    frame["requested_prompt_tokens"] = prompt
    # a later turn's prompt starts with the previous turn's: the prefix cache holds it
    previous = prompt - persona.turn_tokens[user]
    cached = pd.array(np.where(turn > 0, previous, 0), dtype="Int64")
    cached[~(ok & talking)] = pd.NA  # a failure, or a single request: the server said nothing
    frame["cached_tokens"] = cached
