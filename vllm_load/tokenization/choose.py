"""Choosing a tokenizer from what the user gave (--tokenizer)."""

from __future__ import annotations

import os

from .base import Tokenizer
from .hf import HFTokenizer
from .sim import SimTokenizer


def load_tokenizer(spec: str | None) -> Tokenizer:
    """None or "sim" -> SimTokenizer; an existing directory -> HFTokenizer."""
    if spec is None or spec == "sim":
        return SimTokenizer()
    if os.path.isdir(spec):
        return HFTokenizer(spec)
    raise ValueError(
        f"tokenizer {spec!r} is neither 'sim' nor an existing directory: pass a local directory "
        "holding tokenizer.json (+ tokenizer_config.json), or 'sim'"
    )
