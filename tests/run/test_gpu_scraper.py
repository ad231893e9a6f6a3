"""GPU telemetry's sources: dcgm-exporter's text parsed per GPU (`server.dcgm`), NVML read in the
recorded units (`server.nvml`), and the scraper that writes gpu_metrics.csv (`run.gpu_scraper`).

tests/data/dcgm_exporter_2xh100.txt is the text dcgm-exporter's template
(internal/pkg/rendermetrics/render_metrics.go) writes for its default counters plus the
profiling fields on a two-GPU node: its HELP and TYPE lines, its label set (gpu, UUID,
pci_bus_id, device, modelName, Hostname, the driver version, the pod attributes) and DCGM's blank
values; the numbers are made up (a busy GPU 0, an idle GPU 1)."""

from __future__ import annotations

import csv
import http.server
import os
import sys
import threading
import types
from types import SimpleNamespace

import pytest
from support import DATA

from vllm_load.run.gpu_scraper import DcgmSource, GpuTelemetry, NvmlSource
from vllm_load.run_format.gpu_metrics import HEADER, read_gpu_metrics, simulated, source_line
from vllm_load.server.dcgm import (
    ENERGY,
    FB_USED,
    GPU_UTIL,
    POWER,
    SM_ACTIVE,
    GpuId,
    parse_dcgm,
)
from vllm_load.user_values import SettingsError

with open(os.path.join(DATA, "dcgm_exporter_2xh100.txt"), encoding="utf-8") as _fh:
    DCGM_TEXT = _fh.read()
GPU0 = GpuId("gpu-node-7", "0", "GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52")
GPU1 = GpuId("gpu-node-7", "1", "GPU-1e5b8c42-7a91-4f0e-b2d3-5c6a7e8f9a0b")


def _by_gpu(readings) -> dict:
    return {(r.gpu, r.figure): r.value for r in readings}


def test_a_dcgm_exporter_text_gives_each_gpus_figures_in_its_units():
    scrape = parse_dcgm(DCGM_TEXT)
    values = _by_gpu(scrape.readings)
    assert values[(GPU0, GPU_UTIL)] == 97 and values[(GPU1, GPU_UTIL)] == 0
    assert values[(GPU0, POWER)] == 612.345 and values[(GPU1, POWER)] == 71.122
    assert values[(GPU0, FB_USED)] == 74494
    # the counter by its family name: prometheus-client names its sample ..._total, dcgm does not
    assert values[(GPU0, ENERGY)] == 3207411846 and values[(GPU1, ENERGY)] == 1885520344
    assert values[(GPU0, SM_ACTIVE)] == pytest.approx(0.873906)
    # GPU 1's SM activity is DCGM's blank (not supported): no reading, not a huge ratio
    assert (GPU1, SM_ACTIVE) not in values
    # only the five fields read (clocks, temperatures, its blank memory temperature are not)
    assert {f for _, f in values} == {GPU_UTIL, SM_ACTIVE, FB_USED, POWER, ENERGY}
    assert scrape.models == {GPU0: "NVIDIA H100 80GB HBM3", GPU1: "NVIDIA H100 80GB HBM3"}
    assert not scrape.simulated


def test_the_newer_hostname_label_and_a_mig_instance_name_their_gpu():
    text = (
        "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n"
        "# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"
        'DCGM_FI_DEV_GPU_UTIL{gpu="3",UUID="GPU-a",pci_bus_id="",device="nvidia3",'
        'modelName="NVIDIA H100 80GB HBM3",GPU_I_PROFILE="1g.10gb",GPU_I_ID="9",'
        'hostname="node-b"} 40\n'
    )
    (reading,) = parse_dcgm(text).readings
    assert reading.gpu == GpuId("node-b", "3/9", "GPU-a") and reading.value == 40


def test_text_that_is_not_prometheus_is_refused():
    with pytest.raises(ValueError):
        parse_dcgm("DCGM_FI_DEV_GPU_UTIL{gpu=0 97\n")


class _Exporter(http.server.BaseHTTPRequestHandler):
    body = DCGM_TEXT.encode()

    def do_GET(self):  # noqa: N802 (http.server's name)
        status = 200 if self.path == "/metrics" else 404
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.end_headers()
        self.wfile.write(self.body if status == 200 else b"")

    def log_message(self, *args):
        pass


@pytest.fixture
def exporter():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Exporter)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _settings(**given) -> SimpleNamespace:
    base = {"metrics_interval": 0.05, "gpu_metrics": [], "gpu_nvml": False, "gpu_ids": []}
    return SimpleNamespace(**{**base, **given})


def test_a_source_reads_only_the_gpus_asked_for(exporter):
    source = DcgmSource(exporter + "/metrics", [1], timeout=5.0)
    at, readings = source.read()
    assert {r.gpu for r in readings} == {GPU1}
    assert [g["gpu"] for g in source.status.gpus] == ["1"]
    assert source.status.gpus[0]["model_name"] == "NVIDIA H100 80GB HBM3"


