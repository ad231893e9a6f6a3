"""`vllm-load sim`: serve the simulated vLLM OpenAI server.

aiohttp and the server modules are imported inside `main`, so `vllm-load --help` stays light and
a process that imported Locust (gevent) never pulls asyncio servers in by accident. Most of its
length is the 40 options, each declared with its help, and their checks: one place, on purpose.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time

from ..parent_death import die_with_parent
from ..tokenization.choose import load_tokenizer
from ..user_values import SettingsError, port_argument
from .child import listen_refusal
from .config import (
    DEFAULT_MODEL,
    REASONING_FIELDS,
    Disaggregation,
    EngineConfig,
    FaultConfig,
    FixedLatency,
    GpuModel,
    OutputConfig,
    ReasoningConfig,
    SimConfig,
    Speculation,
    StepCost,
)
from .dcgm_exporter import DCGM_PATH

_E = EngineConfig()
_C = StepCost()
_O = OutputConfig()
_F = FaultConfig()
_G = GpuModel()
_S = Speculation()
_D = Disaggregation()
ERROR_STATUSES = (500, 503, 429)


def configure_parser(parser: argparse.ArgumentParser, name: str) -> None:
    parser.formatter_class = argparse.ArgumentDefaultsHelpFormatter
    parser.epilog = "docs/simulator.md describes the engine model, the tokenizer and every option."
    srv = parser.add_argument_group("server")
    srv.add_argument(
        "--host", default="127.0.0.1", help="address to bind (use 0.0.0.0 to serve other machines)"
    )
    srv.add_argument("--port", type=port_argument, default=8000, help="TCP port")
    srv.add_argument(
        "--server-workers",
        type=int,
        default=1,
        help="server processes sharing the port through SO_REUSEPORT (each has its own engine)",
    )
    srv.add_argument(
        "--api-key",
        default=None,
        help="require `Authorization: Bearer KEY` on /v1/* (401 otherwise)",
    )
    srv.add_argument(
        "--enable-prompt-tokens-details",
        action="store_true",
        help="report usage.prompt_tokens_details.cached_tokens (when some were cached), as vLLM does",
    )
    srv.add_argument(
        "--no-tokenize-endpoint",
        action="store_true",
        help="serve no /tokenize and /detokenize (404), like a server without them",
    )
    srv.add_argument(
        "--no-metrics-endpoint",
        action="store_true",
        help="serve no /metrics (404), like a server that does not expose Prometheus metrics",
    )
    model = parser.add_argument_group("model")
    model.add_argument(
        "--served-model-name", default=DEFAULT_MODEL, help="model id in /v1/models and responses"
    )
    model.add_argument(
        "--tokenizer",
        default=None,
        metavar="PATH",
        help="local Hugging Face tokenizer directory (tokenizer.json + tokenizer_config.json); "
        "default: the built-in sim tokenizer",
    )
    model.add_argument(
        "--max-model-len",
        type=int,
        default=_E.max_model_len,
        help="context length: prompt + max_tokens above it is a 400",
    )
    model.add_argument(
        "--image-tokens",
        default="auto",
        metavar="N",
        help="prompt tokens each image part of a chat message costs; auto: Qwen3-VL's charge "
        "for the image's size (a 512x512 image: 258)",
    )
    eng = parser.add_argument_group("continuous-batching engine (default mode)")
    eng.add_argument(
        "--max-num-seqs", type=int, default=_E.max_num_seqs, help="most sequences in one batch"
    )
    eng.add_argument(
        "--max-num-batched-tokens",
        type=int,
        default=_E.max_num_batched_tokens,
        help="token budget of one step: each decode takes 1, prefill is chunked into the rest",
    )
    eng.add_argument(
        "--num-gpu-blocks",
        type=int,
        default=_E.num_gpu_blocks,
        help="KV-cache size in blocks; sequences are preempted (recomputed) when it runs out",
    )
    eng.add_argument(
        "--num-gpu-blocks-override",
        type=int,
        default=None,
        metavar="N",
        help="vLLM's flag: the KV cache's size in blocks, as --num-gpu-blocks, and reported as "
        "an override in vllm:cache_config_info (as vLLM does), so a diagnosis advises the flag",
    )
    eng.add_argument(
        "--block-size", type=int, default=_E.block_size, help="tokens per KV-cache block"
    )
    eng.add_argument(
        "--enable-prefix-caching",
        action=argparse.BooleanOptionalAction,
        default=_E.enable_prefix_caching,
        help="reuse the KV blocks of a repeated prompt prefix, as vLLM V1 does: only the "
        "uncached tokens are prefilled",
    )
    eng.add_argument(
        "--step-base",
        type=float,
        default=_C.base,
        metavar="S",
        help="fixed cost of every step, seconds",
    )
    eng.add_argument(
        "--prefill-cost",
        type=float,
        default=_C.prefill_per_token,
        metavar="S",
        help="step cost per prefill token, seconds",
    )
    eng.add_argument(
        "--decode-cost",
        type=float,
        default=_C.decode_per_seq,
        metavar="S",
        help="step cost per decoding sequence, seconds",
    )
    eng.add_argument(
        "--time-scale",
        type=float,
        default=_E.time_scale,
        metavar="F",
        help="multiply every modelled delay (steps, --ttft, --itl) by F (0.01: 100x faster, same shape)",
    )
    eng.add_argument(
        "--step-jitter",
        type=float,
        default=_E.jitter,
        metavar="R",
        help="random relative standard deviation of step durations (0: none)",
    )
    spec = parser.add_argument_group("speculative decoding (engine mode; docs/simulator.md)")
    spec.add_argument(
        "--speculative-tokens",
        type=int,
        default=0,
        metavar="K",
        help="a draft model proposes K tokens per decoding sequence per step, verified in the "
        "step; /metrics gains vLLM's vllm:spec_decode_* counters (0: no speculation)",
    )
    spec.add_argument(
        "--acceptance",
        default="0.7",
        metavar="P",
        help="with --speculative-tokens: the chance each draft position is accepted given the "
        "ones before it were, one value for all positions or K comma-separated (0.9,0.7,0.5)",
    )
    spec.add_argument(
        "--verify-cost",
        type=float,
        default=_S.verify_per_token,
        metavar="S",
        help="step cost per draft token the target verifies, seconds",
    )
    spec.add_argument(
        "--draft-cost",
        type=float,
        default=_S.draft_per_token,
        metavar="S",
        help="step cost per token the draft model proposes, seconds (0: n-gram lookup)",
    )
    pd = parser.add_argument_group("disaggregated prefill/decode (engine mode; docs/simulator.md)")
    pd.add_argument(
        "--disagg",
        action="store_true",
        help="run as a disaggregated deployment: a prefill instance (--prefill-port) and a "
        "decode instance (--decode-port), each with its own /metrics, behind a proxy on --port "
        "that routes like vLLM's disaggregated proxy example",
    )
    pd.add_argument(
        "--prefill-port",
        type=port_argument,
        default=None,
        metavar="PORT",
        help="with --disagg: the prefill instance's port (default: --port + 1)",
    )
    pd.add_argument(
        "--decode-port",
        type=port_argument,
        default=None,
        metavar="PORT",
        help="with --disagg: the decode instance's port (default: --port + 2)",
    )
    pd.add_argument(
        "--kv-transfer-cost",
        type=float,
        default=_D.seconds_per_block,
        metavar="S",
        help="with --disagg: seconds to move one KV block from prefill to decode; transfers "
        "share one link, one after another",
    )
    pd.add_argument(
        "--kv-block-bytes",
        type=int,
        default=_D.bytes_per_block,
        metavar="N",
        help="with --disagg: bytes of one KV block, as vllm:nixl_bytes_transferred counts them",
    )
    fixed = parser.add_argument_group("fixed-latency mode (no batching)")
    fixed.add_argument(
        "--ttft",
        type=float,
        default=None,
        metavar="S",
        help="every request: first token S seconds after arrival (needs --itl)",
    )
    fixed.add_argument(
        "--itl",
        type=float,
        default=None,
        metavar="S",
        help="every request: one more token every S seconds after the first (needs --ttft)",
    )
    out = parser.add_argument_group("output")
    out.add_argument(
        "--echo",
        action="store_true",
        help="no model delays at all: whole responses as fast as they can be written",
    )
    out.add_argument(
        "--tokens-per-chunk",
        type=int,
        default=_O.tokens_per_chunk,
        metavar="N",
        help="tokens per streamed chunk after the first (the first token is always alone)",
    )
    out.add_argument(
        "--eos-probability",
        type=float,
        default=_O.eos_probability,
        metavar="P",
        help="chance that each token is a simulated EOS, unless ignore_eos or min_tokens forbid it",
    )
    out.add_argument(
        "--reasoning-tokens",
        type=int,
        default=0,
        metavar="N",
        help="a reasoning model: the first N tokens of each chat completion are reasoning, "
        "streamed in --reasoning-field, the rest content (0: no reasoning)",
    )
    out.add_argument(
        "--reasoning-field",
        choices=REASONING_FIELDS,
        default=REASONING_FIELDS[0],
        help="the delta/message field of reasoning text: newer vLLM writes reasoning, "
        "older vLLM reasoning_content",
    )
    out.add_argument(
        "--no-reasoning-usage",
        action="store_true",
        help="leave usage.completion_tokens_details.reasoning_tokens out, like a vLLM that "
        "does not count reasoning tokens",
    )
    out.add_argument(
        "--tool-call-share",
        type=float,
        default=_O.tool_call_share,
        metavar="P",
        help="of the chat requests that offer tools with tool_choice auto, the share whose reply "
        "is a tool call (seeded; tool_choice required or a named function always gets one)",
    )
    out.add_argument(
        "--seed", type=int, default=_O.seed, help="seed of output lengths and texts (and of faults)"
    )
    out.add_argument(
        "--trace",
        default=None,
        metavar="FILE",
        help="append a JSON line per streamed request to FILE: when each token was really written "
        "(the ground truth of bench/timing_accuracy.py; see vllm_load/sim/trace.py)",
    )
    gpu = parser.add_argument_group("simulated GPU (docs/simulator.md)")
    gpu.add_argument(
        "--dcgm",
        action="store_true",
        help=f"serve a simulated GPU's figures at {DCGM_PATH} in a DCGM exporter's format "
        "(utilisation from the engine's busy share, power, energy, memory from KV usage), for "
        "`vllm-load run --gpu-metrics URL`; labelled as simulated. Engine mode only",
    )
    gpu.add_argument(
        "--gpu-idle-watts",
        type=float,
        default=_G.idle_watts,
        metavar="W",
        help="with --dcgm: the simulated GPU's power when the engine is idle",
    )
    gpu.add_argument(
        "--gpu-max-watts",
        type=float,
        default=_G.max_watts,
        metavar="W",
        help="with --dcgm: its power when the engine is busy all the time",
    )
    flt = parser.add_argument_group(
        "fault injection (off by default; per-request rates are exclusive and add up to at most 1)"
    )
    flt.add_argument(
        "--fault-error-rate",
        type=float,
        default=0.0,
        metavar="P",
        help="answer this share of requests with --fault-error-status and OpenAI error JSON",
    )
    flt.add_argument(
        "--fault-error-status",
        type=int,
        choices=ERROR_STATUSES,
        default=_F.error_status,
        help="status of injected errors (429 comes with Retry-After)",
    )
    flt.add_argument(
        "--fault-reset-rate",
        type=float,
        default=0.0,
        metavar="P",
        help="reset the connection (TCP RST) after half the output",
    )
    flt.add_argument(
        "--fault-bad-sse-rate",
        type=float,
        default=0.0,
        metavar="P",
        help="send a malformed SSE event after half the output (non-streaming: a truncated JSON body)",
    )
    flt.add_argument(
        "--fault-stall-rate",
        type=float,
        default=0.0,
        metavar="P",
        help="after half the output, send nothing for --fault-stall-seconds, then the rest",
    )
    flt.add_argument(
        "--fault-stall-seconds",
        type=float,
        default=_F.stall_seconds,
        metavar="S",
        help="length of an injected stall (wall-clock, not scaled by --time-scale)",
    )
    flt.add_argument(
        "--fault-slow-first-token-rate",
        type=float,
        default=0.0,
        metavar="P",
        help="hold the request --fault-slow-first-token-seconds before it reaches the engine "
        "(headers go out at once)",
    )
    flt.add_argument(
        "--fault-slow-first-token-seconds",
        type=float,
        default=_F.slow_first_token_seconds,
        metavar="S",
        help="extra wait before an outlier's first token (wall-clock)",
    )
    flt.add_argument(
        "--fault-close-after-headers-rate",
        type=float,
        default=0.0,
        metavar="P",
        help="close the connection right after the response headers",
    )


class ConfigError(SettingsError):
    """An inconsistent combination of options."""


def build_config(args: argparse.Namespace) -> SimConfig:
    """SimConfig from parsed options; ConfigError says what is wrong."""
    if (args.ttft is None) != (args.itl is None):
        raise ConfigError("--ttft and --itl go together")
    if args.echo and args.ttft is not None:
        raise ConfigError("--echo has no delays; it cannot be combined with --ttft/--itl")
    positive = {
        "--max-num-seqs": args.max_num_seqs,
        "--max-num-batched-tokens": args.max_num_batched_tokens,
        "--num-gpu-blocks": args.num_gpu_blocks,
        "--num-gpu-blocks-override": (
            1 if args.num_gpu_blocks_override is None else args.num_gpu_blocks_override
        ),
        "--block-size": args.block_size,
        "--max-model-len": args.max_model_len,
        "--server-workers": args.server_workers,
        "--tokens-per-chunk": args.tokens_per_chunk,
    }
    for option, value in positive.items():
        if value < 1:
            raise ConfigError(f"{option} must be at least 1")
    for option, value in {
        "--step-base": args.step_base,
        "--prefill-cost": args.prefill_cost,
        "--decode-cost": args.decode_cost,
        "--verify-cost": args.verify_cost,
        "--draft-cost": args.draft_cost,
        "--speculative-tokens": args.speculative_tokens,
        "--step-jitter": args.step_jitter,
        "--ttft": args.ttft or 0,
        "--itl": args.itl or 0,
    }.items():
        if value < 0:
            raise ConfigError(f"{option} must not be negative")
    if not args.time_scale > 0:  # 0 would make every modelled delay nothing
        raise ConfigError(
            f"--time-scale must be above 0, got {args.time_scale:g} (0.01: 100x faster)"
        )
    if args.reasoning_tokens < 0:
        raise ConfigError("--reasoning-tokens must not be negative")
    if not 0 <= args.eos_probability <= 1:
        raise ConfigError("--eos-probability must be between 0 and 1")
    if not 0 <= args.tool_call_share <= 1:
        raise ConfigError("--tool-call-share must be between 0 and 1")
    if args.trace and not os.path.isdir(os.path.dirname(os.path.abspath(args.trace))):
        raise ConfigError(f"--trace {args.trace}: its directory does not exist")
    faults = _fault_config(args)
    engine = EngineConfig(
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        max_model_len=args.max_model_len,
        block_size=args.block_size,
        num_gpu_blocks=(
            args.num_gpu_blocks
            if args.num_gpu_blocks_override is None
            else args.num_gpu_blocks_override
        ),
        blocks_overridden=args.num_gpu_blocks_override is not None,
        cost=StepCost(args.step_base, args.prefill_cost, args.decode_cost),
        time_scale=args.time_scale,
        jitter=args.step_jitter,
        enable_prefix_caching=args.enable_prefix_caching,
        speculation=_speculation(args),
    )
    mode = "echo" if args.echo else "fixed" if args.ttft is not None else "engine"
    if mode == "engine":
        usable = engine.num_gpu_blocks - max(1, engine.num_gpu_blocks // 100)
        if -(-engine.max_model_len // engine.block_size) > usable:
            raise ConfigError(
                f"--max-model-len {engine.max_model_len} does not fit the KV cache "
                f"({usable} usable blocks of {engine.block_size} tokens): raise --num-gpu-blocks"
            )
        if engine.max_num_batched_tokens < engine.max_num_seqs:
            raise ConfigError("--max-num-batched-tokens must be at least --max-num-seqs")
    if engine.speculation.enabled and mode != "engine":
        raise ConfigError(
            "--speculative-tokens models the engine's steps: not with --echo or --ttft/--itl"
        )
    gpu = _gpu_model(args, mode)
    disagg = _disaggregation(args, mode)
    return SimConfig(
        host=args.host,
        port=args.port,
        served_model_name=args.served_model_name,
        api_key=args.api_key,
        tokenizer=args.tokenizer,
        tokenize_endpoint=not args.no_tokenize_endpoint,
        metrics_endpoint=not args.no_metrics_endpoint,
        mode=mode,
        engine=engine,
        fixed=FixedLatency(args.ttft * args.time_scale, args.itl * args.time_scale)
        if mode == "fixed"
        else None,
        output=OutputConfig(
            args.eos_probability, args.tokens_per_chunk, args.seed, args.tool_call_share
        ),
        workers=args.server_workers,
        faults=faults,
        trace=os.path.abspath(args.trace) if args.trace else None,
        enable_prompt_tokens_details=args.enable_prompt_tokens_details,
        reasoning=ReasoningConfig(
            args.reasoning_tokens, args.reasoning_field, not args.no_reasoning_usage
        ),
        image_tokens=_image_tokens(args.image_tokens),
        gpu=gpu,
        disagg=disagg,
    )


def _disaggregation(args: argparse.Namespace, mode: str) -> Disaggregation | None:
    """--disagg's instances and link; ConfigError where the options cannot go together."""
    given = [
        option
        for option, value in (
            ("--prefill-port", args.prefill_port),
            ("--decode-port", args.decode_port),
            ("--kv-transfer-cost", args.kv_transfer_cost != _D.seconds_per_block),
            ("--kv-block-bytes", args.kv_block_bytes != _D.bytes_per_block),
        )
        if value
    ]
    if not args.disagg:
        if given:
            raise ConfigError(f"{given[0]} goes with --disagg: add --disagg, or leave it out")
        return None
    if mode != "engine":
        raise ConfigError("--disagg models two engines: not with --echo or --ttft/--itl")
    if args.server_workers != 1 or args.trace:
        raise ConfigError(
            "--disagg runs one process per instance: not with --server-workers or --trace"
        )
    if args.kv_transfer_cost < 0 or args.kv_block_bytes < 1:
        raise ConfigError("--kv-transfer-cost must not be negative, --kv-block-bytes at least 1")
    prefill = args.prefill_port or args.port + 1
    decode = args.decode_port or args.port + 2
    if len({args.port, prefill, decode}) < 3 or max(prefill, decode) > 65535:
        raise ConfigError(
            f"--disagg needs three ports: --port {args.port}, --prefill-port {prefill} and "
            f"--decode-port {decode} must differ and be at most 65535"
        )
    return Disaggregation(prefill, decode, args.kv_transfer_cost, args.kv_block_bytes)


