"""What a command that starts a run checks on this machine before Locust starts: the files its
options name can be read (--tokenizer, --dataset), its run directory can be written, the GPU
telemetry it asks for can be read (--gpu-metrics, --gpu-nvml) and --prometheus's and the web
UI's ports are free.
Each failure is one line (a `SettingsError`) instead of a traceback, or a Locust that starts,
fails and prints its whole summary."""

from __future__ import annotations

import os

from ..client.replay_share import trace_segment
from ..settings import Settings
from ..sim.child import listen_refusal
from ..tokenization.choose import load_tokenizer
from ..user_values import SettingsError, writable_directory
from ..workload.datasets import dataset_path, load_dataset
from ..workload.traces import Trace


def check_input_files(settings: Settings) -> Trace | None:
    """Refuse, in one line, a --tokenizer, --dataset or --trace that cannot be used; the
    --trace segment read (the target's context is checked against it next)."""
    if settings.tokenizer:
        try:
            load_tokenizer(settings.tokenizer)
        except ValueError as e:  # missing, empty or broken: the message says which
            raise SettingsError(f"--tokenizer: {e}") from None
    if settings.dataset:
        try:
            load_dataset(dataset_path(settings.dataset))
        except SettingsError as e:
            raise SettingsError(f"--dataset: {e} (docs/workload.md gives the formats)") from None
    if settings.trace:
        return trace_segment(settings)  # a malformed line: its file and line, before any load
    return None


def check_writable(settings: Settings) -> None:
    """Refuse, in one line, a place for run directories that cannot be written: --out (where
    headless runs and a web UI's tests make theirs), or the folder of --run-dir."""
    if settings.run_dir:
        parent = os.path.dirname(os.path.abspath(settings.run_dir))
        writable_directory(parent, f"--run-dir {settings.run_dir}")
    else:
        writable_directory(settings.out, f"--out {settings.out}")


def check_gpu_sources(settings: Settings) -> None:
    """Refuse, in one line, a --gpu-metrics URL or a --gpu-nvml that cannot be read now: the
    user asked for GPU figures, and a run without them would not say what was asked."""
    if settings.gpu_metrics or settings.gpu_nvml:
        from ..run.gpu_scraper import GpuTelemetry  # at call time: NVML only when asked

        GpuTelemetry.open(settings).close()


def check_prometheus_port(settings: Settings) -> None:
    """Refuse, in one line, a --prometheus address that cannot be listened on now (a port in
    use): the Locust process binds it again when its run starts, before any file."""
    if settings.prometheus:
        from ..run.prometheus_export import listen_socket  # at call time: no Locust here

        listen_socket(settings.prometheus).close()


def check_web_port(host: str, port: int) -> None:
    """Refuse, in one line, a web UI address that cannot be listened on now: Locust binds it in
    its own process, after the target's checks, and printed a traceback and exited 2 where
    something listened there already."""
    refusal = listen_refusal("" if host in ("", "*") else host, port, "--web-port", "--web-host")
    if refusal:
        raise SettingsError(f"the web UI: {refusal}")
