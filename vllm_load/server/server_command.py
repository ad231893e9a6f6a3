"""One flag of a server command line (`vllm serve MODEL --max-num-seqs 8`): its value, and the
command with another value (`tune --advice` runs the command as given and with the advised
values).

The command is a shell line, so it is read as the shell splits it: a flag is a word of its own,
`--flag VALUE` or `--flag=VALUE`, outside quotes; its value is the next word, quoted or not.
vLLM takes `--max_num_seqs` for `--max-num-seqs`, so both spellings are the flag. A flag that is
absent is appended, unless the line is more than one command (`;`, `|`, `&&`, a redirection):
appended there it would go to the wrong command, so the line is refused and says where to put
the flag. A flag found only inside quotes (`bash -c "vllm serve ... --max-num-seqs 2"`) is
refused alike: replacing it there would mean guessing how the inner command is split.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

#: characters that end a word and make an operator when unquoted (control and redirection)
OPERATOR_CHARS = frozenset(";&|<>()")


@dataclass(frozen=True)
class Word:
    """One shell word of the line: where it stands, and its text with the quotes removed."""

    start: int
    end: int
    text: str
    operator: bool = False  # `;`, `&&`, `|`, `>`, `2>&1`'s `>&`...


def shell_words(line: str) -> list[Word]:
    """The line split as the shell splits it (quotes, backslashes, operators), with positions.

    Raises ValueError on an unclosed quote."""
    words: list[Word] = []
    i, n = 0, len(line)
    while i < n:
        if line[i].isspace():
            i += 1
            continue
        start = i
        if line[i] in OPERATOR_CHARS:
            while i < n and line[i] in OPERATOR_CHARS:
                i += 1
            words.append(Word(start, i, line[start:i], operator=True))
            continue
        text: list[str] = []
        while i < n and not line[i].isspace() and line[i] not in OPERATOR_CHARS:
            c = line[i]
            if c == "\\" and i + 1 < n:
                text.append(line[i + 1])
                i += 2
            elif c in "'\"":
                close = _closing_quote(line, i)
                inner = line[i + 1 : close]
                text.append(inner if c == "'" else _unescape_double(inner))
                i = close + 1
            else:
                text.append(c)
                i += 1
        words.append(Word(start, i, "".join(text)))
    return words


def _closing_quote(line: str, at: int) -> int:
    quote, i = line[at], at + 1
    while i < len(line):
        if line[i] == quote:
            return i
        i += 2 if quote == '"' and line[i] == "\\" else 1
    raise ValueError(f"unclosed {quote} in the server command: {line}")


def _unescape_double(inner: str) -> str:
    out, i = [], 0
    while i < len(inner):
        if inner[i] == "\\" and i + 1 < len(inner) and inner[i + 1] in '\\"$`':
            out.append(inner[i + 1])
            i += 2
        else:
            out.append(inner[i])
            i += 1
    return "".join(out)


def _spelled(text: str, flag: str) -> tuple[str, str | None] | None:
    """`text` as `flag` (with `_` taken for `-` in the name): (the name as written, None) for the
    bare flag, (name, VALUE) for `--name=VALUE`, None for another word."""
    if not text.startswith("--"):
        return None
    name, eq, value = text.partition("=")
    if name[2:].replace("_", "-") != flag[2:].replace("_", "-"):
        return None
    return (name, value) if eq else (name, None)


@dataclass(frozen=True)
class FlagUse:
    """One occurrence of the flag: the span that holds its value (the value's word, or the whole
    `--flag=VALUE` word), what goes before a new value there, and the value."""

    start: int
    end: int
    prefix: str  # "--flag=" for the joined form, "" when the value is a word of its own
    value: str

    def replaced(self, value: str) -> str:
        return self.prefix + shlex.quote(value)


def flag_uses(line: str, flag: str) -> list[FlagUse]:
    """Every occurrence of `flag` in the command, in order. Raises ValueError on a flag with no
    value after it."""
    words = shell_words(line)
    uses = []
    for i, word in enumerate(words):
        spelled = None if word.operator else _spelled(word.text, flag)
        if spelled is None:
            continue
        name, joined = spelled
        if joined is not None:
            uses.append(FlagUse(word.start, word.end, f"{name}=", joined))
            continue
        after = words[i + 1] if i + 1 < len(words) else None
        if after is None or after.operator or after.text.startswith("--"):
            raise ValueError(f"{flag} has no value in the server command: {line}")
        uses.append(FlagUse(after.start, after.end, "", after.text))
    return uses


def flag_value(line: str, flag: str) -> str | None:
    """The value `flag` has in the command (the last one, as an argument parser takes it), or
    None when the command does not give it."""
    uses = flag_uses(line, flag)
    return uses[-1].value if uses else None


def _inside_a_word(words: list[Word], flag: str) -> bool:
    """Whether the flag stands inside a word of several (a quoted inner command)."""
    parts = (
        part for w in words if not w.operator and len(w.text.split()) > 1 for part in w.text.split()
    )
    return any(_spelled(part, flag) is not None for part in parts)


def with_flag(line: str, flag: str, value: str) -> str:
    """The command with `flag` set to `value`: each `--flag V` and `--flag=V` given that value,
    or `--flag VALUE` appended when the command has none. Raises ValueError where that cannot be
    done safely (the module's docstring)."""
    uses = flag_uses(line, flag)
    if uses:
        out = line
        for use in reversed(uses):
            out = out[: use.start] + use.replaced(value) + out[use.end :]
        return out
    words = shell_words(line)
    if _inside_a_word(words, flag):
        raise ValueError(
            f"{flag} is in the server command only inside quotes: write `{flag} VALUE` as words "
            "of their own in --server-cmd, so its value can be replaced"
        )
    operators = [w.text for w in words if w.operator]
    if operators:
        raise ValueError(
            f"cannot add {flag} to a server command of more than one command or with a "
            f"redirection ({operators[0]!r}): write `{flag} VALUE` in it where it belongs, "
            "and its value will be replaced"
        )
    return f"{line.rstrip()} {flag} {shlex.quote(value)}"


def without_flag(line: str, flag: str) -> str:
    """The command with every `--flag V` and `--flag=V` removed (the flag's words and the space
    before them); the line as it is where it has none. Raises ValueError on a flag with no value."""
    uses = flag_uses(line, flag)
    if not uses:
        return line
    words = shell_words(line)
    out = line
    for use in reversed(uses):
        start = use.start
        if not use.prefix:  # `--flag VALUE`: the flag is the word before the value
            start = max(w.start for w in words if w.end <= use.start)
        while start > 0 and out[start - 1].isspace():
            start -= 1
        out = out[:start] + out[use.end :]
    return out