def _speculation(args: argparse.Namespace) -> Speculation:
    """--speculative-tokens K and --acceptance P (one chance, or K of them)."""
    k = args.speculative_tokens
    if not k:
        return Speculation(verify_per_token=args.verify_cost, draft_per_token=args.draft_cost)
    try:
        chances = tuple(float(p) for p in args.acceptance.split(","))
    except ValueError:
        chances = ()
    if not chances or not all(0 <= p <= 1 for p in chances):
        raise ConfigError(
            f"--acceptance {args.acceptance}: give chances between 0 and 1, one (0.8) or "
            f"{k} comma-separated (one per draft position)"
        )
    if len(chances) not in (1, k):
        raise ConfigError(
            f"--acceptance has {len(chances)} chances for --speculative-tokens {k}: give one "
            f"for every position, or {k} (one per position)"
        )
    return Speculation(k, chances, args.verify_cost, args.draft_cost)


def _gpu_model(args: argparse.Namespace, mode: str) -> GpuModel | None:
    """--dcgm's simulated GPU (None without it)."""
    if not args.dcgm:
        return None
    if mode != "engine":
        raise ConfigError(
            "--dcgm simulates the GPU from the engine's steps: not with --echo or --ttft/--itl"
        )
    if not 0 <= args.gpu_idle_watts <= args.gpu_max_watts:
        raise ConfigError("--gpu-idle-watts must be between 0 and --gpu-max-watts")
    return GpuModel(idle_watts=args.gpu_idle_watts, max_watts=args.gpu_max_watts)


