"""Traces of real traffic to replay: when each request came and how long its prompt and output
were, read from the published formats (Mooncake JSONL, BurstGPT CSV, Azure LLM inference CSV),
and small generated samples shipped in `samples/`. Pure, like the rest of `workload/`.

- `read_trace(path, format="auto")` -> `Trace` of `TraceRequest`s (`formats.py`; the formats in
  `mooncake.py` and `tables.py`, one value checked in `fields.py`); `TraceError` on a bad file,
  one line naming file and line
- `Trace.window(start, duration)`, `Trace.faster(speed)`, `Trace.share(processes, index)`
  (`replay_plan.py`)
- `resolve_trace("sample:mooncake_60s")` -> the shipped sample's path (`samples.py`)
- `reused_blocks(requests)`, `reuse_summary(trace)`: the prefix reuse a trace's hash_ids imply
  (`reuse.py`)
"""

from __future__ import annotations

from .formats import TRACE_FORMATS, detect_format, read_trace
from .replay_plan import MOONCAKE_BLOCK_TOKENS, Trace, TraceError, TraceLimits, TraceRequest
from .reuse import reuse_summary, reused_blocks
from .samples import SAMPLE_PREFIX, SAMPLE_TRACES, resolve_trace, sample_path

__all__ = [
    "MOONCAKE_BLOCK_TOKENS",
    "SAMPLE_PREFIX",
    "SAMPLE_TRACES",
    "TRACE_FORMATS",
    "Trace",
    "TraceError",
    "TraceLimits",
    "TraceRequest",
    "detect_format",
    "read_trace",
    "resolve_trace",
    "reuse_summary",
    "reused_blocks",
    "sample_path",
]