def test_a_source_that_cannot_be_read_refuses_the_run_in_one_line(exporter):
    with pytest.raises(SettingsError, match=r"HTTP 404.*running dcgm-exporter") as refused:
        GpuTelemetry.open(_settings(gpu_metrics=[exporter + "/nothing"]))
    assert "\n" not in str(refused.value)
    with pytest.raises(SettingsError, match="Connection refused"):
        GpuTelemetry.open(_settings(gpu_metrics=["http://127.0.0.1:9/metrics"]))
    # the vLLM server's own /metrics is not a DCGM exporter's
    with open(os.path.join(DATA, "vllm_0.32.0_cpu_metrics.txt"), "rb") as fh:
        _Exporter.body = fh.read()
    try:
        with pytest.raises(SettingsError, match="none of DCGM's GPU fields"):
            GpuTelemetry.open(_settings(gpu_metrics=[exporter + "/metrics"]))
    finally:
        _Exporter.body = DCGM_TEXT.encode()


def test_the_scraper_writes_every_reading_and_records_its_sources(exporter, tmp_path):
    telemetry = GpuTelemetry.open(_settings(gpu_metrics=[exporter + "/metrics"]))
    telemetry.path = str(tmp_path / "gpu_metrics.csv")
    slept = []

    def sleep(seconds):  # three intervals, then the stop: one last reading after it
        slept.append(seconds)
        if len(slept) == 3:
            telemetry.end()

    telemetry.run(sleep)
    run_info: dict = {}
    telemetry.stop(run_info)
    with open(telemetry.path, newline="") as fh:
        rows = list(csv.reader(fh))
    assert tuple(rows[0]) == HEADER and slept == [0.05] * 3
    # 4 readings of 2 GPUs: 5 figures for GPU 0, 4 for GPU 1 (no SM activity)
    assert len(rows) - 1 == 4 * 9
    (source,) = run_info["gpu_metrics"]["sources"]
    assert source["samples"] == 4 and source["errors"] == 0 and not source["simulated"]
    assert [g["uuid"] for g in source["gpus"]] == [GPU0.uuid, GPU1.uuid]
    frame = read_gpu_metrics(str(tmp_path)).frame
    gpu0 = frame[(frame["gpu"] == "0") & (frame["figure"] == ENERGY)]
    assert (gpu0["value"] == 3207411846).all() and gpu0["ts"].is_monotonic_increasing
    record = {"gpu_metrics": run_info["gpu_metrics"]}
    assert not simulated(record)
    assert source_line(record).startswith("GPU figures measured: from http://127.0.0.1:")


def _fake_nvml(unsupported: tuple[str, ...] = (), init_error: str = "") -> types.ModuleType:
    """A stand-in for `pynvml` with NVML's units: mW, bytes, mJ."""
    nv = types.ModuleType("pynvml")

    class NVMLError(Exception):
        pass

    def maybe(name, value):
        def read(handle):
            if name in unsupported:
                raise NVMLError("Not Supported")
            return value(handle)

        return read

    def init():
        if init_error:
            raise NVMLError(init_error)

    nv.NVMLError = NVMLError
    nv.nvmlInit = init
    nv.nvmlShutdown = lambda: None
    nv.nvmlDeviceGetCount = lambda: 2
    nv.nvmlDeviceGetHandleByIndex = lambda i: i
    nv.nvmlDeviceGetUUID = lambda h: f"GPU-{h}"
    nv.nvmlDeviceGetName = lambda h: b"NVIDIA H200"
    nv.nvmlDeviceGetUtilizationRates = maybe("util", lambda h: SimpleNamespace(gpu=50 + h))
    nv.nvmlDeviceGetMemoryInfo = maybe("mem", lambda h: SimpleNamespace(used=3 * 1024**3))
    nv.nvmlDeviceGetPowerUsage = maybe("power", lambda h: 250500)
    nv.nvmlDeviceGetTotalEnergyConsumption = maybe("energy", lambda h: 123456789)
    return nv


def test_nvml_readings_are_recorded_in_dcgms_units():
    source = NvmlSource([1], _fake_nvml())
    _at, readings = source.read()
    values = {r.figure: r.value for r in readings}
    assert {r.gpu.gpu for r in readings} == {"1"}
    assert values == {GPU_UTIL: 51.0, FB_USED: 3072.0, POWER: 250.5, ENERGY: 123456789.0}
    assert source.status.gpus[0]["model_name"] == "NVIDIA H200"


def test_a_figure_nvml_does_not_support_is_left_out_and_said():
    source = NvmlSource([], _fake_nvml(unsupported=("energy",)))
    _at, readings = source.read()
    assert ENERGY not in {r.figure for r in readings} and len(readings) == 2 * 3
    assert source.status.unsupported == {ENERGY: "Not Supported"}


def test_gpu_nvml_asked_for_without_bindings_or_driver_refuses_the_run_in_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # the bindings are not installed
    with pytest.raises(SettingsError, match=r"--gpu-nvml: .*pip install 'vllm-load\[gpu\]'"):
        GpuTelemetry.open(_settings(gpu_nvml=True))
    with pytest.raises(SettingsError, match=r"--gpu-nvml: NVML cannot start \(Driver Not Loaded\)"):
        GpuTelemetry.open(_settings(gpu_nvml=True), _fake_nvml(init_error="Driver Not Loaded"))
    with pytest.raises(SettingsError, match="NVML sees 2 GPU.*no GPU 5"):
        GpuTelemetry.open(_settings(gpu_nvml=True, gpu_ids=[5]), _fake_nvml())


def test_without_gpu_options_nothing_is_opened_or_recorded(tmp_path):
    telemetry = GpuTelemetry.open(_settings())
    telemetry.start(str(tmp_path))
    run_info: dict = {}
    telemetry.stop(run_info)
    assert run_info == {} and not os.listdir(tmp_path)
