"""Conversations to send, read from a dataset file: JSONL prompts or conversations, or ShareGPT.

`load_dataset(path)` reads a file into a `Dataset` of `Conversation`s (a single prompt is a
one-turn conversation). The container is told by its first character: `[` is a JSON array
(ShareGPT's own files), anything else JSONL, one entry per line. Each entry, in either, is one of

- `{"prompt": "...", "output_tokens"?: N}` (or `max_tokens`; an optional `"system"`),
- `{"messages": [{"role": "system"|"user"|"assistant", "content": ...}, ...], "output_tokens"?: N}`,
- ShareGPT's `{"id": ..., "conversations": [{"from": "human"|"gpt"|"system", "value": ...}, ...]}`.

A user message may carry images: an `"images"` list of local files (relative to the dataset's
directory, read once into `data:` URLs) or http(s)/data URLs, on the message or (for its first
user message) on the entry, and `image_url` parts in a list `content`.

A file that is not one of these (not JSON, a field of the wrong type, an entry of none of these
shapes) is refused with a `SettingsError` of one line naming the file and the line (JSONL) or the
entry (`[i]`, from 0, in a JSON array). An entry that is well formed but cannot be sent (an empty
prompt, a conversation that starts with the assistant, a speaker we do not know) is skipped and
counted by reason in `Dataset.skip_reasons`; a file with nothing usable is refused. Formats in
docs/workload.md.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import orjson

from ..tokenization.base import message_text
from ..user_values import SettingsError
from .images import ImageFiles


@dataclass(frozen=True)
class Turn:
    """One request of a conversation: the user's message, the assistant's scripted reply from
    the dataset (None when it has none: the last turn of a prompt), and how many tokens to ask
    for (None when the dataset does not say: the caller draws a length, or `filter_by_length`
    counts the reply). `images`: the URLs of the images sent after the user's text."""

    user: str
    reply: str | None = None
    output_tokens: int | None = None
    images: tuple[str, ...] = ()


@dataclass(frozen=True)
class Conversation:
    """What one simulated user sends in order: an optional system prompt, then its turns, each
    sent with the previous turns (their scripted replies, or the replies the server gave) as
    history. A single prompt is a one-turn conversation."""

    id: str
    system: str | None
    turns: tuple[Turn, ...]


@dataclass(frozen=True)
class Dataset:
    """The usable conversations of one file, and how many entries were left out and why
    (reason -> count; `load_dataset`'s and `filter_by_length`'s reasons together)."""

    path: str
    conversations: tuple[Conversation, ...]
    skip_reasons: dict[str, int] = field(default_factory=dict)

    @property
    def skipped(self) -> int:
        """How many entries of the file are not in `conversations`."""
        return sum(self.skip_reasons.values())

    def describe(self) -> str:
        """One line for a log: the file, what is usable, what was skipped and why."""
        turns = sum(len(c.turns) for c in self.conversations)
        text = f"{self.path}: {len(self.conversations)} conversations ({turns} turns)"
        if self.skip_reasons:
            reasons = ", ".join(f"{n} {why}" for why, n in sorted(self.skip_reasons.items()))
            text += f", {self.skipped} skipped ({reasons})"
        return text


class Skip(Exception):
    """An entry that is well formed but cannot be sent; the message is the reason."""


ROLES = {
    "system": "system",
    "user": "user",
    "human": "user",
    "assistant": "assistant",
    "gpt": "assistant",
    "chatgpt": "assistant",
    "bard": "assistant",
    "bing": "assistant",
    "model": "assistant",
}


#: one message of an entry: its role (system, user or assistant), its text, its images' URLs
Message = tuple[str, str, tuple[str, ...]]

#: what --dataset takes for the ShareGPT sample shipped with the package
SAMPLE_NAME = "sample"


def dataset_path(value: str) -> str:
    """The file a --dataset value names (`sample`: the shipped ShareGPT sample)."""
    if value == SAMPLE_NAME:
        return os.path.join(
            os.path.dirname(os.path.abspath(__file__)), "data", "sample_sharegpt.json"
        )
    return os.path.expanduser(value)