def _image_tokens(value: str) -> int | None:
    """--image-tokens: a fixed charge per image, or None for the charge by size."""
    if value == "auto":
        return None
    try:
        tokens = int(value)
    except ValueError:
        tokens = 0
    if tokens < 1:
        raise ConfigError(f"--image-tokens {value}: give a number of tokens (at least 1) or auto")
    return tokens


def _fault_config(args: argparse.Namespace) -> FaultConfig:
    faults = FaultConfig(
        error_rate=args.fault_error_rate,
        error_status=args.fault_error_status,
        reset_rate=args.fault_reset_rate,
        bad_sse_rate=args.fault_bad_sse_rate,
        stall_rate=args.fault_stall_rate,
        stall_seconds=args.fault_stall_seconds,
        slow_first_token_rate=args.fault_slow_first_token_rate,
        slow_first_token_seconds=args.fault_slow_first_token_seconds,
        close_after_headers_rate=args.fault_close_after_headers_rate,
        seed=args.seed,
    )
    for kind, rate in faults.rates().items():
        if not 0 <= rate <= 1:
            raise ConfigError(f"--fault-{kind.replace('_', '-')}-rate must be between 0 and 1")
    if sum(faults.rates().values()) > 1 + 1e-9:
        raise ConfigError(
            "the --fault-*-rate options add up to more than 1 (a request gets at most one fault)"
        )
    if faults.stall_seconds < 0 or faults.slow_first_token_seconds < 0:
        raise ConfigError(
            "--fault-stall-seconds and --fault-slow-first-token-seconds must not be negative"
        )
    return faults


