"""vllm-load's options: Locust custom arguments, and the typed `Settings` read from them.

The same options work with `vllm-load run` and with plain `locust -f locustfiles/...`:
they are registered on Locust's own parser, so Locust ships them to workers and shows
them in its web UI.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import asdict, dataclass, field
from typing import Any

DEFAULT_LEVELS = "10,50,100,200,500,750,1000"
ENDPOINTS = ("chat", "completions")


class SettingsError(ValueError):
    """A bad option value; the message is one line saying what is wrong."""


def parse_levels(text: str) -> list[int]:
    try:
        levels = [int(x) for x in str(text).replace(" ", "").split(",") if x]
    except ValueError:
        raise SettingsError(
            f"--levels must be comma-separated whole numbers, got {text!r}"
        ) from None
    if not levels:
        raise SettingsError("--levels is empty")
    if any(n < 1 for n in levels):
        raise SettingsError(f"--levels must all be at least 1, got {text!r}")
    return levels


HOST_EXAMPLE = "http://127.0.0.1:8000"


def parse_host(text: str) -> str:
    """The target's base URL, checked before anything is sent to it: http(s), a host, a port in
    range, no path, query or credentials (vllm-load adds /v1/... itself; the key goes by --api-key).
    Returns it unchanged; a bad one is a SettingsError saying what is wrong and what to give."""
    from urllib.parse import urlsplit

    text = str(text or "")
    shown = repr(text)
    if not text.strip():
        raise SettingsError(f"no target: pass --host URL (e.g. --host {HOST_EXAMPLE})")
    if any(c.isspace() or ord(c) < 32 for c in text):
        raise SettingsError(
            f"{shown} has spaces or control characters: give the server's base URL, e.g. {HOST_EXAMPLE}"
        )
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as e:  # a bad IPv6 literal, a port out of range or not a number
        raise SettingsError(
            f"{shown} is not a valid URL ({e}): give the server's base URL, e.g. {HOST_EXAMPLE}"
        ) from None
    if parts.scheme not in ("http", "https"):
        what = f"has scheme {parts.scheme}://" if parts.netloc else "is not a URL"
        raise SettingsError(
            f"{shown} {what}: give an http:// or https:// base URL, e.g. {HOST_EXAMPLE}"
        )
    if not parts.hostname:
        raise SettingsError(
            f"{shown} names no host: give the server's base URL, e.g. {HOST_EXAMPLE}"
        )
    if port == 0:
        raise SettingsError(f"{shown} has port 0: give the port the server listens on (1-65535)")
    if parts.username is not None or parts.password is not None:
        raise SettingsError(
            "the URL holds credentials (user:password@): give it without them, and the key "
            "with --api-key"
        )  # not echoed: it would put the password in logs
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        base = f"{parts.scheme}://{parts.netloc}"
        raise SettingsError(
            f"{shown} has a path or query: give the server's base URL ({base}); "
            "vllm-load adds /v1/... itself"
        )
    return text


def host_argument(text: str) -> str:
    """`parse_host` as an argparse type, so every command's --host is refused in one line."""
    try:
        return parse_host(text)
    except SettingsError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def port_argument(text: str) -> int:
    """A TCP port (1-65535) as an argparse type: Locust would fail on a bad one with a traceback
    (--web-port) or silently wrap it round (--master-bind-port, --master-port)."""
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"a port is a whole number from 1 to 65535, got {text!r}")
    return port


def parse_meta(items: list[str] | None) -> dict[str, str]:
    meta: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SettingsError(f"--meta takes key=value, got {item!r}")
        meta[key.strip()] = value.strip()
    return meta


def parse_temperature(value) -> float | None:
    """--temperature as a number, or None (the server's default) when unset.

    Locust's web UI sends every custom parameter back as text, an unset one as "": that
    must mean "not set", never a temperature of "" (which a server refuses with 400).
    """
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        raise SettingsError(f"--temperature must be a number, got {value!r}") from None


def load_meta_file(path: str) -> dict[str, str]:
    """A YAML mapping of run metadata (hardware, GPU count, image digest, ...) as strings.

    Nested mappings are flattened with dots (`gpu: {count: 8}` -> `gpu.count=8`).
    """
    import yaml

    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh)
    except OSError as e:
        raise SettingsError(f"--meta-file {path}: {e.strerror or e}") from None
    except yaml.YAMLError as e:
        raise SettingsError(
            f"--meta-file {path}: not valid YAML ({str(e).splitlines()[0]})"
        ) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SettingsError(
            f"--meta-file {path}: expected a mapping of key: value, got {type(data).__name__}"
        )
    flat: dict[str, str] = {}

    def walk(prefix: str, value) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
        elif isinstance(value, list):
            flat[prefix] = ",".join(str(v) for v in value)
        else:
            flat[prefix] = "" if value is None else str(value)

    walk("", data)
    return flat


