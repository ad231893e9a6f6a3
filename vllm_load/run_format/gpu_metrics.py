"""`gpu_metrics.csv`: the GPUs' own figures through a run (`--gpu-metrics URL`, `--gpu-nvml`),
one row per GPU, figure and reading, and run.json's record of where they came from.

Long form, because each source names its GPUs and figures its own way and a GPU may lack a
figure (SM activity, energy on an old GPU): `ts` (Unix time of the reading, halfway through a
scrape), `source` (the DCGM exporter's URL, or `nvml`), `hostname`, `gpu` (its index, `0/3` for
a MIG instance), `uuid`, `figure` (a DCGM field name, `server.dcgm.FIGURES`) and `value` (in
that field's unit). The writer imports only names from here (no pandas). run.json's `gpu_metrics` holds each source's status and GPUs, and whether
its figures are simulated (`vllm-load sim --dcgm`): the report says so wherever they appear.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from .files import GPU_METRICS_CSV

if TYPE_CHECKING:
    from .optional_csv import CsvRead

HEADER: tuple[str, ...] = ("ts", "source", "hostname", "gpu", "uuid", "figure", "value")
TEXT_COLUMNS: tuple[str, ...] = ("source", "hostname", "gpu", "uuid", "figure")


def read_gpu_metrics(run_dir: str) -> CsvRead:
    """The run's gpu_metrics.csv sorted by time (None when absent or empty), its bad lines
    skipped and counted in the note."""
    # at call time: the run's writer (the Locust master) imports this module, never pandas
    from .optional_csv import CsvRead, read_optional_csv

    read = read_optional_csv(os.path.join(run_dir, GPU_METRICS_CSV), HEADER, TEXT_COLUMNS)
    if read.frame is None:
        return read
    frame = read.frame.dropna(subset=["value"]).sort_values("ts", kind="stable")
    return CsvRead(frame.reset_index(drop=True) if len(frame) else None, read.note)


def gpu_record(run: dict) -> dict:
    """run.json's `gpu_metrics` ({} for a run without GPU figures)."""
    record = run.get("gpu_metrics")
    return record if isinstance(record, dict) else {}


def simulated(run: dict) -> bool:
    """Whether the run's GPU figures came from the simulator (every source simulated)."""
    sources = gpu_record(run).get("sources") or []
    return bool(sources) and all(s.get("simulated") for s in sources if s.get("samples"))


def source_line(run: dict) -> str:
    """One line naming where a run's GPU figures came from, "" without any."""
    sources = [s for s in gpu_record(run).get("sources") or [] if s.get("samples")]
    if not sources:
        return ""
    names = []
    for s in sources:
        models = sorted({g.get("model_name") or "?" for g in s.get("gpus") or []})
        gpus = len(s.get("gpus") or [])
        names.append(f"{s.get('source')} ({gpus} GPU(s): {', '.join(models)})")
    kind = "SIMULATED by vllm-load sim, not a real GPU" if simulated(run) else "measured"
    return f"GPU figures {kind}: from {'; '.join(names)}"