def dataset_argument(value: str) -> str:
    """--dataset as given, once it names a readable file (or is empty, or `sample`)."""
    value = str(value or "").strip()
    if value and not os.path.isfile(dataset_path(value)):
        raise SettingsError(
            f"--dataset {value}: no such file (or '{SAMPLE_NAME}' for the shipped sample)"
        )
    return value


def load_dataset(path: str | os.PathLike[str]) -> Dataset:
    """Every usable conversation of a dataset file (formats in this module's docstring)."""
    name = os.fspath(path)
    try:
        with open(name, "rb") as fh:
            data = fh.read()
    except OSError as e:
        raise SettingsError(f"dataset {name}: {e.strerror or e}") from None
    if data.startswith(b"\xef\xbb\xbf"):  # a UTF-8 byte order mark, as some editors write
        data = data[3:]
    if data.lstrip()[:1] == b"[":
        entries = _json_array(name, data)
    else:
        entries = _jsonl(name, data)
    conversations: list[Conversation] = []
    skipped: Counter[str] = Counter()
    images = ImageFiles(os.path.dirname(os.path.abspath(name)))
    for where, default_id, entry in entries:
        try:
            conversations.append(parse_entry(entry, default_id, images))
        except Skip as why:
            skipped[str(why)] += 1
        except ValueError as e:
            raise SettingsError(f"{where}: {e}") from None
    if not conversations:
        reasons = "; ".join(f"{n} {why}" for why, n in sorted(skipped.items()))
        raise SettingsError(
            f"dataset {name}: no usable entry" + (f" ({reasons})" if reasons else " (empty)")
        )
    return Dataset(name, tuple(conversations), dict(skipped))


def _jsonl(name: str, data: bytes) -> list[tuple[str, str, Any]]:
    entries = []
    for number, line in enumerate(data.split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            entries.append((f"{name}:{number}", str(number), orjson.loads(line)))
        except orjson.JSONDecodeError as e:
            raise SettingsError(
                f"{name}:{number}: not valid JSON: {e.msg} (column {e.colno})"
            ) from None
    return entries


def _json_array(name: str, data: bytes) -> list[tuple[str, str, Any]]:
    try:
        array = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise SettingsError(
            f"{name}:{e.lineno}: not valid JSON: {e.msg} (column {e.colno})"
        ) from None
    if not isinstance(array, list):
        raise SettingsError(f"{name}: not a JSON array of entries")
    return [(f"{name}: entry [{i}]", str(i), entry) for i, entry in enumerate(array)]


def parse_entry(entry: Any, default_id: str, images: ImageFiles | None = None) -> Conversation:
    """One entry of any of the three shapes as a `Conversation`; raises `Skip` for an entry that
    cannot be sent and ValueError (saying what is wrong) for one that is malformed. `images`
    turns image references into URLs (default: files relative to the working directory)."""
    images = images or ImageFiles("")
    if not isinstance(entry, dict):
        raise ValueError(f"an entry must be a JSON object, got {_kind(entry)}")
    output_tokens = _output_tokens(entry)
    conv_id = entry.get("id", default_id)
    if not isinstance(conv_id, (str, int)) or isinstance(conv_id, bool):
        raise ValueError(f'"id" must be a string or a number, got {_kind(conv_id)}')
    messages: list[Message]
    if "prompt" in entry:
        prompt = _string(entry, "prompt")
        system = _string(entry, "system") if entry.get("system") is not None else None
        messages = [("system", system or "", ()), ("user", prompt, ())]
    elif "messages" in entry:
        messages = _messages(entry["messages"], "messages", "role", "content", images)
    elif "conversations" in entry:
        messages = _messages(entry["conversations"], "conversations", "from", "value", images)
    else:
        raise ValueError('an entry needs "prompt", "messages" or "conversations"')
    entry_images = _image_list(entry, '"images"', images)
    if entry_images:  # the first user message's
        first = next((i for i, m in enumerate(messages) if m[0] == "user"), None)
        if first is not None:
            role, text, own = messages[first]
            messages[first] = (role, text, entry_images + own)
    system, turns = _turns(messages, output_tokens)
    return Conversation(str(conv_id), system, turns)


def _output_tokens(entry: dict) -> int | None:
    for key in ("output_tokens", "max_tokens"):
        value = entry.get(key)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f'"{key}" must be a whole number of at least 1, got {value!r}')
        return value
    return None


