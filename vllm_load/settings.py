"""vllm-load's options: the typed `Settings` of a run, each field declared once as an option.

The same options work with `vllm-load run` and with plain `locust -f locustfiles/...`: they
are registered on Locust's own parser (`add_arguments`), so Locust ships them to workers and
shows them in its web UI; `Settings.from_options` reads them back, checked. Reading a value
as typed (levels, a URL, metadata) is `user_values`. The module is long because every option is
declared here, once, with its help: splitting them would make two places to look for one.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import Field, asdict, dataclass, fields
from typing import Any, Iterable

from .endpoints import APIS, CHAT, endpoints_help
from .option_spec import (
    AT_LEAST_1,
    AT_LEAST_1_OR_UNSET,
    FORM_API_KEY,
    META_FILE,
    NOT_NEGATIVE,
    POSITIVE,
    TYPES,
    OptionSpec,
    command_line_default,
    dest_of,
    field_default,
    flag_of,
    help_text,
    is_flag,
    option,
    value_of,
)
from .server.server_args import server_args_argument
from .slo import slo_argument
from .stop_when import stop_when_argument
from .user_values import (
    SettingsError,
    count_argument,
    gpu_ids_argument,
    gpu_metrics_argument,
    hosts_argument,
    load_meta_file,
    parse_levels,
    parse_meta,
    parse_rates,
    parse_temperature,
    parse_think_time,
    prometheus_address_argument,
    role_metrics_argument,
)
from .workload.agent_tools import (
    MAX_FAN_OUT,
    TOOL_NAMES,
    parse_fan_out,
    parse_fan_out_share,
    parse_tool_choice,
)
from .workload.arrivals import DEFAULT_ARRIVALS, arrivals_help
from .workload.arrivals import PROCESSES as ARRIVAL_PROCESSES
from .workload.cancel import cancel_after_argument, share_argument
from .workload.datasets import dataset_argument
from .workload.images import IMAGE_FORMATS, image_size_argument
from .workload.lengths import length_argument
from .workload.traces import TRACE_FORMATS
from .workload.traces.replay_plan import DEFAULT_MAX_REQUESTS, DEFAULT_MAX_TOKENS, MAX_SPAN_DAYS

#: measured requests per level when --requests-per-level is not given: at least this many ...
DEFAULT_MEASURED = 100
#: ... and at least this many per user of a concurrency level (whole waves of its users)
MEASURED_WAVES = 2

DEFAULT_LEVELS = "10,50,100,200,500,750,1000"
#: the options that shape --images' images, refused without it (they would be ignored)
IMAGES_ONLY = ("image_size", "image_format")


@dataclass(frozen=True)
class Settings:
    """Everything a run is configured with; every field is an option (declared once, here).

    From these declarations come the options on Locust's parser and each subcommand's
    (`add_arguments`), `Settings.from_options`, the Locust arguments `vllm-load run` passes
    on (`option_argv`) and run.json's settings (`public`, secrets excluded)."""

    model: str = option("", "model id to request (default: the first id in /v1/models)")
    # several targets (client/target_picker.py, docs/run-format.md `target`)
    hosts: list[str] = option(
        [],
        "several targets in one test: the base URLs of the replicas to spread requests over, "
        "comma-separated or repeated (a repeated --host of vllm-load run does the same; --host "
        "is then the first); each is checked and its /metrics scraped on its own",
        parse=hosts_argument,
        repeatable=True,
        metavar="URL",
        web_ui=False,  # (Locust's form reads a list as numbers; the web UI's host is one)
    )
    balance: str = option(
        "round-robin",
        "with several targets: round-robin sends each load process's requests to the targets "
        "in turn (the same number of requests each); least-loaded sends each to the target with "
        "the fewest of the process's requests in flight (as a balancer would)",
        choices=("round-robin", "least-loaded"),
    )
    levels: list[int] = option(
        parse_levels(DEFAULT_LEVELS),
        "concurrency levels to step through",
        parse=parse_levels,
        shown_default=DEFAULT_LEVELS,
    )
    rates: list[float] = option(
        [],
        "open-loop request rates (requests/s) to step through instead of --levels (give one of "
        "the two): requests are sent at each rate whatever the server's speed",
        parse=parse_rates,
        shown_default="",
    )
    arrivals: str = option(
        DEFAULT_ARRIVALS,
        arrivals_help(),
        choices=tuple(ARRIVAL_PROCESSES),
    )
    max_in_flight: int = option(
        1000,
        "with --rates or --trace: at most this many requests in flight in the whole test (the "
        "users Locust runs); a request that finds none free waits, and the wait counts in its "
        "latency",
        rule=AT_LEAST_1,
    )
    trace: str = option(
        "",
        "replay a trace instead of stepping --levels: a file (Mooncake JSONL, BurstGPT CSV or "
        "Azure LLM inference CSV) or sample:NAME (a shipped sample, e.g. sample:mooncake_60s); "
        "each request is sent at its time with its prompt and output lengths",
    )
    trace_format: str = option(
        "auto",
        "with --trace: the file's format (auto: from its first line)",
        choices=("auto", *TRACE_FORMATS),
    )
    trace_speed: float = option(
        1.0, "with --trace: replay this many times faster (0.5: half as fast)", rule=POSITIVE
    )
    trace_start: float = option(
        0.0, "with --trace: start this many seconds into the trace", rule=NOT_NEGATIVE
    )
    trace_duration: float = option(
        0.0,
        "with --trace: replay this many seconds of the trace, in the trace's time (0: to its end)",
        rule=NOT_NEGATIVE,
    )
    trace_max_tokens: int = option(
        DEFAULT_MAX_TOKENS,
        "with --trace: the most tokens (prompt + output) a trace request may ask for; a longer "
        "one is refused with its line before any load (the model's max_model_len, where "
        f"/v1/models gives it, refuses more). Trace times may span at most {MAX_SPAN_DAYS} days",
        rule=AT_LEAST_1,
    )
    trace_max_requests: int = option(
        DEFAULT_MAX_REQUESTS,
        "with --trace: the most requests a trace file may hold (every load process reads them "
        "all); a longer file is refused at its line",
        rule=AT_LEAST_1,
    )
    trace_window: float = option(
        0.0,
        "with --trace: the report's time windows along the replay, in seconds (0: about a "
        "twelfth of the replay)",
        rule=NOT_NEGATIVE,
    )
    input_tokens: int = option(
        2048, "exact prompt length in tokens, chat template included", rule=AT_LEAST_1
    )
    output_tokens: int = option(
        512,
        "exact output length, forced with max_tokens + min_tokens + ignore_eos",
        rule=AT_LEAST_1,
    )
    input_lengths: str = option(
        "",
        "draw each prompt's exact length from a distribution instead of --input-tokens: "
        "uniform:LO,HI, normal:MEAN,SD or lognormal:MEAN,SD, optionally ,min=N,max=N",
        parse=length_argument("--input-lengths"),
    )
    output_lengths: str = option(
        "",
        "draw each request's output length from a distribution instead of --output-tokens "
        "(forms as --input-lengths); with --dataset, for turns whose file gives none",
        parse=length_argument("--output-lengths"),
    )
    dataset: str = option(
        "",
        "send prompts or conversations from this file (JSONL or ShareGPT JSON, "
        "docs/workload.md) instead of synthetic prompts; 'sample' for the shipped ShareGPT "
        "sample. Every worker reads its own copy",
        parse=dataset_argument,
        web_ui=False,  # a path: the web UI chooses no file to read
    )
    dataset_turns: int = option(
        0, "play at most this many turns of each dataset conversation (0: all)", rule=NOT_NEGATIVE
    )
    dataset_min_prompt: int = option(
        0,
        "skip dataset conversations whose first prompt (system + user) has fewer tokens",
        rule=NOT_NEGATIVE,
    )
    dataset_max_prompt: int = option(
        0,
        "skip dataset conversations whose first prompt has more tokens (0: no limit)",
        rule=NOT_NEGATIVE,
    )
    dataset_max_output: int = option(
        0,
        "skip dataset conversations with a turn asking for more output tokens (0: no limit)",
        rule=NOT_NEGATIVE,
    )
    scripted_replies: bool = option(
        False, "carry the dataset's own replies as history instead of the server's"
    )
    think_time: str = option(
        "0",
        "seconds a dataset user waits between turns and between conversations: S, or MIN,MAX "
        "(uniform)",
        parse=parse_think_time,
    )
    agentic: bool = option(
        False,
        "run agentic sessions instead of the built-in test: a prompt of --input-tokens, then "
        "turns that offer tools; a reply's tool calls are answered after --tool-latency-ms with "
        "results of --tool-result-tokens, a reply in text ends the session (docs/workload.md); "
        "with --trace, an agentic trace's recorded sessions (docs/traces.md)",
    )
    agentic_turns: int = option(
        8, "requests in an agentic session at most (--agentic)", rule=AT_LEAST_1
    )
    tool_latency_ms: str = option(
        "uniform:200,2000",
        "milliseconds an agentic session waits for a turn's tool calls, drawn per turn (forms "
        "as --input-lengths)",
        parse=length_argument("--tool-latency-ms"),
    )
    tool_result_tokens: str = option(
        "fixed:256",
        "tokens of each tool result an agentic session sends back, drawn per call (forms as "
        "--input-lengths)",
        parse=length_argument("--tool-result-tokens"),
    )
    tool_choice: str = option(
        "auto",
        "the tool_choice of agentic requests: auto, required, none, or a tool's name "
        f"({', '.join(TOOL_NAMES)}) to force a call to it",
        parse=parse_tool_choice,
    )
    fan_out: int = option(
        0,
        f"subagents a fanned-out agentic turn starts, 0 (none) to {MAX_FAN_OUT}: they run in "
        "parallel beside their parent's user, each a session of its own, and their final answers "
        "are the parent's tool results (--agentic; docs/workload.md)",
        parse=parse_fan_out,
    )
    fan_out_share: float = option(
        0.25,
        "with --fan-out: the share (0 to 1) of a session's tool-calling turns that fan out, a "
        "draw per turn",
        parse=parse_fan_out_share,
    )
    requests_per_level: int | None = option(
        None,
        "requests measured per level: the next ones to start after its warm-up, each followed "
        "to its end, the level's load held until the last has ended (default: the larger of "
        f"{DEFAULT_MEASURED} and {MEASURED_WAVES} per user of the level, so a level measures "
        "whole waves of its users; fewer than its users is flagged)",
        parse=count_argument("--requests-per-level"),
        rule=AT_LEAST_1_OR_UNSET,
    )
    warmup_requests: int = option(
        10,
        "requests of each level to discard, the first to start (a concurrency level discards "
        "at least one per user, so its ramp is never measured)",
        rule=NOT_NEGATIVE,
    )
    level_time_cap: float = option(
        1200.0, "end a level after this many seconds even if short of requests", rule=POSITIVE
    )
    level_cooldown: float = option(0.0, "seconds with no load between levels", rule=NOT_NEGATIVE)
    spawn_rate_per_level: float = option(
        1000.0, "users started per second when a level begins", rule=POSITIVE
    )
    endpoint: str = option(CHAT.name, endpoints_help(), choices=tuple(APIS))
    stream: bool = option(True, "send non-streaming requests (TTFT = E2E)", flag="--no-stream")
    tokenizer: str = option(
        "",
        "local tokenizer directory for exact prompts when the server has no /tokenize",
        web_ui=False,  # a path
    )
    approximate_prompts: bool = option(
        False, "allow prompts of approximate length when no tokenizer is available"
    )
    shared_prefix_tokens: int = option(
        0,
        "a common prompt prefix of N tokens, to measure prefix caching on purpose",
        rule=NOT_NEGATIVE,
    )
    images: int = option(
        0,
        "generated images per request of the built-in test, sent as OpenAI image_url parts "
        "(data: URLs) after the prompt's text, to load a vision-language model's vision "
        "path; every image is distinct, so no server cache is hit. Chat only; a --dataset's "
        "turns carry their own images (docs/workload.md)",
        rule=NOT_NEGATIVE,
    )
    image_size: str = option(
        "512x512", "with --images: each image's WIDTHxHEIGHT in pixels", parse=image_size_argument
    )
    image_format: str = option(
        "jpeg",
        "with --images: jpeg (what clients send; about 55 KB at 512x512) or png (lossless, "
        "about 735 KB at 512x512)",
        choices=IMAGE_FORMATS,
    )
    temperature: float | None = option(
        None, "sampling temperature to send (default: the server's)", parse=parse_temperature
    )
    vllm_params: bool = option(
        True,
        "do not send vLLM's min_tokens/ignore_eos (for servers that reject them)",
        flag="--no-vllm-params",
    )
    connect_timeout: float = option(30.0, "seconds to connect", rule=POSITIVE)
    ttft_timeout: float = option(
        600.0,
        "seconds from a streamed request's start to its first content chunk (the first that "
        "carries a token)",
        rule=POSITIVE,
    )
    stall_timeout: float = option(
        120.0, "seconds without a byte before a request fails", rule=POSITIVE
    )
    request_timeout: float = option(1800.0, "seconds for a whole request", rule=POSITIVE)
    cancel_share: float = option(
        0.0,
        "share of requests (0 to 1) the client closes on purpose, as a user who gives up: each "
        "request is chosen (a seeded draw) when it starts, and closed at --cancel-after. A "
        "cancelled request is recorded (error `cancelled`), counted in its level's `cancelled`, "
        "and is neither a failure nor in the latency percentiles",
        parse=share_argument,
    )
    cancel_after: str = option(
        "",
        "with --cancel-share: when a chosen request is closed, a time from its sending (2s, "
        "500ms, uniform:1,3s) or a number of streamed tokens (32tok, uniform:16,64tok): a "
        "length distribution of docs/workload.md followed by s, ms or tok",
        parse=cancel_after_argument,
        metavar="DIST",
    )
    traceparent: bool = option(
        False,
        "send a W3C `traceparent` header with every request (a new random trace id and span id "
        "each, sampled), recorded in requests.csv, so that a request is found in the server's "
        "OpenTelemetry traces (vLLM: --otlp-traces-endpoint); X-Request-Id is always sent. On "
        "too where Locust's --otel is (which instruments Locust itself with the OpenTelemetry SDK)",
    )
    metrics_interval: float = option(
        1.0,
        "seconds between scrapes of the target's /metrics into server_metrics.csv; 0 turns "
        "scraping off",
        rule=NOT_NEGATIVE,
    )
    role_metrics: dict[str, str] = option(
        {},
        "a disaggregated deployment's servers behind the tested proxy: prefill=URL,decode=URL "
        "(base URLs); each one's /metrics is scraped into server_metrics_ROLE.csv every "
        "--metrics-interval s, for each level's KV transfer time, bytes and bandwidth and its "
        "TTFT split into prefill, KV transfer and first decode step",
        parse=role_metrics_argument,
        metavar="ROLE=URL,...",
        web_ui=False,
    )
    # GPU telemetry (run/gpu_scraper.py, docs/run-format.md `gpu_metrics.csv`)
    gpu_metrics: list[str] = option(
        [],
        "a DCGM exporter's /metrics URL to record the GPUs' utilisation, memory, power and "
        "energy from, every --metrics-interval s (repeatable; e.g. http://GPU-HOST:9400/metrics); "
        "the report gives them per level, with joules per output token",
        parse=gpu_metrics_argument,
        repeatable=True,
        metavar="URL",
        web_ui=False,
    )
    gpu_nvml: bool = option(
        False,
        "record the same GPU figures through NVML on this machine (the tester runs on the GPU "
        "host; needs pip install 'vllm-load[gpu]')",
    )
    gpu_ids: list[int] = option(
        [],
        "with --gpu-metrics or --gpu-nvml: only these GPU indices (e.g. 0,1), those the server "
        "uses, so idle GPUs of the host are not counted (default: every GPU)",
        parse=gpu_ids_argument,
        shown_default="",
    )
    server_args: str = option(
        "",
        "the server's flags as it was started (e.g. \"--max-num-seqs 256 --max-num-batched-tokens "
        "8192\"): recorded in run.json; the diagnosis takes those vLLM's /metrics does not show "
        "(--max-num-seqs, --max-num-batched-tokens, ...) as given facts. Changes nothing in the test",
        parse=server_args_argument,
    )
    slo: list[str] = option(
        [],
        "a latency SLO the report judges the levels against (repeatable): per request "
        "ttft<=2s, tpot<=50ms, e2e<=20s, itl_max<=500ms; per level ttft_p99<=2s, e2e_p99<=20s; "
        "attainment>=0.99 (the share of good requests a level needs). Changes nothing in the "
        "test; `vllm-load report` uses it unless given its own --slo",
        parse=slo_argument,
        repeatable=True,
        metavar="SLO",
        web_ui=False,
    )
    stop_when: list[str] = option(
        [],
        "end the ladder early when a level trips a rule (repeatable, or comma-separated): "
        "failed>5%% (its measured requests that failed, checked as they end), ttft_p99>10s (any "
        "per-level percentile an SLO may name, checked at the level's end), over-saturation "
        "(TTFT and requests in flight both rising significantly within the level, checked at its "
        "end). The run drains, says which rule tripped at which level with the figure, and exits "
        "7 (docs/running.md)",
        parse=stop_when_argument,
        repeatable=True,
        metavar="RULE",
        web_ui=False,
    )
    # the tester's own metrics (run/prometheus_export.py); the web UI opens no port
    prometheus: str = option(
        "",
        "serve this run's own metrics (requests by outcome, TTFT/ITL/E2E histograms, tokens, "
        "in flight, current level) for Prometheus at http://ADDR/metrics while the test runs: "
        "PORT (on 127.0.0.1, this machine only) or HOST:PORT, e.g. 0.0.0.0:9647 for a "
        "Prometheus on another machine (no login: the metrics name the target and the model, "
        "never the API key). Off by default",
        parse=prometheus_address_argument,
        metavar="ADDR",
        web_ui=False,
    )
    # a path: the web UI chooses no directory to write
    out: str = option("runs", "base directory for run directories", web_ui=False)
    run_dir: str = option(
        "",
        "exact run directory to write, refused if it holds a run already (default: "
        "OUT/<model>/<UTC time>-<id>)",
        web_ui=False,
    )
    meta: dict[str, str] = option(
        {},
        "key=value recorded in run.json and the report (repeatable)",
        parse=lambda items: parse_meta(items if isinstance(items, list) else [items]),
        repeatable=True,
        web_ui=False,
    )
    api_key: str = option(
        "",
        "Bearer token (default: $OPENAI_API_KEY); never written anywhere. The web UI sends it "
        "only to the --host it was started with",
        secret=True,
    )

    @classmethod
    def from_options(cls, options: Any) -> "Settings":
        """The settings from parsed options (Locust's, a subcommand's, or any object with the
        options' `dest` attributes); a missing one takes its default. Checks every value."""
        values: dict[str, Any] = {}
        for f, spec in settings_options():
            given = getattr(options, dest_of(f, spec), None)
            values[f.name] = value_of(f, spec, given)
        meta_file = getattr(options, META_FILE.dest, "") or ""
        values["meta"] = {**(load_meta_file(meta_file) if meta_file else {}), **values["meta"]}
        values["api_key"] = (
            getattr(options, FORM_API_KEY.dest, "")
            or values["api_key"]
            or os.environ.get("OPENAI_API_KEY", "")
        )
        # Locust's --otel traces Locust itself: a request it sends should carry the trace context
        values["traceparent"] = values["traceparent"] or getattr(options, "otel", False) is True
        settings = cls(**values)
        settings.validate()
        return settings

    def validate(self) -> None:
        if self.rates and self.levels != parse_levels(DEFAULT_LEVELS):
            raise SettingsError(
                "--rates and --levels are two ways to step the load (request rates or "
                "concurrency): give one of them"
            )
        if self.trace and (self.rates or self.levels != parse_levels(DEFAULT_LEVELS)):
            raise SettingsError(
                "--trace replays a trace's own schedule: give it without --levels or --rates"
            )
        for f, spec in settings_options():
            value = getattr(self, f.name)
            if spec.choices and value not in spec.choices:
                raise SettingsError(
                    f"{flag_of(f, spec)} must be one of {', '.join(spec.choices)}, got {value!r}"
                )
            if spec.rule is not None and not spec.rule.holds(value):
                raise SettingsError(f"{flag_of(f, spec)} must {spec.rule.must}, got {value}")
        if self.gpu_ids and not (self.gpu_metrics or self.gpu_nvml):
            raise SettingsError("--gpu-ids picks GPUs of --gpu-metrics or --gpu-nvml: give one")
        if self.images and not APIS[self.endpoint].chat:
            raise SettingsError(
                f"--images sends images as chat content parts: use --endpoint {CHAT.name} "
                f"({APIS[self.endpoint].path} takes a text prompt only)"
            )
        changed = [
            flag_of(f, spec)
            for f, spec in settings_options()
            if f.name in IMAGES_ONLY and getattr(self, f.name) != field_default(f)
        ]
        if changed and not self.images:
            raise SettingsError(
                f"{' and '.join(changed)} {'shapes' if len(changed) == 1 else 'shape'} the "
                "images of --images, and none is sent: give --images N, or leave "
                f"{'it' if len(changed) == 1 else 'them'} out"
            )
        if self.agentic and (self.dataset or self.images):
            other = "--dataset" if self.dataset else "--images"
            raise SettingsError(f"--agentic sends its own sessions: give it without {other}")
        if self.fan_out and not self.agentic:
            raise SettingsError("--fan-out fans out agentic sessions: give it with --agentic")
        if self.agentic and not APIS[self.endpoint].chat:
            raise SettingsError(
                f"--agentic offers tools in chat requests: use --endpoint {CHAT.name}"
            )
        self._validate_cancel()
        if self.images and self.dataset:
            raise SettingsError(
                "--images adds generated images to the built-in test's prompts; a --dataset's "
                'turns carry their own (an "images" list, docs/workload.md)'
            )

    def _validate_cancel(self) -> None:
        if self.cancel_share > 0 and not self.cancel_after:
            raise SettingsError(
                "--cancel-share needs --cancel-after: when to close the chosen requests (2s, 32tok)"
            )
        if self.cancel_after and self.cancel_share == 0:
            raise SettingsError(
                "--cancel-after says when to close requests, and --cancel-share is 0: give "
                "--cancel-share P (the share to close), or leave --cancel-after out"
            )
        if self.cancel_after.endswith("tok") and not self.stream:
            raise SettingsError(
                f"--cancel-after {self.cancel_after} counts streamed tokens, and --no-stream "
                "streams none: give a time (2s), or drop --no-stream"
            )

    def check_fits(self, limit: int | None) -> None:
        """Refuse a prompt + output longer than the model's context (`max_model_len` from /v1/models)."""
        if limit and self.input_tokens + self.output_tokens > limit:
            raise SettingsError(
                f"--input-tokens {self.input_tokens} + --output-tokens {self.output_tokens} "
                f"exceeds the model's max_model_len {limit}"
            )

    def public(self) -> dict:
        """The settings as recorded in run.json: everything but the API key."""
        data = asdict(self)
        data.pop("api_key")
        data["api_key_set"] = bool(self.api_key)
        return data