def _describe(config: SimConfig) -> str:
    if config.mode == "echo":
        what = "echo mode (no delays)"
    elif config.mode == "fixed":
        assert config.fixed is not None
        what = f"fixed latency (ttft {config.fixed.ttft}s, itl {config.fixed.itl}s)"
    else:
        e = config.engine
        what = (
            f"engine: max-num-seqs {e.max_num_seqs}, max-num-batched-tokens {e.max_num_batched_tokens}, "
            f"KV {e.kv_capacity_tokens} tokens, prefix caching "
            f"{'on' if e.enable_prefix_caching else 'off'}, time-scale {e.time_scale}"
        )
    spec = config.engine.speculation
    if spec.enabled:
        chances = ",".join(f"{p:g}" for p in spec.acceptance)
        what += f"; speculative decoding: {spec.tokens} draft tokens, acceptance {chances}"
    if config.reasoning.enabled:
        what += f"; reasoning: {config.reasoning.tokens} tokens in {config.reasoning.field}"
    if config.gpu is not None:
        what += f"; simulated GPU at {DCGM_PATH}"
    if (pd := config.disagg) is not None:
        what += (
            f"; disaggregated: proxy here, prefill on port {pd.prefill_port} and decode on port "
            f"{pd.decode_port} (each its own /metrics), KV transfer {pd.seconds_per_block:g} s "
            f"per block of {pd.bytes_per_block} bytes"
        )
    if config.faults.enabled:
        what += "; faults: " + ", ".join(
            f"{kind} {rate:g}" for kind, rate in config.faults.rates().items() if rate
        )
    return (
        f"vllm-load sim: {config.served_model_name} on http://{config.host}:{config.port} "
        f"({config.workers} worker{'s' if config.workers > 1 else ''}; {what})"
    )


