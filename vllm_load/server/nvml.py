"""GPU telemetry through NVML, where the tester runs on the GPU host (`--gpu-nvml`).

NVIDIA's own Python bindings (`nvidia-ml-py`, imported as `pynvml`; `pip install
'vllm-load[gpu]'`) read the driver's counters directly, under the names dcgm-exporter gives
them (`server.dcgm`), so one run directory file and one analysis serve both:

- `nvmlDeviceGetUtilizationRates().gpu`: % of the last sample period a kernel ran (as DCGM's);
- `nvmlDeviceGetMemoryInfo().used`: bytes, recorded in MiB;
- `nvmlDeviceGetPowerUsage`: mW, recorded in W;
- `nvmlDeviceGetTotalEnergyConsumption`: mJ since the driver loaded (Volta and newer).

NVML has no SM activity outside its GPM interface, so that figure comes only from a DCGM
exporter set up with the profiling fields. A figure a GPU does not support is left out (one
line in run.json says which), never recorded as 0. Opening fails with `NvmlUnavailable` and
one line saying what is missing (the library, the driver, a GPU) and what to do.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from .dcgm import ENERGY, FB_USED, GPU_UTIL, POWER, GpuId, GpuReading

MIB = 1024 * 1024
INSTALL = "pip install 'vllm-load[gpu]' (nvidia-ml-py)"


class NvmlUnavailable(Exception):
    """NVML cannot be used on this machine; the message says why and what to do."""


def _load() -> Any:
    try:
        import pynvml
    except ImportError:
        raise NvmlUnavailable(f"NVML's Python bindings are not installed: {INSTALL}") from None
    return pynvml


#: figure -> (how NVML reads it from a device handle, the factor to the recorded unit)
_READERS: dict[str, tuple[Callable[[Any, Any], float], float]] = {
    GPU_UTIL: (lambda nv, h: nv.nvmlDeviceGetUtilizationRates(h).gpu, 1.0),
    FB_USED: (lambda nv, h: nv.nvmlDeviceGetMemoryInfo(h).used, 1.0 / MIB),
    POWER: (lambda nv, h: nv.nvmlDeviceGetPowerUsage(h), 1e-3),
    ENERGY: (lambda nv, h: nv.nvmlDeviceGetTotalEnergyConsumption(h), 1.0),
}


@dataclass
class NvmlGpus:
    """The GPUs NVML sees on this host (only `indices` when given), read on demand."""

    nvml: Any
    handles: list[tuple[GpuId, Any]]
    models: dict[GpuId, str]
    unsupported: dict[str, str] = field(default_factory=dict)  # figure -> NVML's error

    @classmethod
    def open(cls, indices: Sequence[int] = (), nvml: Any = None) -> "NvmlGpus":
        """Initialise NVML and find the GPUs; `nvml` replaces the `pynvml` module (tests)."""
        nv = nvml if nvml is not None else _load()
        try:
            nv.nvmlInit()
        except nv.NVMLError as e:
            raise NvmlUnavailable(
                f"NVML cannot start ({e}): no NVIDIA driver on this machine? Run the tester on "
                "the GPU host, or scrape a DCGM exporter with --gpu-metrics URL"
            ) from None
        count = nv.nvmlDeviceGetCount()
        wanted = list(indices) or list(range(count))
        missing = [i for i in wanted if not 0 <= i < count]
        if not count or missing:
            nv.nvmlShutdown()
            what = f"no GPU {', '.join(map(str, missing))}" if missing else "no GPU"
            raise NvmlUnavailable(f"NVML sees {count} GPU(s) on this machine: {what}")
        host = socket.gethostname()
        handles, models = [], {}
        for index in wanted:
            handle = nv.nvmlDeviceGetHandleByIndex(index)
            gpu = GpuId(host, str(index), _text(nv.nvmlDeviceGetUUID(handle)))
            handles.append((gpu, handle))
            models[gpu] = _text(nv.nvmlDeviceGetName(handle))
        return cls(nv, handles, models)

    def read(self) -> list[GpuReading]:
        """Every supported figure of every GPU, now."""
        out = []
        for gpu, handle in self.handles:
            for figure, (read, scale) in _READERS.items():
                if figure in self.unsupported:
                    continue
                try:
                    value = float(read(self.nvml, handle)) * scale
                except self.nvml.NVMLError as e:
                    self.unsupported[figure] = str(e)
                    continue
                out.append(GpuReading(gpu, figure, value))
        return out

    def close(self) -> None:
        try:
            self.nvml.nvmlShutdown()
        except self.nvml.NVMLError:
            pass


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
