"""The server flags a diagnosis reads from `--server-args` (the server's command line as the
user started it), and the option's check: pure text, below both the options (`settings.py`) and
the analysis that turns them into given facts (`analysis/diagnosis/facts.py`)."""

from __future__ import annotations

import shlex

from ..user_values import SettingsError

#: server flags a diagnosis reads from `--server-args` (vLLM's spelling) -> fact name
SERVER_FLAGS = {
    "--max-num-seqs": "max_num_seqs",
    "--max-num-batched-tokens": "max_num_batched_tokens",
    "--max-model-len": "max_model_len",
    "--gpu-memory-utilization": "gpu_memory_utilization",
    "--num-gpu-blocks-override": "num_gpu_blocks",
    "--block-size": "block_size",
    "--kv-cache-dtype": "cache_dtype",  # cache_config_info's name
    "--tensor-parallel-size": "tensor_parallel_size",
}


def parse_server_args(text: str) -> dict[str, str]:
    """The flags of `SERVER_FLAGS` in a server's command line (`--flag V` or `--flag=V`);
    raises ValueError on a flag without its value."""
    try:
        words = shlex.split(text or "")
    except ValueError as e:  # an unclosed quote
        raise ValueError(f"--server-args: {e}") from None
    out: dict[str, str] = {}
    for i, word in enumerate(words):
        flag, eq, value = word.partition("=")
        if flag not in SERVER_FLAGS:
            continue
        if not eq:
            if i + 1 >= len(words) or words[i + 1].startswith("--"):
                raise ValueError(f"--server-args: {flag} has no value")
            value = words[i + 1]
        out[SERVER_FLAGS[flag]] = value
    return out


def server_args_argument(value: object) -> str:
    """`Settings.server_args`, checked: the text as given, refused in one line when a flag the
    diagnosis reads has no value."""
    text = "" if value is None else str(value).strip()
    try:
        parse_server_args(text)
    except ValueError as e:
        raise SettingsError(
            f'{e} (give the server\'s flags as started, e.g. "--max-num-seqs 256")'
        ) from None
    return text
