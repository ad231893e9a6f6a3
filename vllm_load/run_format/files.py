"""The names of the files in a run directory (docs/run-format.md), for their writers and readers,
and the one way a whole file is written (`write_atomic`, `atomic_file`).

Names and the standard library only, so that a command can name a run directory's file without
importing pandas (`load` reads the files into frames).
"""

import hashlib
import os
import re
from contextlib import contextmanager
from typing import BinaryIO, Iterator

RUN_JSON = "run.json"
REQUESTS_CSV = "requests.csv"
STEPS_CSV = "steps.csv"
HISTORY_CSV = "locust_stats_history.csv"
#: written by `vllm-load validate-client --run RUN_DIR`, shown by the report
CLIENT_VALIDATION_JSON = "client_validation.json"
#: the target's /metrics, scraped during the run
SERVER_METRICS_CSV = "server_metrics.csv"
#: its columns of a speculating server's per-position acceptance counter, one per draft position
#: (`spec_accepted_pos_0` ...): as many as the server exposes, so not a fixed column
SPEC_POSITION_PREFIX = "spec_accepted_pos_"


def spec_position_columns(columns) -> list[str]:
    """The per-position columns among `columns` (a scrape's or a server_metrics.csv's), by
    position."""
    head = SPEC_POSITION_PREFIX
    mine = [c for c in columns if c.startswith(head) and c[len(head) :].isdigit()]
    return sorted(mine, key=lambda c: int(c[len(head) :]))


def target_metrics_csv(index: int) -> str:
    """With several targets (--hosts), target `index`'s /metrics, scraped during the run (run.json
    `targets` names each file's target); `SERVER_METRICS_CSV` is then not written."""
    return f"server_metrics_{index}.csv"


def role_metrics_csv(role: str) -> str:
    """A disaggregated deployment's `role` server's /metrics (--role-metrics: prefill, decode),
    scraped during the run (run.json `roles` names each one's URL)."""
    return f"server_metrics_{role}.csv"


#: every load process's own health samples (CPU, loop lag, run-queue wait)
CLIENT_HEALTH_CSV = "client_health.csv"
#: the GPUs' own figures (--gpu-metrics, --gpu-nvml): `run_format.gpu_metrics`
GPU_METRICS_CSV = "gpu_metrics.csv"
#: one row per conversation or agentic session, written when a run that held some ends
SESSIONS_CSV = "sessions.csv"
#: requests.csv's columns as its first reader parsed them (`run_format.columnar`; never the contract)
REQUESTS_COPY = "requests.columns.npz"


def write_atomic(path: str, text: str) -> None:
    """Write `path` whole or not at all: a reader (or a crash) never sees half a file."""
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8", newline="") as fh:
        fh.write(text)
    os.replace(tmp, path)


@contextmanager
def atomic_file(path: str) -> Iterator[BinaryIO]:
    """A binary file that becomes `path` whole when the block ends, and is removed when it
    raises (`write_atomic` for what is written in parts). Its temporary name is the process's
    own: two processes writing the same file never write into one."""
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "wb") as fh:
            yield fh
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


#: the files that make a directory a run: any of them (a run that stopped early may lack some)
RUN_FILES: tuple[str, ...] = (RUN_JSON, REQUESTS_CSV, STEPS_CSV)
#: the longest name `safe_name` gives (a path component may be 255 bytes)
NAME_LIMIT = 120


def run_files_in(path: str) -> list[str]:
    """The files of a run already in the directory `path` (none: a new run may be written there)."""
    return [f for f in RUN_FILES if os.path.exists(os.path.join(path, f))]


def safe_name(text: str, fallback: str) -> str:
    """`text` (a model id, a name someone typed) as one path component inside its parent: a model
    id's `/` becomes `__`, anything but letters, digits, `.`, `_` and `-` becomes `_`, leading dots
    become `_` (never `.`, `..` or a hidden name), at most NAME_LIMIT characters (a cut name ends
    in a digest of the whole, so two names stay two); `fallback` when nothing is left."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", text.replace("/", "__"))
    name = re.sub(r"^\.+", lambda dots: "_" * len(dots.group()), name)
    if len(name) > NAME_LIMIT:
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:8]
        name = f"{name[: NAME_LIMIT - 9]}-{digest}"
    return name or fallback
