"""vLLM's defaults for the scheduler flags `/metrics` does not show (`--max-num-seqs`,
`--max-num-batched-tokens`), for `vllm serve`, by the version and platform a run knows.

Read from vLLM's own `EngineArgs.get_batch_defaults` of the versions listed in `TABLES`; a version
without a table, or a platform the run does not know, gets no default ("default unknown"), never
a guessed number. The platform comes from run.json's meta (`--meta platform=cpu|cuda|rocm`) or
from the GPU models its telemetry recorded. `--performance-mode throughput` doubles both; a server
without chunked prefill raises the budget to `--max-model-len` (neither is read here: give those
flags with `--server-args` where they were used).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BatchDefaults:
    """The two defaults and what they belong to (shown beside them)."""

    max_num_seqs: float
    max_num_batched_tokens: float
    where: str  # "vLLM 0.32.0 on CPU"


def _v032(platform: str, gpu_name: str, world: int) -> tuple[float, float] | None:
    """vLLM 0.32's `get_batch_defaults` for `vllm serve` (OPENAI_API_SERVER)."""
    if platform == "cpu":
        return 128.0 * world, 2048.0 * world
    if platform not in ("cuda", "rocm") or not gpu_name:
        return None
    memory = _gpu_memory_gib(gpu_name)
    if memory is None:
        return None
    if memory >= 160:
        return 1024.0, 16384.0
    if memory >= 70 and "a100" not in gpu_name.lower():
        return 1024.0, 8192.0
    return 256.0, 2048.0


#: (major, minor) -> that version's rule
TABLES = {(0, 32): _v032}

#: GPU model-name fragments -> device memory, GiB (the tiers `get_batch_defaults` compares)
_GPU_MEMORY = (
    ("b300", 288),
    ("b200", 192),
    ("h200", 141),
    ("mi325", 256),
    ("mi300", 192),
    ("h100", 80),
    ("h800", 80),
    ("a100-sxm4-80gb", 80),
    ("a100 80gb", 80),
    ("a100", 40),
    ("l40", 48),
    ("a10", 24),
    ("l4", 24),
    ("t4", 16),
)


def _gpu_memory_gib(name: str) -> float | None:
    low = name.lower()
    return next((float(gib) for part, gib in _GPU_MEMORY if part in low), None)


def _minor(version: str) -> tuple[int, int] | None:
    parts = version.split("+")[0].split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None


def batch_defaults(
    version: str, platform: str, gpu_name: str = "", world_size: int = 1
) -> BatchDefaults | str:
    """vLLM's defaults for this server, or why they are unknown (a sentence)."""
    key = _minor(version or "")
    rule = TABLES.get(key) if key else None
    if rule is None:
        known = ", ".join(f"{a}.{b}" for a, b in TABLES)
        return f"vLLM {version or '(version unknown)'} has no defaults table here (known: {known})"
    platform = (platform or "").lower()
    values = rule(platform, gpu_name, max(1, world_size))
    if values is None:
        gpu = f" (the memory of {gpu_name} is not in the table)" if gpu_name else ""
        return (
            f"vLLM {version}'s defaults depend on the platform and GPU memory, which the run does "
            f"not know{gpu}: --meta platform=cpu|cuda|rocm, or GPU telemetry, names them"
        )
    where = {"cpu": "CPU", "cuda": "CUDA", "rocm": "ROCm"}.get(platform, platform)
    if gpu_name and platform != "cpu":
        where += f", {gpu_name}"
    return BatchDefaults(values[0], values[1], f"vLLM {version} on {where}")
