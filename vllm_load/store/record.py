"""One run as the store keeps it: its metadata from run.json and its per-level figures as the
report computes them (`analysis.measured_run.measure_run`, the report's own measurement, with
the GPUs' and speculative decoding's figures), one value per declared figure
(`figures.level_figures`)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from .. import __version__
from ..figures import level_figures


@dataclass(frozen=True)
class StoredLevel:
    """One level: its kind of load and value, how it stopped, and its declared figures (a figure
    the level has no value of, such as a GPU's figure without telemetry, is absent)."""

    level: int
    kind: str
    value: float
    stop_reason: str
    figures: dict[str, float]
    #: 1.0 or 0.0: the level met the SLOs the run was started with (`--slo`) or not; None where
    #: the run had none or whether it met them is unknown (a figure it lacks)
    slo_met: float | None = None


@dataclass(frozen=True)
class StoredRun:
    """One run's metadata (what was tested, on what, by which vllm-load) and its levels."""

    run_id: str
    model: str
    started_at: str
    ended_at: str
    outcome: str
    vllm_version: str
    vllm_commit: str
    gpu_kind: str
    gpu_count: int | None
    server_args: str
    load_kind: str
    tool_version: str
    path: str
    workload: dict = field(default_factory=dict)
    settings: dict = field(default_factory=dict)
    meta: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # what the reader left out, and why
    levels: list[StoredLevel] = field(default_factory=list)


@dataclass(frozen=True)
class StoredGroup:
    """A tune or a campaign: its kind, name and directory (absolute: one group per kind and
    directory), what it decided, and its runs' directories with each one's label there (a tune's
    configuration, a campaign's phase)."""

    kind: str
    name: str
    directory: str
    detail: dict
    labels: dict[str, str]  # run directory -> label


def _text(value: object) -> str:
    return "" if value is None else str(value)


def _gpu(run: dict) -> tuple[str, int | None]:
    """The GPU kind and count: as the user gave them (--meta gpu=..., gpus=...), else as the
    run's GPU telemetry named them."""
    meta = run.get("meta") or {}
    kind = _text(meta.get("gpu") or meta.get("gpu_kind"))
    count_text = _text(meta.get("gpus") or meta.get("gpu_count"))
    count = int(count_text) if count_text.isdigit() else None
    sources = (run.get("gpu_metrics") or {}).get("sources") or []
    gpus = [g for s in sources if isinstance(s, dict) for g in s.get("gpus") or []]
    if not kind and gpus:
        kind = ", ".join(sorted({_text(g.get("model_name")) or "?" for g in gpus}))
    if count is None and gpus:
        count = len({(g.get("hostname"), g.get("uuid") or g.get("gpu")) for g in gpus})
    return kind, count


def metadata(run: dict, path: str) -> StoredRun:
    """A run's metadata from its run.json (its levels are added by `stored_run`)."""
    from ..analysis.decisions.workload import workload

    settings = run.get("settings") or {}
    version = (run.get("target") or {}).get("version") or {}
    version = version if isinstance(version, dict) else {}
    meta = run.get("meta") or {}
    kind, count = _gpu(run)
    return StoredRun(
        run_id=_text(run.get("run_id")),
        model=_text(run.get("model") or settings.get("model")) or "unknown",
        started_at=_text(run.get("started_at")),
        ended_at=_text(run.get("ended_at")),
        outcome=_text(run.get("outcome")) or "unknown",
        vllm_version=_text(version.get("version") or meta.get("vllm_version")),
        vllm_commit=_text(version.get("commit") or meta.get("vllm_commit")),
        gpu_kind=kind,
        gpu_count=count,
        server_args=_text(settings.get("server_args")),
        load_kind="trace"
        if settings.get("trace")
        else "rate"
        if settings.get("rates")
        else "concurrency",
        tool_version=_text(run.get("vllm_load_version")) or __version__,
        path=path,
        workload=workload(run),
        settings=json.loads(json.dumps(settings, default=str)),
        meta={str(k): _text(v) for k, v in meta.items()},
    )


def _number(value: object) -> float | None:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def levels_of(metrics) -> list[StoredLevel]:
    """The per-level table (`measure_run`'s `metrics`, with `slo_met` where judged) as stored
    levels: every declared figure with a finite value."""
    keys = [f.key for f in level_figures() if f.key in metrics.columns]
    out = []
    for row in metrics.to_dict("records"):
        values = {key: _number(row[key]) for key in keys}
        out.append(
            StoredLevel(
                level=int(row["level"]),
                kind=_text(row["kind"]),
                value=float(row["value"]),
                stop_reason=row["stop_reason"] if isinstance(row.get("stop_reason"), str) else "",
                figures={k: v for k, v in values.items() if v is not None},
                slo_met=_number(row.get("slo_met")),
            )
        )
    return out


def stored_run(path: str) -> StoredRun:
    """Read and measure the run directory `path`. Raises ValueError (DamagedRun) on a run the
    report would refuse."""
    from dataclasses import replace

    from ..analysis.decisions.goodput import level_goodput
    from ..analysis.measured_run import measure_run
    from ..slo import parse_slo

    measured = measure_run(path)  # as the report measures it: GPU and speculation figures too
    data, metrics = measured.data, measured.metrics
    run = metadata(data.run, path)
    spec = parse_slo(run.settings.get("slo") or [])  # as the report judges them: recorded_slo
    if spec:
        met = level_goodput(data.requests, measured.meas, spec)[["level", "slo_met"]]
        metrics = metrics.merge(met, on="level", how="left")
    return replace(run, run_id=data.run_id, notes=list(data.notes), levels=levels_of(metrics))
