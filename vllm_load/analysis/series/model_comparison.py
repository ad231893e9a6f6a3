"""Cross-model comparison: peak, peak per GPU, saturation, scaling and p99 at peak side by side."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Mapping, Sequence

from .saturation import Saturation
from .stats import Series

_NUMBER = re.compile(r"^\s*(\d+(?:\.\d+)?)")


def parse_gpus(value) -> float | None:
    """A GPU count from run.json metadata ("8", 8, "8x MI325X"); None when there is none."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value) if value > 0 else None
    match = _NUMBER.match(str(value))
    if not match:
        return None
    count = float(match.group(1))
    return count if count > 0 else None


def gpu_count(
    model: str, runs: Sequence[dict], overrides: Mapping[str, float] | None = None
) -> tuple[float | None, str]:
    """(GPU count, where it came from) for a model: --gpus-per-model first, then run.json meta `gpus`."""
    if overrides and model in overrides:
        return float(overrides[model]), "--gpus-per-model"
    for run in runs:
        meta = run.get("meta") or {}
        gpus = parse_gpus(meta.get("gpus")) if isinstance(meta, dict) else None
        if gpus:
            return gpus, "run.json meta"
    return None, ""


@dataclass
class ModelRow:
    """One column of the cross-model table."""

    label: str
    model: str
    n_runs: int
    gpus: float | None
    gpus_source: str
    peak_tok_per_s: float
    peak_ci_low: float
    peak_ci_high: float
    peak_value: float
    peak_per_gpu: float
    saturation: str
    scaling_ratio: float
    scaling_levels: str
    scaling_note: str
    p99_at_peak: float
    ttft_p99_at_peak: float
    kind: str = "concurrency"  # its levels' kind of load (`load_kinds`) ...
    unit: str = "users"  # ... and what their values (`peak_value`) count


def compare(
    series: Sequence[Series],
    saturations: Sequence[Saturation],
    runs: Sequence[dict],
    overrides: Mapping[str, float] | None = None,
) -> list[ModelRow]:
    """One row per series, in the given order."""
    rows = []
    for s, sat in zip(series, saturations):
        gpus, source = gpu_count(s.model, [runs[i] for i in s.run_indices], overrides)
        peak = sat.peak
        sc = sat.scaling
        rows.append(
            ModelRow(
                label=s.label,
                model=s.model,
                n_runs=s.n_runs,
                gpus=gpus,
                gpus_source=source,
                peak_tok_per_s=peak.tok_per_s if peak else math.nan,
                peak_ci_low=peak.ci_low if peak else math.nan,
                peak_ci_high=peak.ci_high if peak else math.nan,
                peak_value=peak.value if peak else math.nan,
                peak_per_gpu=(peak.tok_per_s / gpus) if peak and gpus else math.nan,
                saturation=sat.headline,
                scaling_ratio=sc.ratio if sc else math.nan,
                scaling_levels=f"{sat.axis.number(sc.from_value)}→{sat.axis.number(sc.to_value)}"
                if sc
                else "",
                scaling_note=sc.note() if sc else "",
                p99_at_peak=peak.e2e_p99 if peak else math.nan,
                ttft_p99_at_peak=peak.ttft_p99 if peak else math.nan,
                kind=sat.axis.name,
                unit=sat.axis.unit,
            )
        )
    return rows


def comparison_findings(rows: Sequence[ModelRow]) -> list[str]:
    """Sentences comparing the models; empty with fewer than two."""
    rows = [r for r in rows if r.peak_tok_per_s == r.peak_tok_per_s]
    if len(rows) < 2:
        return []
    out = []
    best = max(rows, key=lambda r: r.peak_tok_per_s)
    worst = min(rows, key=lambda r: r.peak_tok_per_s)
    out.append(
        f"{best.label} has the highest peak throughput ({best.peak_tok_per_s:,.0f} tok/s), "
        f"{best.peak_tok_per_s / worst.peak_tok_per_s:.1f}x that of {worst.label} ({worst.peak_tok_per_s:,.0f} tok/s)."
    )
    per_gpu = [r for r in rows if r.peak_per_gpu == r.peak_per_gpu]
    if len(per_gpu) >= 2:
        top = max(per_gpu, key=lambda r: r.peak_per_gpu)
        out.append(
            f"Per GPU, {top.label} leads with {top.peak_per_gpu:,.0f} tok/s on {top.gpus:g} GPUs."
        )
    scaling = [r for r in rows if r.scaling_ratio == r.scaling_ratio]
    if len(scaling) >= 2:
        hi = max(scaling, key=lambda r: r.scaling_ratio)
        lo = min(scaling, key=lambda r: r.scaling_ratio)
        if hi is not lo:
            out.append(
                f"{hi.label} scales furthest with concurrency ({hi.scaling_ratio:.1f}x over {hi.scaling_levels}) "
                f"against {lo.scaling_ratio:.1f}x for {lo.label}."
            )
    p99 = [r for r in rows if r.p99_at_peak == r.p99_at_peak]
    if len(p99) >= 2:
        fast = min(p99, key=lambda r: r.p99_at_peak)
        out.append(
            f"At peak, {fast.label} has the lowest p99 E2E latency ({fast.p99_at_peak:.2f} s)."
        )
    return out
