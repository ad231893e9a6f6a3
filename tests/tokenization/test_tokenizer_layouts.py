"""`--tokenizer DIR` takes a tokenizer directory as transformers writes it: special tokens as
strings or AddedToken dicts, the chat template in chat_template.jinja (named ones in
additional_chat_templates/), in tokenizer_config.json or in a legacy chat_template.json; and the
test tokenizer (tests/support/hf_tokenizer.py) is written in transformers 5's own layout.

Directories are written by transformers' `PreTrainedTokenizerFast.save_pretrained` itself (the
test extra installs transformers; it needs no torch for a tokenizer), then the older layouts are
made from one by moving its pieces the way older versions stored them."""

from __future__ import annotations

import json
import os

import pytest
from support.hf_tokenizer import (
    BOS,
    CHAT_TEMPLATE,
    EOT,
    build_hf_tokenizer_dir,
    save_with_transformers,
)

from vllm_load.tokenization.hf import HFTokenizer

transformers = pytest.importorskip("transformers")

MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Continue the story"},
]
OTHER_TEMPLATE = "{% for message in messages %}{{ message['content'] }}{% endfor %}"


def read_json(path) -> dict:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def write_json(path, data) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=2)


def reference(path: str):
    """transformers' own reading of the directory (local files only)."""
    return transformers.AutoTokenizer.from_pretrained(path, local_files_only=True)


def assert_reads_like_transformers(path: str) -> HFTokenizer:
    """Our reading of `path` renders and encodes the chat exactly as transformers does."""
    ours, theirs = HFTokenizer(path), reference(path)
    text = theirs.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    assert ours.render_chat(MESSAGES) == text
    assert ours.encode_chat(MESSAGES) == theirs(text, add_special_tokens=False)["input_ids"]
    assert (ours.bos_token, ours.eos_token) == (theirs.bos_token, theirs.eos_token) == (BOS, EOT)
    assert ours.eos_token_id == theirs.eos_token_id
    return ours


def test_the_test_tokenizer_is_written_as_transformers_writes_it(tmp_path):
    ours = build_hf_tokenizer_dir(tmp_path / "ours")
    theirs = save_with_transformers(tmp_path / "theirs")
    assert sorted(os.listdir(ours)) == sorted(os.listdir(theirs))
    config, expected = (
        read_json(os.path.join(ours, "tokenizer_config.json")),
        read_json(os.path.join(theirs, "tokenizer_config.json")),
    )
    assert {k: v for k, v in config.items() if k != "tokenizer_class"} == {
        k: v for k, v in expected.items() if k != "tokenizer_class"
    }
    assert all(
        isinstance(config[k], str) for k in ("bos_token", "eos_token")
    )  # transformers 5 refuses dicts here
    assert read_json(os.path.join(ours, "tokenizer.json")) == read_json(
        os.path.join(theirs, "tokenizer.json")
    )
    assert_reads_like_transformers(ours)  # transformers itself loads it


def test_a_directory_saved_by_transformers(tmp_path):
    path = save_with_transformers(tmp_path / "tok")
    assert os.path.isfile(
        os.path.join(path, "chat_template.jinja")
    )  # transformers 5: the template on its own
    assert_reads_like_transformers(path)


def test_the_chat_template_inside_tokenizer_config(tmp_path):
    path = save_with_transformers(
        tmp_path / "tok", save_jinja_files=False
    )  # the layout before 4.50
    assert read_json(os.path.join(path, "tokenizer_config.json"))["chat_template"] == CHAT_TEMPLATE
    assert not os.path.exists(os.path.join(path, "chat_template.jinja"))
    assert_reads_like_transformers(path)


def test_special_tokens_as_added_token_dicts(tmp_path):
    path = save_with_transformers(tmp_path / "tok", save_jinja_files=False)
    config_file = os.path.join(path, "tokenizer_config.json")
    config = read_json(config_file)
    for key in ("bos_token", "eos_token"):  # as transformers 4.x wrote them
        config[key] = {
            "__type": "AddedToken",
            "content": config[key],
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": True,
        }
    write_json(config_file, config)
    tok = HFTokenizer(path)
    assert (tok.bos_token, tok.eos_token) == (BOS, EOT)
    assert tok.render_chat(MESSAGES) == reference(
        save_with_transformers(tmp_path / "ref")
    ).apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)


def test_special_tokens_only_in_special_tokens_map(tmp_path):
    path = save_with_transformers(tmp_path / "tok")
    config_file = os.path.join(path, "tokenizer_config.json")
    config = read_json(config_file)
    write_json(
        os.path.join(path, "special_tokens_map.json"),
        {"bos_token": config.pop("bos_token"), "eos_token": {"content": config.pop("eos_token")}},
    )
    write_json(config_file, config)
    assert_reads_like_transformers(path)


def test_a_legacy_chat_template_json(tmp_path):
    path = save_with_transformers(tmp_path / "tok")
    os.remove(os.path.join(path, "chat_template.jinja"))
    write_json(os.path.join(path, "chat_template.json"), {"chat_template": CHAT_TEMPLATE})
    tok = HFTokenizer(path)
    assert tok.chat_template == CHAT_TEMPLATE
    assert tok.render_chat(MESSAGES).startswith(
        BOS + "<|start_header_id|>system<|end_header_id|>\n\nBe brief."
    )


def test_named_templates_take_the_default_and_the_jinja_file_wins(tmp_path):
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_file=os.path.join(build_hf_tokenizer_dir(tmp_path / "src"), "tokenizer.json"),
        bos_token=BOS,
        eos_token=EOT,
    )
    tokenizer.chat_template = {"default": CHAT_TEMPLATE, "plain": OTHER_TEMPLATE}
    path = str(tmp_path / "tok")
    tokenizer.save_pretrained(path)
    assert os.listdir(os.path.join(path, "additional_chat_templates")) == ["plain.jinja"]
    assert_reads_like_transformers(path)
    # a stale template left in tokenizer_config.json loses to chat_template.jinja, as in transformers
    config_file = os.path.join(path, "tokenizer_config.json")
    write_json(config_file, {**read_json(config_file), "chat_template": OTHER_TEMPLATE})
    assert_reads_like_transformers(path)


def test_a_directory_with_no_chat_template_says_so(tmp_path):
    path = save_with_transformers(tmp_path / "tok")
    os.remove(os.path.join(path, "chat_template.jinja"))
    with pytest.raises(ValueError, match="no chat template"):
        HFTokenizer(path).render_chat(MESSAGES)
