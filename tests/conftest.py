"""Fixtures shared by the tests. Plain helper functions are in the `support` package."""

from __future__ import annotations

import pytest


@pytest.fixture
def hf_tokenizer_dir(tmp_path) -> str:
    """A small, real Hugging Face tokenizer directory (Llama-3-style specials and chat template),
    built in tmp_path/tok without downloading anything."""
    from support.hf_tokenizer import build_hf_tokenizer_dir

    return build_hf_tokenizer_dir(tmp_path / "tok")
