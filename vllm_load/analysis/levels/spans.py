"""The successful requests' lives and token counts (`window_rates.RequestSpans`), from a
requests frame and its parsed stream columns (`run_format.stream_columns`)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...run_format.stream_columns import ITL_HIST, STREAM_COLUMNS, StreamColumns
from . import as_floats
from .window_rates import ChunkMarks, RequestSpans


def token_counts(frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Prompt and completion tokens per row: the server's usage, else the requested counts."""
    prompt = as_floats(frame["prompt_tokens"])
    completion = as_floats(frame["completion_tokens"])
    prompt = np.where(np.isnan(prompt), as_floats(frame["requested_prompt_tokens"]), prompt)
    completion = np.where(
        np.isnan(completion), as_floats(frame["requested_completion_tokens"]), completion
    )
    return prompt, completion


def success_spans(
    req: pd.DataFrame, ok: np.ndarray | None = None, streams: StreamColumns | None = None
) -> RequestSpans:
    """The successful requests' (`ok`, else those whose `ok` is 1) lives and token counts, for
    `window_rates`. `streams`: `req`'s parsed chunk marks (`RunData.streams`); without them, its
    own `chunk_marks` texts where it has them."""
    if ok is None:
        ok = as_floats(req["ok"]) == 1
    read = ["start_ts", "ttft", "end_ts", "prompt_tokens", "completion_tokens"]
    read += ["requested_prompt_tokens", "requested_completion_tokens"]
    sub = req.loc[ok, [c for c in read if c in req]]  # not a copy of every column
    prompt, completion = token_counts(sub)
    start, ttft, end = (as_floats(sub[c]) for c in ("start_ts", "ttft", "end_ts"))
    if streams is not None:
        parsed = ChunkMarks.of(streams.marks)
        chunk_marks = parsed.take(ok) if parsed is not None else None
        return RequestSpans.build(start, ttft, end, prompt, completion, chunk_marks=chunk_marks)
    texts = req.loc[ok, "chunk_marks"] if "chunk_marks" in req else None
    return RequestSpans.build(start, ttft, end, prompt, completion, texts)


def own_streams(requests: pd.DataFrame) -> StreamColumns:
    """A frame's own `itl_hist` (it must have it) and `chunk_marks`, parsed: for a frame read
    without its `RunData.streams`."""
    if ITL_HIST not in requests:
        raise KeyError(f"{ITL_HIST}: the frame lacks it; pass its parse (RunData.streams)")
    return StreamColumns.of(requests[[c for c in STREAM_COLUMNS if c in requests]])
