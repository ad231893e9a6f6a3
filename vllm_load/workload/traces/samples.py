"""The sample traces shipped with the package (`samples/`, written by
scripts/make_sample_traces.py), and what a trace argument names: a file, or `sample:NAME`."""

from __future__ import annotations

import os

from .replay_plan import TraceError

SAMPLE_PREFIX = "sample:"
SAMPLES_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "samples")
#: each sample's name (as in `sample:NAME`) -> its file in SAMPLES_DIR
SAMPLE_TRACES = {
    "mooncake_60s": "mooncake_60s.jsonl",
    "burstgpt_sample": "burstgpt_sample.csv",
    "azure_sample": "azure_sample.csv",
}


def sample_path(name: str) -> str:
    """The shipped file of sample `name`."""
    return os.path.join(SAMPLES_DIR, SAMPLE_TRACES[name])


def resolve_trace(name: str) -> str:
    """The file a trace argument names: `sample:NAME` is a shipped sample, anything else a path
    (`~` expanded). An unknown sample is refused with the list of samples."""
    text = str(name).strip()
    if not text:
        raise TraceError("no trace given (give a trace file, or sample:NAME for a shipped sample)")
    if not text.startswith(SAMPLE_PREFIX):
        return os.path.expanduser(text)
    sample = text[len(SAMPLE_PREFIX) :]
    if sample not in SAMPLE_TRACES:
        known = ", ".join(SAMPLE_PREFIX + s for s in SAMPLE_TRACES)
        raise TraceError(f"{text}: no such sample trace (the samples: {known})")
    return sample_path(sample)
