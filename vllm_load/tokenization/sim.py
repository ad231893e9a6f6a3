"""`SimTokenizer`: the simulator's deterministic tokenizer and ChatML-style chat template (its
rules are in docs/simulator.md; keep the two in step)."""

from __future__ import annotations

import re
from typing import Any, Sequence

from .base import message_text

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
            f"{IM_START}{m.get('role', 'user')}\n{message_text(m.get('content'))}"
            f"{_tool_calls_text(m.get('tool_calls'))}{IM_END}\n"
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


def _tool_calls_text(calls: Any) -> str:
    """An assistant message's tool calls as Qwen's template writes them (nothing without)."""
    if not isinstance(calls, list) or not calls:
        return ""
    parts = []
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            name, arguments = function.get("name"), function.get("arguments")
            parts.append(
                f'\n<tool_call>\n{{"name": "{name}", "arguments": {arguments}}}\n</tool_call>'
            )
    return "".join(parts)


# --- HFTokenizer --------------------------------------------------------------------------


#: the special tokens a chat template may use, as transformers passes them to it
