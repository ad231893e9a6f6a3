"""Hand-made requests and steps frames, as a run directory holds them, for the per-level
analysis tests: `make_requests` (documented columns and dtypes), `make_steps`, and `ok` for one
successful request's row."""

from __future__ import annotations

import pandas as pd

from vllm_load.run_format.records import COLUMNS, PANDAS_DTYPES, STEPS_COLUMNS


def make_requests(rows: list[dict]) -> pd.DataFrame:
    """A requests frame with the documented columns and dtypes; unspecified cells empty."""
    full = []
    for i, row in enumerate(rows):
        rec = {c: None for c in COLUMNS}
        rec.update(
            {
                "request_id": f"0-{i}",
                "worker": "local",
                "endpoint": "chat",
                "stream": 1,
                "requested_prompt_tokens": 10,
                "requested_completion_tokens": 10,
                "status": 200,
                "error": "",
                "error_message": "",
                "itl_hist": "",
            }
        )
        rec.update(row)
        rec["e2e"] = rec["end_ts"] - rec["start_ts"]
        full.append(rec)
    frame = pd.DataFrame(full, columns=list(COLUMNS))
    return frame.astype({c: t for c, t in PANDAS_DTYPES.items()})


#: steps.csv's columns before levels had kinds: no `kind` and `value`, a `rate` at the end (a
#: rate level's requests/s, empty for a concurrency level); the analysis reads both
OLD_STEPS_COLUMNS = [c for c in STEPS_COLUMNS if c not in ("kind", "value")] + ["rate"]


def make_steps(rows: list[tuple]) -> pd.DataFrame:
    """A steps frame in the old columns (`OLD_STEPS_COLUMNS`), each row in order, the trailing
    ones left out."""
    width = max((len(r) for r in rows), default=len(OLD_STEPS_COLUMNS) - 1)
    return pd.DataFrame(rows, columns=OLD_STEPS_COLUMNS[:width])


def ok(level, users, start, end, prompt=10, completion=10, ttft=0.1, itl="", **kw):
    return {
        "level": level,
        "users": users,
        "start_ts": start,
        "end_ts": end,
        "ok": 1,
        "ttft": ttft,
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "itl_hist": itl,
        **kw,
    }