def _run_workers(config: SimConfig) -> int:
    """N processes, each binding the port with SO_REUSEPORT; this one only supervises them."""
    import multiprocessing

    from . import serving  # noqa: F401  (loaded once here, before forking, rather than in every worker)

    ctx = multiprocessing.get_context("fork")
    procs = [
        ctx.Process(target=_worker_main, args=(config,), name=f"sim-worker-{i}")
        for i in range(config.workers)
    ]
    stopping = False

    def stop(signum, frame):
        nonlocal stopping
        stopping = True
        for p in procs:
            if p.is_alive():
                p.terminate()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    for p in procs:
        p.start()
    code = 0
    try:
        # wait for any worker to end; if one dies on its own, stop the others too
        while any(p.is_alive() for p in procs):
            for p in procs:
                p.join(timeout=0.2)
                if not p.is_alive() and not stopping:
                    code = 1
                    stop(signal.SIGTERM, None)
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
    return code


def run_disaggregated(config: SimConfig) -> int:
    """--disagg: the prefill and decode instances each a process of its own, as a deployment's
    are (one can be killed alone, and the proxy answers for it), the proxy in this one."""
    import multiprocessing

    from .disagg_deployment import instance_configs
    from .serving import run

    ctx = multiprocessing.get_context("fork")
    procs = [
        ctx.Process(target=_worker_main, args=(instance,), name=f"sim-{instance.kv_role}")
        for instance in instance_configs(config)
    ]
    for p in procs:
        p.start()
    try:
        # the proxy listens (and answers /health) only once both instances do
        if not _instances_listen(config, procs):
            print("vllm-load sim: a --disagg instance did not start", file=sys.stderr)
            return 1
        run(config)
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
    return 0