def add_arguments(parser) -> None:
    """Register vllm-load's options on a Locust (configargparse) or argparse parser."""
    # Locust's parser takes web-UI flags on add_argument itself (not on argument groups)
    locust_parser = hasattr(parser, "args_included_in_web_ui")
    extra = {"include_in_web_ui": True} if locust_parser else {}
    hidden = {"include_in_web_ui": False} if locust_parser else {}
    group = (
        parser if locust_parser else parser.add_argument_group("vllm-load", "LLM load test options")
    )
    group.add_argument(
        "--model",
        default="",
        help="model id to request (default: the first id in /v1/models)",
        **extra,
    )
    group.add_argument(
        "--levels",
        default=DEFAULT_LEVELS,
        help=f"concurrency levels to step through (default {DEFAULT_LEVELS})",
        **extra,
    )
    group.add_argument(
        "--input-tokens",
        type=int,
        default=2048,
        help="exact prompt length in tokens, chat template included (default 2048)",
        **extra,
    )
    group.add_argument(
        "--output-tokens",
        type=int,
        default=512,
        help="exact output length, forced with max_tokens + min_tokens + ignore_eos (default 512)",
        **extra,
    )
    group.add_argument(
        "--requests-per-level",
        type=int,
        default=100,
        help="measured requests per level after warm-up (default 100)",
        **extra,
    )
    group.add_argument(
        "--warmup-requests",
        type=int,
        default=10,
        help="first finished requests of each level to discard (default 10)",
        **extra,
    )
    group.add_argument(
        "--level-time-cap",
        type=float,
        default=1200.0,
        help="end a level after this many seconds even if short of requests (default 1200)",
        **extra,
    )
    group.add_argument(
        "--cooldown",
        type=float,
        default=0.0,
        help="seconds with no load between levels (default 0)",
        **extra,
    )
    group.add_argument(
        "--spawn-rate-per-level",
        type=float,
        default=1000.0,
        help="users started per second when a level begins (default 1000)",
        **extra,
    )
    group.add_argument(
        "--endpoint",
        choices=ENDPOINTS,
        default="chat",
        help="chat: /v1/chat/completions; completions: /v1/completions",
        **extra,
    )
    group.add_argument(
        "--no-stream",
        action="store_true",
        default=False,
        help="send non-streaming requests (TTFT = E2E)",
        **extra,
    )
    group.add_argument(
        "--tokenizer",
        default="",
        help="local tokenizer directory for exact prompts when the server has no /tokenize",
        **extra,
    )
    group.add_argument(
        "--approximate-prompts",
        action="store_true",
        default=False,
        help="allow prompts of approximate length when no tokenizer is available",
        **extra,
    )
    group.add_argument(
        "--shared-prefix-tokens",
        type=int,
        default=0,
        help="a common prompt prefix of N tokens, to measure prefix caching on purpose (default 0)",
        **extra,
    )
    group.add_argument(
        "--temperature",
        type=float,
        default=None,
        help="sampling temperature to send (default: the server's)",
        **extra,
    )
    group.add_argument(
        "--no-vllm-params",
        action="store_true",
        default=False,
        help="do not send vLLM's min_tokens/ignore_eos (for servers that reject them)",
        **extra,
    )
    group.add_argument(
        "--connect-timeout",
        type=float,
        default=30.0,
        help="seconds to connect (default 30)",
        **extra,
    )
    group.add_argument(
        "--ttft-timeout",
        type=float,
        default=600.0,
        help="seconds from a streamed request's start to its first content chunk (the first that carries a token; default 600)",
        **extra,
    )
    group.add_argument(
        "--stall-timeout",
        type=float,
        default=120.0,
        help="seconds without a byte before a request fails (default 120)",
        **extra,
    )
    group.add_argument(
        "--request-timeout",
        type=float,
        default=1800.0,
        help="seconds for a whole request (default 1800)",
        **extra,
    )
    group.add_argument(
        "--metrics-interval",
        type=float,
        default=1.0,
        help="seconds between scrapes of the target's /metrics into server_metrics.csv; 0 turns scraping off (default 1)",
        **extra,
    )
    group.add_argument(
        "--out", default="runs", help="base directory for run directories (default runs/)", **extra
    )
    group.add_argument(
        "--run-dir",
        default="",
        help="exact run directory to write (default: OUT/<model>/<UTC time>-<id>)",
        **hidden,
    )
    group.add_argument(
        "--meta",
        action="append",
        default=[],
        help="key=value recorded in run.json and the report (repeatable)",
        **hidden,
    )
    group.add_argument(
        "--meta-file",
        default="",
        help="YAML file of run metadata (hardware, GPUs, image digest, model revision); --meta overrides",
        **hidden,
    )
    secret = {"include_in_web_ui": True, "is_secret": True} if locust_parser else {}
    group.add_argument(
        "--api-key",
        default="",
        help="Bearer token (default: $OPENAI_API_KEY); never written anywhere",
        **secret,
    )


