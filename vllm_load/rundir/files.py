"""The names of the files in a run directory (docs/run-format.md), for their writers and readers,
and the one way a whole file is written (`write_atomic`).

Names and the standard library only, so that a command can name a run directory's file without
importing pandas (`load` reads the files into frames).
"""

import os
import re

RUN_JSON = "run.json"
REQUESTS_CSV = "requests.csv"
STEPS_CSV = "steps.csv"
HISTORY_CSV = "locust_stats_history.csv"
#: written by `vllm-load validate-client --run RUN_DIR`, shown by the report
CLIENT_VALIDATION_JSON = "client_validation.json"
#: the target's /metrics, scraped during the run
SERVER_METRICS_CSV = "server_metrics.csv"
#: every load process's own health samples (CPU, loop lag, run-queue wait)
CLIENT_HEALTH_CSV = "client_health.csv"


def write_atomic(path: str, text: str) -> None:
    """Write `path` whole or not at all: a reader (or a crash) never sees half a file."""
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8", newline="") as fh:
        fh.write(text)
    os.replace(tmp, path)


def safe_name(text: str) -> str:
    """`text` as one path component: a model id's `/` becomes `__`, anything but letters, digits,
    `.`, `_` and `-` becomes `_`; "" stays "" (the caller names the fallback)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text.replace("/", "__"))
