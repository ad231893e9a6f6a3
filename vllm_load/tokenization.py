"""Tokenizers shared by the simulator (to count and produce tokens) and the client (to build
exact-length prompts without a server `/tokenize`).

`SimTokenizer` is the simulator's own deterministic tokenizer: not word counting, so a client
can only hit an exact prompt length by asking `/tokenize` or by using this same tokenizer.
`HFTokenizer` loads a local Hugging Face tokenizer directory as transformers writes it (never
downloads anything).
The rules of `SimTokenizer` are documented in docs/simulator.md; keep the two in step.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any, Protocol, Sequence


class Tokenizer(Protocol):
    """What the simulator and the prompt builder need from a tokenizer."""

    name: str

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """Token ids of `text`; special-token strings inside it count as one token each."""

    def decode(self, ids: Sequence[int]) -> str:
        """Text of `ids`, special tokens included."""

    def render_chat(self, messages: list[dict], add_generation_prompt: bool = True) -> str:
        """The prompt text the chat template makes of `messages`."""

    def encode_chat(self, messages: list[dict], add_generation_prompt: bool = True) -> list[int]:
        """Token ids of `render_chat(...)`, each special token counted once."""


def message_text(content: Any) -> str:
    """The text of an OpenAI message `content`: a string, or a list of parts whose text parts
    are joined (image parts and the like carry no text here)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, str):
                parts.append(part)
        return "".join(parts)
    return str(content)


# --- SimTokenizer -------------------------------------------------------------------------

EOS_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
BOS_TOKEN = "<|begin_of_text|>"
SIM_SPECIAL_TOKENS = (EOS_TOKEN, IM_START, IM_END, BOS_TOKEN)

_SPECIAL_IDS = {tok: i for i, tok in enumerate(SIM_SPECIAL_TOKENS)}
_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_LETTER_INDEX = {c: i for i, c in enumerate(_LETTERS)}
_NL = len(_LETTERS)
# Id layout: [specials | ASCII letter runs of 1-4 | digit runs of 1-3 | single characters],
# each of the last three doubled for "with a leading space". Arithmetic, so every process
# (and --workers child) agrees on ids without sharing a vocabulary file.
_LETTER_RUNS = sum(_NL**k for k in range(1, 5))
_DIGIT_RUNS = sum(10**k for k in range(1, 4))
_CHAR_RANGE = 0x110000
_LETTER_BASE = 256
_DIGIT_BASE = _LETTER_BASE + 2 * _LETTER_RUNS
_CHAR_BASE = _DIGIT_BASE + 2 * _DIGIT_RUNS
SIM_VOCAB_SIZE = _CHAR_BASE + 2 * _CHAR_RANGE

# One alternative per token kind, tried in this order at every position:
# a special token; 1-4 ASCII letters; 1-3 digits; any other single non-space character; one
# whitespace character. The first three may start with one space (the leading space belongs to
# the word). Longer words and numbers are therefore split into pieces.
_SPECIALS_RE = "|".join(re.escape(t) for t in SIM_SPECIAL_TOKENS)
_SIM_PATTERN = re.compile(
    # the lookahead keeps a space in front of a special token a token of its own
    _SPECIALS_RE + r"| ?[A-Za-z]{1,4}| ?[0-9]{1,3}| ?(?!" + _SPECIALS_RE + r")\S|\s"
)
_findall = _SIM_PATTERN.findall


def _run_offset(length: int, radix: int) -> int:
    return sum(radix**k for k in range(1, length))


def _piece_id(piece: str) -> int:
    special = _SPECIAL_IDS.get(piece)
    if special is not None:
        return special
    space = piece[0] == " " and len(piece) > 1
    body = piece[1:] if space else piece
    first = body[0]
    if first in _LETTER_INDEX:
        value = 0
        for c in body:
            value = value * _NL + _LETTER_INDEX[c]
        return _LETTER_BASE + space * _LETTER_RUNS + _run_offset(len(body), _NL) + value
    if "0" <= first <= "9":
        return _DIGIT_BASE + space * _DIGIT_RUNS + _run_offset(len(body), 10) + int(body)
    return _CHAR_BASE + space * _CHAR_RANGE + ord(first)


