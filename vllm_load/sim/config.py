"""The simulator's settings: one dataclass per concern, filled from the command line.

Defaults describe an 8B-class model on one large GPU; docs/simulator.md explains why they
make a 2048-in/512-out stepped test saturate between 100 and 200 concurrent requests.
"""

from __future__ import annotations

from dataclasses import dataclass, field

DEFAULT_MODEL = "sim-llama-8b"
IMITATED_VLLM = "0.32.0"  # the vLLM release whose /metrics and /version the simulator answers


@dataclass(frozen=True)
class StepCost:
    """Duration of one engine step, in seconds before --time-scale:

    base + prefill_per_token * prefill tokens in the step + decode_per_seq * decoding sequences
    """

    base: float = 0.010
    prefill_per_token: float = 0.00002
    decode_per_seq: float = 0.00005

    def seconds(self, prefill_tokens: int, decode_seqs: int) -> float:
        return (
            self.base + self.prefill_per_token * prefill_tokens + self.decode_per_seq * decode_seqs
        )


@dataclass(frozen=True)
class Speculation:
    """A draft model proposing `tokens` (K) tokens per decoding sequence per step, verified by
    the target in the same step. `acceptance[i]`: the chance that draft position i is accepted
    given that every position before it was (one value: the same at every position); the first
    rejection ends the draft. A sequence's step yields 1 + accepted tokens (the accepted drafts
    and the target's own next token) and costs `verify_per_token` per draft token verified (the
    target computes it like another decode token) plus `draft_per_token` per token proposed
    (the draft model's own forward; 0 for n-gram lookup). docs/simulator.md has the model."""

    tokens: int = 0  # K; 0: no speculation (no vllm:spec_decode_* metrics either)
    acceptance: tuple[float, ...] = ()
    verify_per_token: float = 0.00005
    draft_per_token: float = 0.0

    @property
    def enabled(self) -> bool:
        return self.tokens > 0

    def seconds(self, draft_tokens: int) -> float:
        """The step's speculation share (before --time-scale): verifying and proposing its
        draft tokens."""
        return (self.verify_per_token + self.draft_per_token) * draft_tokens

    def at(self, position: int) -> float:
        """The acceptance chance of draft position `position` (0-based)."""
        return self.acceptance[min(position, len(self.acceptance) - 1)]


@dataclass(frozen=True)
class Disaggregation:
    """`--disagg`: a prefill instance and a decode instance, each an engine of its own with its
    own /metrics, behind a proxy on --port (disagg_deployment.py). The decode instance reads a request's
    KV blocks from the prefill instance over one link: a transfer takes `seconds_per_block` per
    block (before --time-scale) once the link is free, so transfers queue behind each other."""

    prefill_port: int = 0
    decode_port: int = 0
    seconds_per_block: float = 0.0001  # 2 MiB at ~20 GB/s
    bytes_per_block: int = 2 * 1024 * 1024  # an 8B model's 16 tokens: 128 KiB of K and V each


@dataclass(frozen=True)
class EngineConfig:
    """vLLM's scheduler knobs, with vLLM's names."""

    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    max_model_len: int = 8192
    block_size: int = 16
    num_gpu_blocks: int = 24576  # 393,216 tokens of KV cache: ~153 sequences of 2048+512
    blocks_overridden: bool = False  # given as vLLM's --num-gpu-blocks-override
    cost: StepCost = field(default_factory=StepCost)
    time_scale: float = 1.0
    jitter: float = 0.0  # relative standard deviation of each step's duration
    enable_prefix_caching: bool = True  # vLLM V1's default (see prefix_cache.py)
    speculation: Speculation = field(default_factory=Speculation)

    @property
    def kv_capacity_tokens(self) -> int:
        return self.num_gpu_blocks * self.block_size


@dataclass(frozen=True)
class FixedLatency:
    """Fixed-latency mode: each request alone, first token after `ttft`, then one every `itl`."""

    ttft: float
    itl: float


