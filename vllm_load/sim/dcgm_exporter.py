"""The simulator's GPU, served as a DCGM exporter would (`vllm-load sim --dcgm`: `/dcgm/metrics`).

A test of vllm-load's GPU telemetry needs figures that follow the load; these are simulated
from the engine (engine.py), never measured, and say so: the GPU's `modelName` label is
`vllm-load simulated GPU` (`server.dcgm.SIMULATED_MODEL`), which vllm-load records and shows.

- busy: the engine is in a step. `DCGM_FI_DEV_GPU_UTIL` is the busy share of the time since the
  previous reading (DCGM's "last sample period"; a scrape within `MIN_PERIOD` of the previous
  one repeats it), in whole %, as DCGM gives it;
- power: `idle + (max - idle) × busy`, so `DCGM_FI_DEV_POWER_USAGE` is its mean over that period;
- energy: `DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION` integrates that power exactly, at any instant:
  `idle × t + (max - idle) × busy seconds`, in whole mJ since the simulator started;
- memory: `DCGM_FI_DEV_FB_USED` = the weights + the KV pool's share in use (`kv_cache_usage`).
  A real vLLM allocates its whole pool at start-up, so a real GPU's memory stays flat; the
  simulated one follows the blocks in use, so a chart of it moves with the load.

The text is dcgm-exporter's format (etc/default-counters.csv's HELP texts, its label order).
"""

from __future__ import annotations

import socket
import uuid
from typing import Callable

from ..server.dcgm import ENERGY, FB_USED, GPU_UTIL, POWER, SIMULATED_MODEL
from .config import GpuModel

#: where the simulator serves it
DCGM_PATH = "/dcgm/metrics"
#: a scrape sooner than this after the previous one repeats its utilisation and power
MIN_PERIOD = 0.1
FB_FREE = "DCGM_FI_DEV_FB_FREE"
#: (field, Prometheus type, HELP) in the order dcgm-exporter's default counters list them
_FIELDS = (
    (POWER, "gauge", "Power draw (in W)."),
    (ENERGY, "counter", "Total energy consumption since boot (in mJ)."),
    (GPU_UTIL, "gauge", "GPU utilization (in %)."),
    (FB_FREE, "gauge", "Framebuffer memory free (in MiB)."),
    (FB_USED, "gauge", "Framebuffer memory used (in MiB)."),
)


class SimulatedGpu:
    """One GPU whose figures follow an engine: `busy(now)` is its busy seconds so far, `kv_usage()`
    the share of its KV cache in use, `clock()` the time both are read on (the event loop's)."""

    def __init__(
        self,
        model: GpuModel,
        busy: Callable[[float], float],
        kv_usage: Callable[[], float],
        clock: Callable[[], float],
        port: int = 0,
    ) -> None:
        self.model = model
        self.busy = busy
        self.kv_usage = kv_usage
        self.clock = clock
        self.started = clock()
        self.hostname = socket.gethostname()
        self.uuid = f"GPU-{uuid.uuid5(uuid.NAMESPACE_URL, f'vllm-load-sim:{self.hostname}:{port}')}"
        self._last = (self.started, busy(self.started))
        self._util = 0.0

    def energy_mj(self, now: float) -> float:
        """mJ since the simulator started: the power's exact integral."""
        m = self.model
        return 1000.0 * (
            m.idle_watts * (now - self.started) + (m.max_watts - m.idle_watts) * self.busy(now)
        )

    def read(self) -> dict[str, float]:
        """Every field, now."""
        now = self.clock()
        busy = self.busy(now)
        then, busy_then = self._last
        if now - then >= MIN_PERIOD:
            self._util = min(max((busy - busy_then) / (now - then), 0.0), 1.0)
            self._last = (now, busy)
        m = self.model
        pool = m.memory_utilization * m.memory_mib - m.weights_mib
        used = m.weights_mib + self.kv_usage() * pool
        return {
            POWER: m.idle_watts + (m.max_watts - m.idle_watts) * self._util,
            ENERGY: float(int(self.energy_mj(now))),
            GPU_UTIL: float(round(100.0 * self._util)),
            FB_FREE: float(round(m.memory_mib - used)),
            FB_USED: float(round(used)),
        }

    def render(self) -> bytes:
        """The exposition, as dcgm-exporter writes it."""
        labels = (
            f'gpu="0",UUID="{self.uuid}",pci_bus_id="00000000:00:00.0",device="nvidia0",'
            f'modelName="{SIMULATED_MODEL}",Hostname="{self.hostname}",'
            'DCGM_FI_DRIVER_VERSION="vllm-load-sim"'
        )
        values = self.read()
        lines = []
        for name, kind, help_text in _FIELDS:
            value = values[name]
            shown = f"{value:.3f}" if name == POWER else f"{value:.0f}"
            lines += [
                f"# HELP {name} {help_text}",
                f"# TYPE {name} {kind}",
                f"{name}{{{labels}}} {shown}",
            ]
        return ("\n".join(lines) + "\n").encode()
