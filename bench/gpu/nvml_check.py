"""Check, on a machine with an NVIDIA GPU, that a real `vllm-load run --gpu-nvml` records NVML
figures and measures them per level (issue 39, "GPU telemetry").

Run from the repository root with the python that should run vllm-load there:

    PYTHON bench/gpu/nvml_check.py [--out DIR] [--no-gpu-load]

It needs nothing from a network. Locust and the rest of the run's dependencies must import; where
they do not (the GPU image of this workplace lacks Locust's stack), it installs the wheels of
bench/gpu/wheels/run (bench/gpu/fetch_wheels.sh downloads them elsewhere) into a temporary folder
with `pip install --no-index --no-deps --target`. NVML's bindings come from the environment, else
from bench/gpu/wheels/nvidia_ml_py-*.whl (pure Python, imported from the wheel itself).

What it does, bounded in time: names the GPUs NVML sees, starts `vllm-load sim` on a free
127.0.0.1 port, starts a matrix-product load on the GPU with PyTorch where PyTorch is there (so
utilisation and power move; the simulator itself uses no GPU), runs `vllm-load run --levels 2,4
--gpu-nvml` against the simulator for a few seconds, and prints the run's GPU figures per level
and how many NVML readings gpu_metrics.csv holds. Exit status 1 when no NVML reading was recorded
or no level has GPU figures; 2 when NVML or the run's dependencies cannot be had.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WHEELS = os.path.join(ROOT, "bench", "gpu", "wheels")
SITE = os.path.join(tempfile.gettempdir(), "vllm-load-gpu-site")
#: a GPU load while the run goes on: bf16 matrix products for at most this many seconds
GPU_LOAD = """
import sys, time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
end = time.time() + float(sys.argv[1])
while time.time() < end:
    for _ in range(20):
        a @ a
    torch.cuda.synchronize()