@dataclass(frozen=True)
class OutputConfig:
    """How long outputs are and how they are streamed."""

    eos_probability: float = (
        0.01  # per generated token, when neither ignore_eos nor min_tokens forbid it
    )
    tokens_per_chunk: int = 1
    seed: int = 0
    tool_call_share: float = 0.5  # of requests offering tools with tool_choice auto: end in a call


REASONING_FIELDS = ("reasoning", "reasoning_content")  # newer vLLM's name, then older vLLM's


@dataclass(frozen=True)
class ReasoningConfig:
    """A reasoning model's chat output: the first `tokens` generated tokens of each chat
    completion are reasoning, streamed in the delta's `field` instead of `content`."""

    tokens: int = 0  # 0: no reasoning (plain content, as before)
    field: str = "reasoning"
    usage: bool = True  # report usage.completion_tokens_details.reasoning_tokens

    @property
    def enabled(self) -> bool:
        return self.tokens > 0


@dataclass(frozen=True)
class FaultConfig:
    """Faults injected into generation requests (all off by default); see vllm_load/sim/faults.py.

    Rates are per request and exclusive (one request gets at most one fault), so they must add
    up to at most 1. Stall and slow-first-token delays are wall-clock seconds, not scaled by
    --time-scale: they exist to trip client timeouts, which are wall-clock too.
    """

    error_rate: float = 0.0
    error_status: int = 500
    reset_rate: float = 0.0
    bad_sse_rate: float = 0.0
    stall_rate: float = 0.0
    stall_seconds: float = 10.0
    slow_first_token_rate: float = 0.0
    slow_first_token_seconds: float = 10.0
    close_after_headers_rate: float = 0.0
    seed: int = 0

    def rates(self) -> dict[str, float]:
        """Fault kind -> rate, in the fixed order a request's draw is matched against."""
        return {
            "error": self.error_rate,
            "reset": self.reset_rate,
            "bad_sse": self.bad_sse_rate,
            "stall": self.stall_rate,
            "slow_first_token": self.slow_first_token_rate,
            "close_after_headers": self.close_after_headers_rate,
        }

    @property
    def enabled(self) -> bool:
        return any(rate > 0 for rate in self.rates().values())


@dataclass(frozen=True)
class GpuModel:
    """The simulated GPU behind `--dcgm` (dcgm_exporter.py): its power at idle and at full utilisation
    (an H100 SXM's 700 W board limit), and its framebuffer as vLLM fills it: the weights, then
    KV blocks in use out of the pool --gpu-memory-utilization leaves them."""

    idle_watts: float = 75.0
    max_watts: float = 700.0
    memory_mib: float = 81559.0  # an H100 80GB's framebuffer, as nvidia-smi reports it
    memory_utilization: float = 0.9  # vLLM's --gpu-memory-utilization default
    weights_mib: float = 16384.0  # an 8B model in bf16, with its activation workspace


@dataclass(frozen=True)
class SimConfig:
    """Everything one simulator process needs."""

    host: str = "127.0.0.1"
    port: int = 8000
    served_model_name: str = DEFAULT_MODEL
    api_key: str | None = None
    tokenizer: str | None = None
    tokenize_endpoint: bool = True
    metrics_endpoint: bool = True
    mode: str = "engine"  # "engine" | "fixed" | "echo"
    engine: EngineConfig = field(default_factory=EngineConfig)
    fixed: FixedLatency | None = None
    output: OutputConfig = field(default_factory=OutputConfig)
    workers: int = 1
    faults: FaultConfig = field(default_factory=FaultConfig)
    trace: str | None = (
        None  # JSON-lines file of when each streamed token was written (sim/trace.py)
    )
    enable_prompt_tokens_details: bool = False  # usage.prompt_tokens_details.cached_tokens
    reasoning: ReasoningConfig = field(default_factory=ReasoningConfig)
    image_tokens: int | None = None  # prompt tokens per image; None: Qwen3-VL's, by its size
    gpu: GpuModel | None = None  # --dcgm: a DCGM-format /dcgm/metrics of a simulated GPU
    disagg: Disaggregation | None = None  # --disagg: a prefill and a decode instance, a proxy
    kv_role: str = ""  # this instance's side of a --disagg deployment: "prefill" or "decode"