def settings_options() -> list[tuple[Field, OptionSpec]]:
    """Every `Settings` field with its option, in declaration order."""
    return [(f, f.metadata["option"]) for f in fields(Settings)]


def add_arguments(
    parser: Any,
    defaults: dict[str, Any] | None = None,
    helps: dict[str, str] | None = None,
    hidden: Iterable[str] = (),
    only: Iterable[str] | None = None,
) -> None:
    """Put the options on a Locust (configargparse) or argparse parser.

    `defaults` and `helps` (by field name) replace a field's default and help for this parser,
    `hidden` fields are accepted but not shown, and `only` limits the options to those fields
    (`--meta-file` comes with `meta`). On Locust's parser the options also appear in its web
    UI (the API key as a secret), and Locust ships them to workers."""
    locust_parser = hasattr(parser, "args_included_in_web_ui")
    group = (
        parser if locust_parser else parser.add_argument_group("vllm-load", "LLM load test options")
    )
    wanted = None if only is None else set(only)
    for f, spec in settings_options():
        if wanted is not None and f.name not in wanted:
            continue
        kwargs: dict[str, Any] = {"dest": dest_of(f, spec)}
        default = (defaults or {}).get(f.name, command_line_default(f, spec))
        text = (helps or {}).get(f.name) or help_text(f, spec, default)
        kwargs["help"] = argparse.SUPPRESS if f.name in hidden else text
        if is_flag(f):
            kwargs.update(action="store_true", default=bool(default))
        elif spec.repeatable:
            kwargs.update(
                action="append", default=list(default), metavar=spec.metavar or "KEY=VALUE"
            )
        else:
            kwargs["default"] = default
            if spec.metavar:
                kwargs["metavar"] = spec.metavar
            if str(f.type) in ("int", "float") and spec.parse is None:
                kwargs["type"] = TYPES[str(f.type)]
            if spec.choices:
                kwargs["choices"] = spec.choices
        if locust_parser:  # (Locust's page shows a shown option's value: never a secret's)
            kwargs["include_in_web_ui"] = spec.web_ui and f.name not in hidden and not spec.secret
        group.add_argument(flag_of(f, spec), **kwargs)
        if f.name == "api_key" and locust_parser:
            group.add_argument(
                FORM_API_KEY.flag,
                default="",
                help=FORM_API_KEY.help,
                include_in_web_ui=spec.web_ui,
                is_secret=True,
            )
        if f.name == "meta":
            extra = {"include_in_web_ui": False} if locust_parser else {}
            group.add_argument(META_FILE.flag, default="", help=META_FILE.help, **extra)


def option_argv(options: Any) -> list[str]:
    """The options in `options` that differ from their defaults, as command-line arguments
    (for the Locust process `vllm-load run` starts). The API key never goes on a command line."""
    argv: list[str] = []
    for f, spec in settings_options():
        if spec.secret:
            continue
        flag, default = flag_of(f, spec), command_line_default(f, spec)
        value = getattr(options, dest_of(f, spec), default)
        if value is None or value == default:
            continue
        if is_flag(f):
            argv.append(flag)
        elif spec.repeatable:
            for item in value:
                argv += [flag, str(item)]
        elif str(value).startswith("-"):  # a value argparse would take for an option
            argv.append(f"{flag}={value}")
        else:
            argv += [flag, str(value)]
    meta_file = getattr(options, META_FILE.dest, "")
    if meta_file:
        argv += [META_FILE.flag, str(meta_file)]
    return argv