def _instances_listen(config: SimConfig, procs: list, timeout: float = 30.0) -> bool:
    """Whether the --disagg instances' ports accept connections within `timeout`, their
    processes alive."""
    import socket

    assert config.disagg is not None  # only a --disagg configuration has instances
    waiting = [config.disagg.prefill_port, config.disagg.decode_port]
    deadline = time.monotonic() + timeout
    while waiting and time.monotonic() < deadline and all(p.is_alive() for p in procs):
        try:
            socket.create_connection((config.host, waiting[0]), timeout=1).close()
            waiting.pop(0)
        except OSError:
            time.sleep(0.02)
    return not waiting


def _worker_main(config: SimConfig) -> None:
    die_with_parent(None)  # with the supervisor, even if it is killed outright
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor handles Ctrl-C
    # at call time: aiohttp stays out of every other command (see the module docstring)
    from .serving import run

    run(config)


def _check_listen(host: str, option: str, port: int) -> None:
    refusal = listen_refusal(host, port, option, "--host")
    if refusal:
        raise SettingsError(refusal)


def main(args: argparse.Namespace) -> int:
    config = build_config(args)
    try:
        load_tokenizer(config.tokenizer)  # fail now, with a clear message, not in every worker
    except ValueError as e:
        raise SettingsError(str(e)) from None
    ports = [("--port", config.port)]
    if config.disagg is not None:
        ports += [
            ("--prefill-port", config.disagg.prefill_port),
            ("--decode-port", config.disagg.decode_port),
        ]
    for option, port in ports:
        _check_listen(config.host, option, port)
    print(_describe(config), flush=True)
    if config.workers > 1:
        return _run_workers(config)
    if config.disagg is not None:
        return run_disaggregated(config)
    # at call time: aiohttp stays out of every other command (see the module docstring)
    from .serving import run

    run(config)
    return 0
