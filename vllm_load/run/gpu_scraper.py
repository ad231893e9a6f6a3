"""Recording the GPUs' own figures during a run into gpu_metrics.csv (`run_format.gpu_metrics`):
every `--gpu-metrics URL` (a DCGM exporter's /metrics, `server.dcgm`) and, with `--gpu-nvml`,
NVML on this host (`server.nvml`), read every `--metrics-interval` seconds (1 s when that is 0,
which turns off only the server's /metrics).

The user asked for each source, so one that cannot be read when the run starts refuses the run
with one line (`GpuTelemetry.open`, which `vllm-load run` also calls before starting Locust);
one that fails later is counted and noted in run.json's `gpu_metrics`, and the run goes on.
Named apart from `server_metrics` on purpose: that is the target's own vLLM /metrics.
"""

from __future__ import annotations

import csv
import logging
import os
import time
import urllib.error
import urllib.request
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence

from ..run_format.files import GPU_METRICS_CSV
from ..run_format.gpu_metrics import HEADER
from ..server.dcgm import FIGURES, SIMULATED_MODEL, GpuId, GpuReading, parse_dcgm
from ..server.nvml import NvmlGpus, NvmlUnavailable
from ..user_values import SettingsError

logger = logging.getLogger("vllm_load")

NVML = "nvml"
#: the last reads kept in memory for the live verdict (`live_verdict`), as many as the scraper's
RECENT = 900

#: one GPU's identity across sources (`analysis.levels.gpu.gpu_series`: its UUID where it has one)
GpuKey = tuple[str, ...]
#: one read of one source: its time, and per GPU its figures (`GpuReading`'s)
GpuSample = tuple[float, dict[GpuKey, dict[str, float]]]


@dataclass
class SourceStatus:
    """How one source went, recorded in run.json's `gpu_metrics.sources`."""

    source: str  # the exporter's URL, or "nvml"
    kind: str  # "dcgm" or "nvml"
    samples: int = 0
    errors: int = 0
    note: str = ""
    gpus: list[dict] = field(default_factory=list)  # hostname, gpu, uuid, model_name
    simulated: bool = False  # every GPU is the simulator's (`vllm-load sim --dcgm`)
    unsupported: dict[str, str] = field(default_factory=dict)  # figure -> why it is missing

    def found(self, models: dict[GpuId, str]) -> None:
        known = {(g["hostname"], g["gpu"]) for g in self.gpus}
        for gpu, model in models.items():
            if (gpu.hostname, gpu.gpu) not in known:
                self.gpus.append({**asdict(gpu), "model_name": model})
        self.simulated = bool(self.gpus) and all(
            g["model_name"] == SIMULATED_MODEL for g in self.gpus
        )


def _wanted(gpu: GpuId, indices: Sequence[int]) -> bool:
    return not indices or gpu.gpu.split("/")[0] in {str(i) for i in indices}


class DcgmSource:
    """One DCGM exporter's /metrics, fetched and parsed; only the GPUs of `indices` when given."""

    def __init__(self, url: str, indices: Sequence[int], timeout: float) -> None:
        self.status = SourceStatus(url, "dcgm")
        self.indices = indices
        self.timeout = timeout

    def read(self) -> tuple[float, list[GpuReading]] | None:
        """(when, readings) of one scrape, dated halfway through it; None (noted) on failure."""
        url = self.status.source
        sent = time.time()
        try:
            with urllib.request.urlopen(url, timeout=self.timeout) as resp:
                text = resp.read().decode("utf-8", "replace")
            scrape = parse_dcgm(text)
        except urllib.error.HTTPError as e:
            self._failed(f"{url} answered HTTP {e.code}")
            return None
        except (OSError, urllib.error.URLError) as e:
            self._failed(f"{url}: {e}")
            return None
        except ValueError as e:
            self._failed(f"{url}: not Prometheus text ({e})")
            return None
        at = (sent + time.time()) / 2
        readings = [r for r in scrape.readings if _wanted(r.gpu, self.indices)]
        if not readings:
            fields = ", ".join(FIGURES)
            self._failed(f"{url} holds none of DCGM's GPU fields ({fields}) for the GPUs asked")
            return None
        self.status.found({g: m for g, m in scrape.models.items() if _wanted(g, self.indices)})
        return at, readings

    def _failed(self, note: str) -> None:
        """Count a failed read and say why (run.json's note)."""
        self.status.errors += 1
        self.status.note = note

    def close(self) -> None:
        pass


