"""Whether two sets of runs sent the same workload, from what their run.json recorded.

A comparison of two configurations means something only when both served the same requests:
64 output tokens a request against 128 halves the work, and says nothing about the server. The
workload is what was sent (lengths, their distributions, the endpoint, streaming, the dataset
and its filters, the shared prefix, sampling, --images with their size and format, the user
classes and their weights) and, for an
open-loop run, how requests arrived. How long a level ran (warm-up, requests per level, caps) is
not: it changes how precise a figure is, not what it measures.
"""

from __future__ import annotations

from typing import Sequence

from ..series.stats import OPEN_LOOP_SETTINGS

#: how each of --images' images is made: part of the workload only where a run sent images
IMAGE_SETTINGS: tuple[str, ...] = ("image_size", "image_format")
#: run.json settings that make the workload
WORKLOAD_SETTINGS: tuple[str, ...] = (
    "input_tokens",
    "output_tokens",
    "input_lengths",
    "output_lengths",
    "endpoint",
    "stream",
    "dataset",
    "dataset_turns",
    "dataset_min_prompt",
    "dataset_max_prompt",
    "dataset_max_output",
    "scripted_replies",
    "think_time",
    "shared_prefix_tokens",
    "temperature",
    "vllm_params",
    "approximate_prompts",
    "images",
    *IMAGE_SETTINGS,
    *OPEN_LOOP_SETTINGS,
)


def workload(run: dict) -> dict:
    """What a run sent: its workload settings (the open-loop ones only in an open-loop run) and
    its user classes with their weights. A setting an older run did not record is left out."""
    settings = run.get("settings") or {}
    rates = bool(settings.get("rates"))
    images = bool(settings.get("images"))
    out = {
        k: settings[k]
        for k in WORKLOAD_SETTINGS
        if k in settings
        and (rates or k not in OPEN_LOOP_SETTINGS)
        and (images or k not in IMAGE_SETTINGS)
        and k != "rates"
    }
    if run.get("user_classes"):
        out["user_classes"] = run["user_classes"]
    return out


def _shown(value) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in sorted(value.items())) or "none"
    return repr(value) if isinstance(value, str) else str(value)


def differences(first: dict, other: dict) -> list[str]:
    """The workload fields two runs both recorded and set differently."""
    return [
        key
        for key in (*WORKLOAD_SETTINGS, "user_classes")
        if key in first and key in other and first[key] != other[key]
    ]


def workload_differences(
    a_runs: Sequence[dict], b_runs: Sequence[dict], a_name: str = "A", b_name: str = "B"
) -> list[str]:
    """How the sides' workloads differ, one item each ("output_tokens: A 64, B 128"), and any run
    of a side that differs from that side's first; empty when they all sent the same."""
    items = []
    for name, runs in ((a_name, a_runs), (b_name, b_runs)):
        first = workload(runs[0])
        for run in runs[1:]:
            other = workload(run)
            for key in differences(first, other):
                items.append(
                    f"{name}'s runs differ in {key} ({_shown(first[key])} in "
                    f"{runs[0].get('run_id', '?')}, {_shown(other[key])} in {run.get('run_id', '?')})"
                )
    if a_runs and b_runs:
        a, b = workload(a_runs[0]), workload(b_runs[0])
        items += [
            f"{key}: {a_name} {_shown(a[key])}, {b_name} {_shown(b[key])}"
            for key in differences(a, b)
        ]
    return items
