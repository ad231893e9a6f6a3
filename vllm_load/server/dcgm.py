"""GPU telemetry from NVIDIA's DCGM exporter: its `/metrics` (Prometheus text) read per GPU.

dcgm-exporter (github.com/NVIDIA/dcgm-exporter) writes one sample per GPU and field, labelled
`gpu` (the index), `UUID`, `pci_bus_id`, `device`, `modelName`, `Hostname` (`hostname` since
its May 2026 release; both are read), `GPU_I_ID` for a MIG instance, and whatever else it is
told to add (driver version, pod). The fields read here are those of its default counters
(etc/default-counters.csv) that say how busy a GPU is and what it costs, plus SM activity where
the exporter is configured with the profiling fields (it is not among the defaults):

- `DCGM_FI_DEV_GPU_UTIL`: % of the last sample period in which a kernel ran;
- `DCGM_FI_PROF_SM_ACTIVE`: the share of cycles an SM had a warp assigned (0..1);
- `DCGM_FI_DEV_FB_USED`: framebuffer memory used, MiB;
- `DCGM_FI_DEV_POWER_USAGE`: power draw, W;
- `DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`: energy since boot, mJ (a counter).

NVML (`server.nvml`) gives the same figures under the same names. A value DCGM marks blank
(its sentinels: not found, not supported, no permission) is no reading. The simulator's
DCGM-format endpoint (`vllm-load sim --dcgm`) labels its GPU `modelName="vllm-load simulated GPU"`,
so its figures are known to be simulated wherever they are recorded.
"""

from __future__ import annotations

from dataclasses import dataclass

GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
SM_ACTIVE = "DCGM_FI_PROF_SM_ACTIVE"
FB_USED = "DCGM_FI_DEV_FB_USED"
POWER = "DCGM_FI_DEV_POWER_USAGE"
ENERGY = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
#: the fields read, with their units
FIGURES: dict[str, str] = {
    GPU_UTIL: "%",
    SM_ACTIVE: "ratio",
    FB_USED: "MiB",
    POWER: "W",
    ENERGY: "mJ",
}
#: the `modelName` of the simulator's GPU: its figures are simulated
SIMULATED_MODEL = "vllm-load simulated GPU"
# DCGM's blank values (dcgm_structs.h): DCGM_INT32_BLANK and DCGM_FP64_BLANK, each followed by
# its "not found", "not supported" and "no permission" codes. No utilisation, MiB or W reaches
# the first; the energy counter (int64 mJ) is read blank from the second (140 GJ: a 700 W GPU
# reaches it after six years of full power since boot).
_INT32_BLANK = 0x7FFFFFF0
_FP64_BLANK = 140737488355328.0


@dataclass(frozen=True)
class GpuId:
    """One GPU as its exporter names it: host, index (`0`, or `0/3` for MIG instance 3), UUID."""

    hostname: str
    gpu: str
    uuid: str


@dataclass(frozen=True)
class GpuReading:
    """One figure of one GPU at one scrape."""

    gpu: GpuId
    figure: str
    value: float


def is_blank(figure: str, value: float) -> bool:
    """Whether DCGM marked the value blank (or it is no number)."""
    if value != value:
        return True
    return value >= (_FP64_BLANK if figure == ENERGY else _INT32_BLANK)


def gpu_of(labels: dict[str, str]) -> GpuId:
    """The GPU a dcgm-exporter sample is about, from its labels."""
    index = labels.get("gpu", "")
    instance = labels.get("GPU_I_ID", "")
    return GpuId(
        labels.get("Hostname") or labels.get("hostname") or "",
        f"{index}/{instance}" if instance else index,
        labels.get("UUID", ""),
    )


@dataclass(frozen=True)
class DcgmScrape:
    """What one exposition holds: the readings of `FIGURES`, and each GPU's model name."""

    readings: list[GpuReading]
    models: dict[GpuId, str]

    @property
    def simulated(self) -> bool:
        return bool(self.models) and all(m == SIMULATED_MODEL for m in self.models.values())


def parse_dcgm(text: str) -> DcgmScrape:
    """The `FIGURES` of every GPU in a dcgm-exporter exposition. ValueError when it is not
    Prometheus text. Families are matched by name: prometheus-client's parser names a counter's
    samples `<name>_total`, which dcgm-exporter's counters are not."""
    # at call time: the commands that only name these fields (`sim`'s parser) stay light
    from prometheus_client.parser import text_string_to_metric_families

    readings: list[GpuReading] = []
    models: dict[GpuId, str] = {}
    for family in text_string_to_metric_families(text):
        if family.name not in FIGURES:
            continue
        for sample in family.samples:
            gpu = gpu_of(sample.labels)
            models.setdefault(gpu, sample.labels.get("modelName", ""))
            value = float(sample.value)
            if not is_blank(family.name, value):
                readings.append(GpuReading(gpu, family.name, value))
    return DcgmScrape(readings, models)