class _PieceIds(dict[str, int]):
    """Memo of piece -> id: a prompt's pieces are mostly ones seen before, and a dict lookup is
    a tenth of `_piece_id` (the simulator encodes every prompt when it caches prefixes)."""

    LIMIT = 1 << 20  # distinct pieces kept; past it the memo starts again (bounded memory)

    def __missing__(self, piece: str) -> int:
        if len(self) >= self.LIMIT:
            self.clear()
        token_id = self[piece] = _piece_id(piece)
        return token_id


_piece_ids = _PieceIds()


def _id_piece(token_id: int) -> str:
    if not 0 <= token_id < SIM_VOCAB_SIZE:
        raise ValueError(f"token id {token_id} is outside the vocabulary (0..{SIM_VOCAB_SIZE - 1})")
    if token_id < _LETTER_BASE:
        if token_id < len(SIM_SPECIAL_TOKENS):
            return SIM_SPECIAL_TOKENS[token_id]
        raise ValueError(f"token id {token_id} is a reserved id with no text")
    if token_id < _DIGIT_BASE:
        space, rest = divmod(token_id - _LETTER_BASE, _LETTER_RUNS)
        length = 1
        while rest >= _NL**length:
            rest -= _NL**length
            length += 1
        chars = []
        for _ in range(length):
            rest, i = divmod(rest, _NL)
            chars.append(_LETTERS[i])
        return " " * space + "".join(reversed(chars))
    if token_id < _CHAR_BASE:
        space, rest = divmod(token_id - _DIGIT_BASE, _DIGIT_RUNS)
        length = 1
        while rest >= 10**length:
            rest -= 10**length
            length += 1
        return " " * space + str(rest).zfill(length)
    space, code = divmod(token_id - _CHAR_BASE, _CHAR_RANGE)
    return " " * space + chr(code)


class SimTokenizer:
    """The simulator's deterministic tokenizer and ChatML-style chat template.

    Pieces: special tokens; runs of at most 4 ASCII letters (a longer word is split into
    4-letter pieces); runs of at most 3 digits; every other non-space character alone; every
    whitespace character alone. A single space before a letter/digit/other piece belongs to it.
    `add_special_tokens=True` puts `<|begin_of_text|>` in front. The chat template is
    `<|im_start|>{role}\\n{content}<|im_end|>\\n` per message, then `<|im_start|>assistant\\n`
    as the generation prompt, so the overhead is fixed per message.
    """

    name = "sim"
    bos_token = BOS_TOKEN
    eos_token = EOS_TOKEN
    eos_token_id = _SPECIAL_IDS[EOS_TOKEN]
    vocab_size = SIM_VOCAB_SIZE

    def pieces(self, text: str) -> list[str]:
        """The text of every token of `text`, in order."""
        return _findall(text)

    def count(self, text: str, add_special_tokens: bool = False) -> int:
        """len(encode(text, add_special_tokens)) without building the ids (the server's hot path)."""
        return len(_findall(text)) + (1 if add_special_tokens else 0)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        ids = list(map(_piece_ids.__getitem__, _findall(text)))
        if add_special_tokens:
            ids.insert(0, _SPECIAL_IDS[BOS_TOKEN])
        return ids

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(_id_piece(int(i)) for i in ids)

    def render_chat(self, messages: list[dict], add_generation_prompt: bool = True) -> str:
        parts = [
            f"{IM_START}{m.get('role', 'user')}\n{message_text(m.get('content'))}{IM_END}\n"
            for m in messages
        ]
        if add_generation_prompt:
            parts.append(f"{IM_START}assistant\n")
        return "".join(parts)

    def encode_chat(self, messages: list[dict], add_generation_prompt: bool = True) -> list[int]:
        return self.encode(
            self.render_chat(messages, add_generation_prompt), add_special_tokens=False
        )

    def count_chat(self, messages: list[dict], add_generation_prompt: bool = True) -> int:
        return self.count(self.render_chat(messages, add_generation_prompt))


# --- HFTokenizer --------------------------------------------------------------------------


#: the special tokens a chat template may use, as transformers passes them to it
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
        self._tok = _RustTokenizer.from_file(tokenizer_file)
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
