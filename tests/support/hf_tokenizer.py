"""A small, real Hugging Face tokenizer directory built in the test itself (nothing downloaded):
a byte-level BPE trained on an in-memory corpus, Llama-3-style special tokens and chat template.
Used to test exact prompt lengths against a server that has no /tokenize."""

from __future__ import annotations

import importlib.util
import json
import os
import random

from support import ROOT


def _load_spec():
    """The special tokens and chat template of the tiny Llama that bench/real_vllm.py serves:
    one Llama-3-style tokenizer spec for the tests and the real server (a script with no imports
    beyond the standard library at load time)."""
    path = os.path.join(ROOT, "bench", "realvllm", "build_model.py")
    spec = importlib.util.spec_from_file_location("realvllm_build_model", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_SPEC = _load_spec()
BOS, EOS, EOT = _SPEC.BOS, _SPEC.EOS, _SPEC.EOT
HEADER_START, HEADER_END = _SPEC.HEADER_START, _SPEC.HEADER_END
SPECIAL_TOKENS = _SPEC.SPECIAL_TOKENS
CHAT_TEMPLATE = _SPEC.CHAT_TEMPLATE

_EXTRA_TEXT = """Once upon a time there was a small model that counted tokens for a living.
It read every prompt twice, because the first time it was usually thinking about lunch.
Numbers like 12, 345 and 2048 appeared, with punctuation: commas, periods; and questions?"""


def _corpus(seed: int = 0) -> list[str]:
    from vllm_load.client.prompts import WORDS

    rng = random.Random(seed)
    lines = [" ".join(rng.choices(WORDS, k=40)) for _ in range(400)]
    lines += ["Continue " + " ".join(rng.choices(WORDS, k=20)) for _ in range(50)]
    lines += _EXTRA_TEXT.splitlines() * 20
    return lines


def train_tokenizer():
    """The byte-level BPE (a `tokenizers.Tokenizer`) with BOS put in front by its post-processor."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=3000,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_corpus(), trainer=trainer)
    bos_id = tokenizer.token_to_id(BOS)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, bos_id)]
    )
    return tokenizer


def build_hf_tokenizer_dir(path) -> str:
    """Train the tokenizer and write it into `path` as transformers 5's save_pretrained does:
    tokenizer.json, tokenizer_config.json with the special tokens as plain strings, and the chat
    template in chat_template.jinja (test_tokenizer_layouts checks this against transformers)."""
    path = str(path)
    os.makedirs(path, exist_ok=True)
    train_tokenizer().save(os.path.join(path, "tokenizer.json"))
    config = {
        "backend": "tokenizers",
        "bos_token": BOS,
        "eos_token": EOT,
        "model_max_length": 131072,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    with open(os.path.join(path, "tokenizer_config.json"), "w", encoding="utf-8") as fh:
        json.dump(config, fh, indent=2)
    with open(os.path.join(path, "chat_template.jinja"), "w", encoding="utf-8") as fh:
        fh.write(CHAT_TEMPLATE)
    return path


def save_with_transformers(path, **save_kwargs) -> str:
    """The same tokenizer written by transformers' own `PreTrainedTokenizerFast.save_pretrained`
    (needs `transformers`; no torch, nothing downloaded)."""
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=train_tokenizer(), bos_token=BOS, eos_token=EOT, model_max_length=131072
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(str(path), **save_kwargs)
    return str(path)