"""


def _importable(name: str, path: list[str]) -> bool:
    code = f"import {name}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    return (
        subprocess.run([sys.executable, "-c", code], env=env, capture_output=True).returncode == 0
    )


def python_path() -> list[str]:
    """The PYTHONPATH every process of the check gets: this checkout first, then what it lacks."""
    path = [ROOT, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    if not _importable("locust", path):
        wheels = sorted(glob.glob(os.path.join(WHEELS, "run", "*.whl")))
        if not wheels:
            sys.exit(
                "nvml_check: Locust is not importable and bench/gpu/wheels/run holds no wheels: "
                "run bench/gpu/fetch_wheels.sh where pip reaches PyPI, and carry that folder"
            )
        print(f"installing {len(wheels)} wheels from bench/gpu/wheels/run into {SITE}", flush=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps"]
            + ["--no-compile", "--no-cache-dir", "--upgrade", "--target", SITE, *wheels],
            check=True,
        )
        path.insert(1, SITE)
    if not _importable("pynvml", path):
        path += sorted(glob.glob(os.path.join(WHEELS, "nvidia_ml_py-*.whl")))[-1:]
    for name in ("locust", "pynvml", "pandas", "aiohttp", "orjson"):
        if not _importable(name, path):
            sys.exit(f"nvml_check: {name} is not importable with {sys.executable}")
    return path


def start_gpu_load(seconds: float, env: dict) -> subprocess.Popen | None:
    """Matrix products on the GPU for at most `seconds`, where PyTorch sees a GPU."""
    probe = "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"
    if subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True).returncode:
        print("no GPU load: PyTorch with CUDA is not importable (utilisation will read idle)")
        return None
    return subprocess.Popen([sys.executable, "-c", GPU_LOAD, str(seconds)], env=env)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out", default="", help="where its report, run.json and gpu_metrics.csv are copied"
    )
    parser.add_argument("--no-gpu-load", action="store_true", help="leave the GPU idle")
    args = parser.parse_args()
    path = python_path()
    sys.path[:0] = path
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path), "PYTHONUNBUFFERED": "1"}

    from vllm_load.server.nvml import NvmlGpus, NvmlUnavailable
    from vllm_load.sim.child import SimulatorProcess

    try:
        gpus = NvmlGpus.open()
    except NvmlUnavailable as e:
        print(f"nvml_check: {e}", file=sys.stderr)
        return 2
    for gpu, model in gpus.models.items():
        print(f"NVML: GPU {gpu.gpu} {model} ({gpu.uuid}) on {gpu.hostname}")
    first = {r.figure: r.value for r in gpus.read()}
    print(f"NVML now: {first}; not supported: {gpus.unsupported or 'none'}")
    gpus.close()

    runs = tempfile.mkdtemp(prefix="vllm-load-nvml-")
    os.environ.update(env)  # the simulator process too
    load = None if args.no_gpu_load else start_gpu_load(90.0, env)
    started = time.time()
    try:
        with SimulatorProcess("--time-scale", "0.2", "--max-num-seqs", "8") as sim:
            cmd = [sys.executable, "-m", "vllm_load", "run", "--host", sim.url, "--levels", "2,4"]
            cmd += ["--input-tokens", "64", "--output-tokens", "64", "--requests-per-level", "60"]
            cmd += ["--warmup-requests", "4", "--metrics-interval", "0.25", "--gpu-nvml"]
            cmd += ["--out", runs, "--level-time-cap", "60"]
            run = subprocess.run(cmd, env=env, timeout=240, capture_output=True, text=True)
            print(run.stdout[-3000:])
            if run.returncode:
                print(run.stderr[-3000:], file=sys.stderr)
                print(f"nvml_check: vllm-load run exited {run.returncode}", file=sys.stderr)
                return 1
    finally:
        if load is not None:
            load.terminate()
            load.wait(timeout=30)
    print(f"run took {time.time() - started:.0f} s")
    return report(runs, args.out or runs)


def report(runs: str, out: str) -> int:
    """Print the run's GPU figures per level; 1 when NVML recorded nothing or the report failed."""
    from vllm_load.analysis.levels.gpu import with_gpu
    from vllm_load.analysis.levels.measure import measure_levels
    from vllm_load.run_format.load import load_run

    run_dir = sorted(glob.glob(os.path.join(runs, "*", "*")))[-1]
    data = load_run(run_dir)
    rows = 0 if data.gpu is None else int((data.gpu["source"] == "nvml").sum())
    print(f"run directory: {run_dir}; gpu_metrics.csv: {rows} NVML readings")
    for source in (data.run.get("gpu_metrics") or {}).get("sources") or []:
        print(f"source {source['source']}: {source['samples']} samples, {source['errors']} errors")
        print(f"  GPUs: {source['gpus']}; not supported: {source['unsupported'] or 'none'}")
    metrics = with_gpu(measure_levels(data.requests, data.steps).metrics, data.gpu)
    shown = ["users", "window_s", "output_tok_per_s", "gpu_util_mean", "gpu_memory_used_max"]
    shown += ["gpu_power_mean", "gpu_energy_j", "gpu_j_per_output_token", "gpu_j_per_request"]
    print(metrics[shown].to_string(index=False))
    written = subprocess.run(
        [sys.executable, "-m", "vllm_load", "report", run_dir, "-o", os.path.join(out, "report")]
        + ["--quiet"],
        check=False,
    )
    os.makedirs(out, exist_ok=True)
    for name in ("run.json", "gpu_metrics.csv"):
        if os.path.exists(os.path.join(run_dir, name)):
            shutil.copy(os.path.join(run_dir, name), out)
    if not rows or not metrics["gpu_power_mean"].notna().any():
        print("nvml_check: FAILED: no NVML figures in the run", file=sys.stderr)
        return 1
    if written.returncode != 0:
        print("nvml_check: FAILED: the report of the run was not written", file=sys.stderr)
        return 1
    print("nvml_check: OK: NVML figures recorded and measured per level")
    return 0


if __name__ == "__main__":
    sys.exit(main())