@dataclass(frozen=True)
class Settings:
    """Everything a run is configured with (secrets excluded from `public()`)."""

    model: str = ""
    levels: list[int] = field(default_factory=lambda: parse_levels(DEFAULT_LEVELS))
    input_tokens: int = 2048
    output_tokens: int = 512
    requests_per_level: int = 100
    warmup_requests: int = 10
    level_time_cap: float = 1200.0
    cooldown: float = 0.0
    spawn_rate_per_level: float = 1000.0
    endpoint: str = "chat"
    stream: bool = True
    tokenizer: str = ""
    approximate_prompts: bool = False
    shared_prefix_tokens: int = 0
    temperature: float | None = None
    vllm_params: bool = True
    connect_timeout: float = 30.0
    ttft_timeout: float = 600.0
    stall_timeout: float = 120.0
    request_timeout: float = 1800.0
    metrics_interval: float = 1.0
    out: str = "runs"
    run_dir: str = ""
    meta: dict[str, str] = field(default_factory=dict)
    api_key: str = field(default="", repr=False)

    @classmethod
    def from_options(cls, options) -> "Settings":
        def get(name: str, default: Any = None) -> Any:
            return getattr(options, name, default)

        settings = cls(
            model=get("model", "") or "",
            levels=parse_levels(get("levels", DEFAULT_LEVELS)),
            input_tokens=int(get("input_tokens", 2048)),
            output_tokens=int(get("output_tokens", 512)),
            requests_per_level=int(get("requests_per_level", 100)),
            warmup_requests=int(get("warmup_requests", 10)),
            level_time_cap=float(get("level_time_cap", 1200.0)),
            cooldown=float(get("cooldown", 0.0)),
            spawn_rate_per_level=float(get("spawn_rate_per_level", 1000.0)),
            endpoint=get("endpoint", "chat") or "chat",
            stream=not get("no_stream", False),
            tokenizer=get("tokenizer", "") or "",
            approximate_prompts=bool(get("approximate_prompts", False)),
            shared_prefix_tokens=int(get("shared_prefix_tokens", 0)),
            temperature=parse_temperature(get("temperature")),
            vllm_params=not get("no_vllm_params", False),
            connect_timeout=float(get("connect_timeout", 30.0)),
            ttft_timeout=float(get("ttft_timeout", 600.0)),
            stall_timeout=float(get("stall_timeout", 120.0)),
            request_timeout=float(get("request_timeout", 1800.0)),
            metrics_interval=float(get("metrics_interval", 1.0)),
            out=get("out", "runs") or "runs",
            run_dir=get("run_dir", "") or "",
            meta={
                **(load_meta_file(get("meta_file")) if get("meta_file") else {}),
                **parse_meta(get("meta")),
            },
            api_key=get("api_key", "") or os.environ.get("OPENAI_API_KEY", ""),
        )
        settings.validate()
        return settings

    def validate(self) -> None:
        if self.endpoint not in ENDPOINTS:
            raise SettingsError(
                f"--endpoint must be one of {', '.join(ENDPOINTS)}, got {self.endpoint!r}"
            )
        for name in ("input_tokens", "output_tokens", "requests_per_level"):
            if getattr(self, name) < 1:
                raise SettingsError(
                    f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}"
                )
        for name in ("warmup_requests", "shared_prefix_tokens"):
            if getattr(self, name) < 0:
                raise SettingsError(
                    f"--{name.replace('_', '-')} must not be negative, got {getattr(self, name)}"
                )
        for name in (
            "level_time_cap",
            "spawn_rate_per_level",
            "connect_timeout",
            "ttft_timeout",
            "stall_timeout",
            "request_timeout",
        ):
            if getattr(self, name) <= 0:
                raise SettingsError(
                    f"--{name.replace('_', '-')} must be positive, got {getattr(self, name)}"
                )
        if self.metrics_interval < 0:
            raise SettingsError(
                f"--metrics-interval must not be negative, got {self.metrics_interval}"
            )
        if self.cooldown < 0:
            raise SettingsError(f"--cooldown must not be negative, got {self.cooldown}")

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


def standalone_parser(prog: str = "vllm-load") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, add_help=False)
    add_arguments(parser)
    return parser