class NvmlSource:
    """NVML on this host."""

    def __init__(self, indices: Sequence[int], nvml: Any = None) -> None:
        try:
            self.gpus = NvmlGpus.open(indices, nvml)
        except NvmlUnavailable as e:
            raise SettingsError(f"--gpu-nvml: {e}") from None
        self.status = SourceStatus(NVML, "nvml")
        self.status.found(self.gpus.models)

    def read(self) -> tuple[float, list[GpuReading]] | None:
        sent = time.time()
        readings = self.gpus.read()
        self.status.unsupported = dict(self.gpus.unsupported)
        return (sent + time.time()) / 2, readings

    def close(self) -> None:
        self.gpus.close()


class GpuTelemetry:
    """The run's GPU sources and the loop that records them (no sources: does nothing)."""

    def __init__(self, sources: Sequence[DcgmSource | NvmlSource], interval: float) -> None:
        self.sources = list(sources)
        self.interval = interval
        self.path = ""
        self._stopped = False
        self._greenlet: Any = None
        #: the last reads, as written, for the live verdict
        self.recent: deque[GpuSample] = deque(maxlen=RECENT)

    @classmethod
    def open(cls, settings: Any, nvml: Any = None) -> "GpuTelemetry":
        """The sources `settings` asks for, each read once: SettingsError (one line) for one
        that cannot be, before anything is recorded."""
        interval = settings.metrics_interval or 1.0
        indices = settings.gpu_ids
        sources: list[DcgmSource | NvmlSource] = [
            DcgmSource(url, indices, max(interval * 5, 5.0)) for url in settings.gpu_metrics
        ]
        if settings.gpu_nvml:
            sources.append(NvmlSource(indices, nvml))
        telemetry = cls(sources, interval)
        for source in telemetry.sources:
            if source.read() is None:
                telemetry.close()
                raise SettingsError(
                    f"--gpu-metrics: {source.status.note}: give the /metrics URL of a running "
                    "dcgm-exporter (e.g. http://GPU-HOST:9400/metrics), or leave the option out"
                )
            source.status.errors = 0
        return telemetry

    def start(self, run_dir: str) -> None:
        """Record into the run directory from now on, in a greenlet (the Locust master's)."""
        if not self.sources:
            return
        import gevent  # at call time: `vllm-load run`'s own check opens sources without it

        self.path = os.path.join(run_dir, GPU_METRICS_CSV)
        self._greenlet = gevent.spawn(self.run, gevent.sleep)

    def run(self, sleep: Callable[[float], Any] = time.sleep) -> None:
        """Read every source every interval until `stop()`, then once more, appending rows."""
        with open(self.path, "w", newline="", encoding="utf-8") as fh:
            writer = csv.writer(fh)
            writer.writerow(HEADER)
            while True:
                last = self._stopped
                for source in self.sources:
                    taken = source.read()
                    if taken is None:
                        continue
                    at, readings = taken
                    writer.writerows(
                        (
                            f"{at:.4f}",
                            source.status.source,
                            *_gpu_cells(r.gpu),
                            r.figure,
                            repr(r.value),
                        )
                        for r in readings
                    )
                    source.status.samples += 1
                    self.recent.append((at, _by_gpu(source.status.source, readings)))
                fh.flush()
                if last:
                    return
                sleep(self.interval)

    @property
    def simulated(self) -> bool:
        """Every source's GPUs are the simulator's (a verdict quoting them says so)."""
        return bool(self.sources) and all(s.status.simulated for s in self.sources)

    def end(self) -> None:
        """The loop's next readings are its last."""
        self._stopped = True

    def stop(self, run_info: dict) -> None:
        """Take the last readings and record how each source went in `run_info` (run.json)."""
        if not self.sources:
            return
        self.end()
        if self._greenlet is not None:
            self._greenlet.join(timeout=self.interval + 10)
            self._greenlet.kill(block=False)
        self.close()
        run_info["gpu_metrics"] = {
            "interval": self.interval,
            "sources": [asdict(s.status) for s in self.sources],
        }
        for s in self.sources:
            if s.status.errors:
                logger.warning(
                    "GPU metrics: %d failed read(s) of %s", s.status.errors, s.status.source
                )

    def close(self) -> None:
        for source in self.sources:
            source.close()


def _gpu_cells(gpu: GpuId) -> tuple[str, str, str]:
    return gpu.hostname, gpu.gpu, gpu.uuid


def _by_gpu(source: str, readings: Sequence[GpuReading]) -> dict[GpuKey, dict[str, float]]:
    out: dict[GpuKey, dict[str, float]] = {}
    for r in readings:
        key = (r.gpu.uuid,) if r.gpu.uuid else (source, r.gpu.hostname, r.gpu.gpu)
        out.setdefault(key, {})[r.figure] = r.value
    return out
