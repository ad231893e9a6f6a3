"""`HFTokenizer`: a local Hugging Face tokenizer directory as transformers' save_pretrained writes
it, its special tokens and its chat template; nothing is downloaded."""

from __future__ import annotations

import json
import os
from typing import Any, Sequence

SPECIAL_TOKEN_KEYS = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
)
CHAT_TEMPLATE_FILE = "chat_template.jinja"  # transformers >= 4.50 writes the template here
CHAT_TEMPLATE_DIR = (
    "additional_chat_templates"  # ... and named templates other than the default here
)
LEGACY_CHAT_TEMPLATE_FILE = "chat_template.json"  # {"chat_template": ...}, as processors wrote it


def _token_text(value: Any) -> str | None:
    """A special token as tokenizer_config.json writes it: a string (transformers 5), or an
    AddedToken as a dict ({"content": ..., "__type": "AddedToken", ...}) as older versions did."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _pick_template(template: Any) -> str | None:
    """A chat template setting: a string, a list of named templates ({"name", "template"}) or a
    mapping of name to template; a named set gives its "default" (else its first)."""
    if isinstance(template, str):
        return template
    if isinstance(template, list):
        template = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
    if isinstance(template, dict):
        named = {k: v for k, v in template.items() if isinstance(v, str)}
        return named.get("default") or next(iter(named.values()), None)
    return None


def _read_json(path: str) -> dict:
    """A JSON object from a tokenizer directory's file; {} when the file is absent."""
    if not os.path.isfile(path):
        return {}
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: not readable JSON ({e})") from None
    return data if isinstance(data, dict) else {}


def _read_text(path: str) -> str | None:
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as fh:
        return fh.read()


def special_tokens(path: str, config: dict) -> dict[str, str]:
    """The special tokens' text by name, from tokenizer_config.json, else the legacy
    special_tokens_map.json (where transformers before 4.x kept them)."""
    legacy = _read_json(os.path.join(path, "special_tokens_map.json"))
    tokens = {}
    for key in SPECIAL_TOKEN_KEYS:
        text = _token_text(config.get(key)) or _token_text(legacy.get(key))
        if text is not None:
            tokens[key] = text
    return tokens


def chat_template(path: str, config: dict) -> str | None:
    """The default chat template of a tokenizer directory, found where transformers looks:
    chat_template.jinja (with named ones in additional_chat_templates/) first, then
    tokenizer_config.json's chat_template, then a legacy chat_template.json."""
    named = {}
    extra_dir = os.path.join(path, CHAT_TEMPLATE_DIR)
    if os.path.isdir(extra_dir):
        for name in sorted(os.listdir(extra_dir)):
            if name.endswith(".jinja"):
                named[name[: -len(".jinja")]] = _read_text(os.path.join(extra_dir, name))
    default = _read_text(os.path.join(path, CHAT_TEMPLATE_FILE))
    if default is not None:
        named = {"default": default, **named}
    if named:
        return _pick_template(named)
    template = _pick_template(config.get("chat_template"))
    if template is None:
        template = _pick_template(
            _read_json(os.path.join(path, LEGACY_CHAT_TEMPLATE_FILE)).get("chat_template")
        )
    return template


class HFTokenizer:
    """A local Hugging Face tokenizer directory, as transformers' save_pretrained writes it:
    `tokenizer.json` loaded with the `tokenizers` library, the special tokens of
    `tokenizer_config.json` (strings or AddedToken dicts), and the chat template (see
    `chat_template`) rendered in a sandboxed jinja2 environment the way transformers'
    apply_chat_template does."""

    def __init__(self, path: str) -> None:
        try:
            from tokenizers import Tokenizer as _RustTokenizer
        except ImportError:
            raise ValueError(
                "a tokenizer directory needs the `tokenizers` package: pip install 'vllm-load[hf]'"
            ) from None

        self.path = os.path.abspath(path)
        self.name = self.path
        tokenizer_file = os.path.join(self.path, "tokenizer.json")
        if not os.path.isfile(tokenizer_file):
            raise ValueError(
                f"{path} has no tokenizer.json (pass a Hugging Face tokenizer directory)"
            )
        try:
            self._tok = _RustTokenizer.from_file(tokenizer_file)
        except Exception as e:  # the Rust library raises a plain Exception, whatever the cause
            detail = (str(e).splitlines() or [type(e).__name__])[0]
            raise ValueError(
                f"{tokenizer_file} cannot be read as a tokenizer ({detail}): pass the model's "
                "tokenizer directory as transformers' save_pretrained writes it"
            ) from None
        config = _read_json(os.path.join(self.path, "tokenizer_config.json"))
        self.special_tokens = special_tokens(self.path, config)
        self.bos_token = self.special_tokens.get("bos_token")
        self.eos_token = self.special_tokens.get("eos_token")
        self.eos_token_id = self._tok.token_to_id(self.eos_token) if self.eos_token else None
        self.vocab_size = self._tok.get_vocab_size()
        self.chat_template = chat_template(self.path, config)
        self._compiled = None

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return self._tok.encode(text, add_special_tokens=add_special_tokens).ids

    def count(self, text: str, add_special_tokens: bool = False) -> int:
        return len(self.encode(text, add_special_tokens))

    def decode(self, ids: Sequence[int]) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=False)

    def _template(self):
        if self._compiled is None:
            if not self.chat_template:
                raise ValueError(
                    f"{self.path} has no chat template ({CHAT_TEMPLATE_FILE}, or chat_template in "
                    "tokenizer_config.json)"
                )
            from datetime import datetime

            from jinja2.sandbox import ImmutableSandboxedEnvironment

            def raise_exception(message: str) -> None:
                raise ValueError(message)

            def tojson(
                value, ensure_ascii=False, indent=None, separators=None, sort_keys=False
            ) -> str:
                return json.dumps(
                    value,
                    ensure_ascii=ensure_ascii,
                    indent=indent,
                    separators=separators,
                    sort_keys=sort_keys,
                )

            env = ImmutableSandboxedEnvironment(
                trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
            )
            env.filters["tojson"] = tojson
            env.globals["raise_exception"] = raise_exception
            env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(
                fmt
            )  # Llama 3.x templates date prompts
            self._compiled = env.from_string(self.chat_template)
        return self._compiled

    def render_chat(self, messages: list[dict], add_generation_prompt: bool = True) -> str:
        return self._template().render(
            **{"bos_token": "", "eos_token": "", **self.special_tokens},
            messages=messages,
            add_generation_prompt=add_generation_prompt,
        )

    def encode_chat(self, messages: list[dict], add_generation_prompt: bool = True) -> list[int]:
        # The template writes BOS itself where the model wants one, so nothing is added (as vLLM does).
        return self.encode(
            self.render_chat(messages, add_generation_prompt), add_special_tokens=False
        )

    def count_chat(self, messages: list[dict], add_generation_prompt: bool = True) -> int:
        return len(self.encode_chat(messages, add_generation_prompt))