def _string(entry: dict, key: str) -> str:
    value = entry[key]
    if not isinstance(value, str):
        raise ValueError(f'"{key}" must be a string, got {_kind(value)}')
    return value


def _image_list(item: dict, name: str, images: ImageFiles) -> tuple[str, ...]:
    """The URLs of an object's `"images"` list (empty without one); ValueError naming `name`."""
    references = item.get("images")
    if references is None:
        return ()
    if not isinstance(references, list):
        raise ValueError(f"{name} must be a list of image files or URLs, got {_kind(references)}")
    return tuple(images.url_of(reference) for reference in references)


def _part_images(content: Any, name: str, images: ImageFiles) -> tuple[str, ...]:
    """The URLs of a list `content`'s `image_url` parts."""
    if not isinstance(content, list):
        return ()
    urls = []
    for part in content:
        if isinstance(part, dict) and part.get("type") == "image_url":
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, dict) else image
            if not isinstance(url, str):
                raise ValueError(f'{name}: an image_url part needs {{"url": "..."}}')
            urls.append(images.url_of(url))
    return tuple(urls)


def _messages(
    items: Any, key: str, role_key: str, text_key: str, images: ImageFiles
) -> list[Message]:
    """(role, text, image URLs) of each message, the role normalised to system, user or
    assistant."""
    if not isinstance(items, list):
        raise ValueError(f'"{key}" must be a list, got {_kind(items)}')
    messages = []
    for i, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get(role_key), str):
            raise ValueError(f'"{key}"[{i}] must be an object with a string "{role_key}"')
        text = item.get(text_key)
        if text_key == "value" and not isinstance(text, str):
            raise ValueError(f'"{key}"[{i}]["value"] must be a string, got {_kind(text)}')
        if text_key == "content" and not isinstance(text, (str, list, type(None))):
            raise ValueError(f'"{key}"[{i}]["content"] must be a string or a list of parts')
        role = ROLES.get(item[role_key].lower())
        if role is None:
            raise Skip(f"speaker {item[role_key]!r}")
        name = f'"{key}"[{i}]'
        urls = _image_list(item, f'{name}["images"]', images) + _part_images(text, name, images)
        if urls and role != "user":
            raise Skip(f"images in {'an' if role == 'assistant' else 'a'} {role} message")
        messages.append((role, message_text(text), urls))
    return messages


def _turns(
    messages: list[Message], output_tokens: int | None
) -> tuple[str | None, tuple[Turn, ...]]:
    """The system prompt and the turns of a list of messages.

    Consecutive messages of one role are joined with a blank line: a Turn holds one user
    message and one reply, and a chat API reads two user messages in a row as one request anyway.
    """
    system = None
    if messages and messages[0][0] == "system":
        system = messages[0][1] if messages[0][1].strip() else None
        messages = messages[1:]
    merged: list[Message] = []
    for role, text, urls in messages:
        if role == "system":
            raise Skip("system message after the start")
        if merged and merged[-1][0] == role:
            merged[-1] = (role, f"{merged[-1][1]}\n\n{text}", merged[-1][2] + urls)
        else:
            merged.append((role, text, urls))
    if not merged:
        raise Skip("no user message")
    if merged[0][0] == "assistant":
        raise Skip("starts with the assistant")
    turns = []
    for i in range(0, len(merged), 2):
        _, user, urls = merged[i]
        if not user.strip() and not urls:
            raise Skip("empty user message")
        reply = merged[i + 1][1] if i + 1 < len(merged) else None
        turns.append(Turn(user, reply if reply and reply.strip() else None, output_tokens, urls))
    return system, tuple(turns)


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", type(None): "null"}.get(
        type(value), type(value).__name__
    )
