"""The capacity model's knee, said when a test starts: where the server's configuration (what
`/metrics` and `/v1/models` say, and `--server-args`) puts the knee for the requested lengths and
levels, before a request is sent. Said only when at least one limit is known."""

from __future__ import annotations

import urllib.error
import urllib.request
from typing import Sequence

from ..analysis.diagnosis.capacity import predict
from ..analysis.diagnosis.facts import server_facts
from ..load_kinds import Level
from ..server.control import auth_headers
from ..settings import Settings
from ..workload.lengths import parse_length
from .server_metrics import parse_exposition


def cache_config(host: str, model: str, api_key: str | None, timeout: float = 5.0) -> dict:
    """`vllm:cache_config_info`'s labels from the target's /metrics ({} when it has none)."""
    req = urllib.request.Request(host.rstrip("/") + "/metrics", headers=auth_headers(api_key))
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            text = resp.read().decode("utf-8", "replace")
        return parse_exposition(text, model)[1]
    except (OSError, urllib.error.URLError, ValueError):
        return {}


def _mean_length(fixed: int, spec: str, name: str) -> float:
    return parse_length(spec, name).mean if spec else float(fixed)


def capacity_note(settings: Settings, header: dict, levels: Sequence[Level], labels: dict) -> str:
    """The sentence (\"\" when no limit is known, or for an open-loop test, whose levels are not
    numbers of users)."""
    if any(load.kind.open_loop for load in levels):
        return ""
    facts = server_facts({**header, "server_metrics": {"cache_config": labels}})
    prediction = predict(
        facts,
        _mean_length(settings.input_tokens, settings.input_lengths, "--input-lengths"),
        _mean_length(settings.output_tokens, settings.output_lengths, "--output-lengths"),
        tuple(load.users for load in levels),
    )
    if not prediction.limits:
        return ""
    return f"capacity model: {prediction.sentence()}"
