"""Server settings that are no single `--flag VALUE` of every server's command line, set on a
command by name: `tune --matrix NAME=...` fills them where the command has no `{NAME}` field,
and `tune --advice` carries out advice that names them.

`num_speculative_tokens` (K, the draft tokens per decoding step): vLLM takes it inside the JSON
of `--speculative-config` (`{"method": "ngram", "num_speculative_tokens": K, ...}`; vLLM 0.32's
`SpeculativeConfig`), and K = 0 is no `--speculative-config` at all (vLLM refuses K = 0 in it);
the simulator (`vllm-load sim`) takes `--speculative-tokens K`, 0 included. A vLLM command that
already gives `--speculative-config` keeps its other keys (its method, its n-gram lookup); one
that does not gets n-gram speculation (no draft model to download).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable

from .server_command import flag_value, shell_words, with_flag, without_flag

VLLM_SPEC_FLAG = "--speculative-config"
SIM_SPEC_FLAG = "--speculative-tokens"
#: what `--speculative-config` holds where the command gave none: n-gram lookup needs no draft
#: model, and vLLM's defaults (5, 5) drafted nothing on short prompts
NGRAM = {"method": "ngram", "prompt_lookup_max": 3, "prompt_lookup_min": 2}


def is_simulator(command: str) -> bool:
    """Whether the command starts vllm-load's simulator (`vllm-load sim`, `python -m vllm_load
    sim`): a word `sim` right after the word that names vllm-load."""
    words = [w.text for w in shell_words(command) if not w.operator]
    return any(
        w.rsplit("/", 1)[-1] in ("vllm-load", "vllm_load") and nxt == "sim"
        for w, nxt in zip(words, words[1:])
    )


def _count(value: str, name: str) -> int:
    try:
        k = int(value)
    except ValueError:
        k = -1
    if k < 0:
        raise ValueError(f"{name} takes a whole number of draft tokens (0: none), got {value!r}")
    return k


def _spec_config(command: str) -> dict | None:
    """The command's `--speculative-config` JSON, None where it gives none."""
    raw = flag_value(command, VLLM_SPEC_FLAG)
    if raw is None:
        return None
    try:
        config = json.loads(raw)
    except ValueError:
        config = None
    if not isinstance(config, dict):
        raise ValueError(f"{VLLM_SPEC_FLAG} in the server command is not a JSON object: {raw}")
    return config


def speculative_tokens(command: str) -> str:
    """K as the command runs it: 0 without speculation."""
    if is_simulator(command):
        return flag_value(command, SIM_SPEC_FLAG) or "0"
    config = _spec_config(command)
    return "0" if config is None else str(config.get("num_speculative_tokens", 0))


def with_speculative_tokens(command: str, value: str) -> str:
    """The command speculating with K = `value` draft tokens (0: not speculating)."""
    k = _count(value, "num_speculative_tokens")
    if is_simulator(command):
        return with_flag(command, SIM_SPEC_FLAG, str(k))
    if k == 0:
        return without_flag(command, VLLM_SPEC_FLAG)
    config = {**(_spec_config(command) or NGRAM), "num_speculative_tokens": k}
    return with_flag(command, VLLM_SPEC_FLAG, json.dumps(config, separators=(",", ":")))


@dataclass(frozen=True)
class CommandSetting:
    """A setting set by name: its value in a command, and the command with another value."""

    name: str
    value: Callable[[str], str]
    set: Callable[[str, str], str]


#: every setting set by name, by name
SETTINGS: dict[str, CommandSetting] = {
    s.name: s
    for s in (
        CommandSetting("num_speculative_tokens", speculative_tokens, with_speculative_tokens),
    )
}


def setting_value(command: str, flag_or_name: str) -> str | None:
    """The value a `--flag` or a named setting has in the command (None: the command does not
    give the flag). Raises ValueError where the command cannot be read for it."""
    setting = SETTINGS.get(flag_or_name)
    return setting.value(command) if setting else flag_value(command, flag_or_name)


def with_setting(command: str, flag_or_name: str, value: str) -> str:
    """The command with a `--flag` or a named setting set to `value`. Raises ValueError where
    that cannot be done safely (`server_command.with_flag`)."""
    setting = SETTINGS.get(flag_or_name)
    return setting.set(command, value) if setting else with_flag(command, flag_or_name, value)
