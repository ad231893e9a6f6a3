"""What the GPUs' own telemetry says about a saturated level (`analysis.levels.gpu`'s figures over
its measured window: --gpu-metrics, --gpu-nvml), as evidence for or against `compute`.

The server's /metrics show each engine step taking longer as the batch grows (the `compute` rule,
`verdict.level_verdict`), not what the step spent its time on. The GPUs tell that part:

- busy: SM activity (`DCGM_FI_PROF_SM_ACTIVE`, the share of cycles an SM had a warp) at least
  `SM_BUSY`; where no SM activity was recorded (dcgm-exporter reads it only when configured with
  the profiling fields), GPU utilisation (`DCGM_FI_DEV_GPU_UTIL`, the share of time any kernel
  ran) at least `UTIL_BUSY`. It supports `compute`, and the verdict names the figures.
- idle: SM activity below `SM_IDLE`, or (SM activity unknown) utilisation below `UTIL_IDLE`: the
  GPU sat without work for much of the window while throughput stopped growing, so the steps
  did not lengthen for GPU work. The batch rule alone must not then say `compute`.
- in between (`UNCLEAR`): neither; the batch rule's verdict stands, the figures named beside it.

GPU memory is no evidence of a full KV cache: vLLM allocates its whole KV pool at start-up
(`--gpu-memory-utilization` of the memory), so the memory used stays flat whatever the cache
holds; `vllm:kv_cache_usage_perc` says that. No power limit is recorded, so power is shown,
never judged. Plain Python: the master imports this (no pandas).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: NVIDIA's DCGM user guide (profiling metrics, SM Activity): 0.8 or more is necessary, though
#: not sufficient, for effective use of the GPU ...
SM_BUSY = 0.80
#: ... and below 0.5 likely indicates ineffective use
SM_IDLE = 0.50
#: GPU utilisation counts any kernel running, however small (one busy SM reads 100 %): only a
#: kernel running nearly all the time counts as busy, and only where SM activity is unknown
UTIL_BUSY = 0.90
#: no kernel ran half the time: the GPU waited on the host. An SM is active only while a kernel
#: runs, so this also bounds SM activity below `SM_IDLE`
UTIL_IDLE = 0.50

BUSY, IDLE, UNCLEAR, UNKNOWN = "busy", "idle", "unclear", ""

#: how simulated figures are named wherever a verdict quotes them
SIMULATED = "SIMULATED by vllm-load sim, not a real GPU"


def _known(x: float) -> bool:
    return x == x and not math.isinf(x)


def _pct(x: float) -> str:
    return f"{x:.0%}"


@dataclass(frozen=True)
class GpuEvidence:
    """A level's GPU figures (NaN where not recorded): utilisation and SM activity as shares
    (0..1, the mean over the window and the GPUs), power in W (summed over the GPUs), and whether
    they came from the simulator."""

    util: float = math.nan
    sm_active: float = math.nan
    power_w: float = math.nan
    simulated: bool = False

    def state(self) -> str:
        """`BUSY`, `IDLE`, `UNCLEAR`, or `UNKNOWN` without utilisation or SM activity."""
        if _known(self.sm_active):
            if self.sm_active >= SM_BUSY:
                return BUSY
            return IDLE if self.sm_active < SM_IDLE else UNCLEAR
        if _known(self.util):
            if self.util >= UTIL_BUSY:
                return BUSY
            return IDLE if self.util < UTIL_IDLE else UNCLEAR
        return UNKNOWN

    def figures(self) -> dict[str, float]:
        """The figures as a verdict's evidence shows them (known ones only)."""
        named = {
            "gpu_util": self.util,
            "gpu_sm_active": self.sm_active,
            "gpu_power_w": self.power_w,
        }
        return {k: v for k, v in named.items() if _known(v)}

    def text(self, below: GpuEvidence | None = None) -> str:
        """The figures in words, from the level below's where it has them ("SM active 91 % →
        93 %, GPU util 99 %"), simulated ones named so; "" without any."""

        def figure(name: str, now: float, then: float) -> str:
            if not _known(now):
                return ""
            before = f"{_pct(then)} → " if _known(then) else ""
            return f"{name} {before}{_pct(now)}"

        base = below if below is not None else GpuEvidence()
        parts = [
            figure("SM active", self.sm_active, base.sm_active),
            figure("GPU util", self.util, base.util),
        ]
        if _known(self.power_w):
            parts.append(f"{self.power_w:,.0f} W")
        shown = ", ".join(p for p in parts if p)
        if not shown:
            return ""
        return f"{shown} ({SIMULATED})" if self.simulated else shown

    def threshold(self) -> str:
        """The rule the state was read by, for a verdict to quote."""
        if _known(self.sm_active):
            return f"busy from {_pct(SM_BUSY)} SM activity, idle below {_pct(SM_IDLE)}"
        return (
            f"busy from {_pct(UTIL_BUSY)} GPU utilisation, idle below {_pct(UTIL_IDLE)}; "
            "SM activity not recorded"
        )


def compute_support(gpu: GpuEvidence, below: GpuEvidence | None) -> str:
    """What the GPUs add to a `compute` verdict ("" without figures)."""
    state, shown = gpu.state(), gpu.text(below)
    if state == BUSY:
        return f"; the GPU was busy: {shown}"
    if state == UNCLEAR:
        return f"; the GPU figures neither confirm nor rule it out ({gpu.threshold()}): {shown}"
    return f"; GPU: {shown}" if shown else ""


def not_compute(gpu: GpuEvidence, below: GpuEvidence | None) -> str:
    """Why an idle GPU rules out `compute` where the batch rule alone would say it."""
    return (
        f", yet the GPU was not busy ({gpu.threshold()}): {gpu.text(below)}. Not compute: the "
        "steps lengthened for work the GPU did not do (the engine's CPU-side scheduling, input "
        "preparation or sampling between kernels, for one), which the evidence does not name"
    )
