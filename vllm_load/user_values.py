"""Reading what a user typed for an option: levels, a target URL, ports, run metadata, a
temperature, a share. Each refuses a bad value with a `SettingsError` of one line that says what
is wrong and what to give. Over 400 lines on purpose: one concept, every reader of a typed value
in one place, where a new option looks for its parser first."""

from __future__ import annotations

import argparse
import math
import os
import re
import tempfile
from urllib.parse import urlsplit


class SettingsError(ValueError):
    """A bad option value; the message is one line saying what is wrong."""


def list_items(flag: str, text: str) -> list[str]:
    """The items of a comma-separated option value, spaces removed; an empty item (`2,,4`, a
    trailing comma) is refused: it is a typo or an unset variable, never "nothing there"."""
    items = str(text).replace(" ", "").split(",")
    if "" in items:
        raise SettingsError(
            f"{flag} has an empty item in {text!r} (two commas in a row, or one at an end): "
            "give comma-separated values"
        )
    return items


def parse_levels(text: str) -> list[int]:
    if not str(text).strip():
        raise SettingsError("--levels is empty: give concurrency levels, e.g. --levels 10,50,100")
    items = list_items("--levels", text)
    try:
        levels = [int(x) for x in items]
    except ValueError:
        raise SettingsError(
            f"--levels must be comma-separated whole numbers, got {text!r}"
        ) from None
    if any(n < 1 for n in levels):
        raise SettingsError(f"--levels must all be at least 1, got {text!r}")
    return levels


def parse_rates(text: str) -> list[float]:
    """--rates: comma-separated request rates (per second, positive); empty: concurrency mode."""
    items = list_items("--rates", text) if str(text or "").strip() else []
    try:
        rates = [float(x) for x in items]
    except ValueError:
        raise SettingsError(
            f"--rates must be comma-separated numbers (requests per second), got {text!r}"
        ) from None
    if any(not (r > 0) or r == float("inf") for r in rates):
        raise SettingsError(f"--rates must all be positive, got {text!r}")
    return rates


HOST_EXAMPLE = "http://127.0.0.1:8000"


def parse_host(text: str) -> str:
    """The target's base URL, checked before anything is sent to it: http(s), a host, a port in
    range, no path, query or credentials (vllm-load adds /v1/... itself; the key goes by --api-key).
    Returns it unchanged; a bad one is a SettingsError saying what is wrong and what to give."""
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


def master_host_argument(text: str) -> str:
    """A worker's --master-host: the master's host name or IP address, nothing more (the port is
    --master-port; Locust would fail on a URL with a traceback from its socket library)."""
    text = str(text).strip()
    example = "e.g. --master-host 10.0.0.5 --master-port 5557"
    if not text:
        raise argparse.ArgumentTypeError(f"give the master's host name or address, {example}")
    if "://" in text or "/" in text:
        raise argparse.ArgumentTypeError(
            f"{text!r} is a URL: give only the master's host name or address, {example}"
        )
    if any(c.isspace() for c in text):
        raise argparse.ArgumentTypeError(f"{text!r} has spaces: give a host name or address")
    if text.count(":") == 1:
        raise argparse.ArgumentTypeError(
            f"{text!r} has a port: give the port with --master-port, {example}"
        )
    return text


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


LISTEN_EXAMPLE = "e.g. 9647 (127.0.0.1:9647) or 0.0.0.0:9647"


def gpu_count_argument(text: str) -> float:
    """--gpus: a GPU count above 0."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"takes a GPU count above 0, got {text!r}")
    return value


def split_listen_address(text: str) -> tuple[str, int]:
    """(host, port) of a `PORT`, `HOST:PORT` or `[IPV6]:PORT` to listen on; a port alone is on
    127.0.0.1, this machine only. A `SettingsError` for anything else."""
    text = str(text).strip()
    host, colon, port_text = text.rpartition(":")
    host = host.strip("[]") if colon else "127.0.0.1"
    port = int(port_text) if port_text.isdigit() else -1
    if not 1 <= port <= 65535 or (colon and not host) or any(c.isspace() for c in text):
        raise SettingsError(
            f"{text!r} is not an address to listen on: give PORT or HOST:PORT, {LISTEN_EXAMPLE}"
        )
    return host, port


def prometheus_address_argument(value: object) -> str:
    """--prometheus: where to serve the run's own metrics, as HOST:PORT ("" for nowhere)."""
    text = str(value or "").strip()
    if not text:
        return ""
    try:
        host, port = split_listen_address(text)
    except SettingsError as e:
        raise SettingsError(f"--prometheus: {e}") from None
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def writable_directory(path: str, what: str) -> None:
    """Make sure files can be written in the directory `path` (creating it and its parents if
    need be), by writing one; `what` (the option as given) opens the one-line error. Asking the file
    system is the only sure test: permission bits say nothing of a read-only mount, of /proc,
    or of what root may do."""
    try:
        os.makedirs(path or ".", exist_ok=True)
        with tempfile.TemporaryFile(dir=path or "."):
            pass
    except OSError as e:
        reason = e.strerror or str(e)
        raise SettingsError(
            f"{what}: cannot write in {path or '.'} ({reason}): give a writable directory"
        ) from None


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


def parse_think_time(value) -> str:
    """--think-time as given ("S" or "MIN,MAX" seconds), checked; `think_range` reads it."""
    think_range(value)
    return str(value).replace(" ", "")


def think_range(value) -> tuple[float, float]:
    """The (low, high) seconds of a --think-time ("2" is (2, 2)); one-line error when bad."""
    parts = str(value).replace(" ", "").split(",")
    try:
        numbers = [float(p) for p in parts]
    except ValueError:
        numbers = []
    if len(numbers) not in (1, 2) or any(n < 0 or n != n for n in numbers):
        raise SettingsError(
            f"--think-time must be seconds S or MIN,MAX (not negative), got {value!r}"
        )
    low, high = numbers[0], numbers[-1]
    if high < low:
        raise SettingsError(f"--think-time MIN,MAX must have MIN <= MAX, got {value!r}")
    return low, high


def load_meta_file(path: str) -> dict[str, str]:
    """A YAML mapping of run metadata (hardware, GPU count, image digest, ...) as strings.

    Nested mappings are flattened with dots (`gpu: {count: 8}` -> `gpu.count=8`).
    """
    # at call time: every process imports this module (the simulator, Locust, a report), and
    # PyYAML cost each ~17 ms of CPU at start for a file only --meta-file reads
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


def count_argument(flag: str):
    """A parser for an optional whole-number option of at least 1 ("" or None: unset)."""

    def parse(value) -> int | None:
        if value is None or (isinstance(value, str) and not value.strip()):
            return None
        try:
            return int(value)
        except (TypeError, ValueError):
            raise SettingsError(f"{flag} must be a whole number, got {value!r}") from None

    return parse


DCGM_EXAMPLE = "http://GPU-HOST:9400/metrics"


def gpu_metrics_argument(value: object) -> list[str]:
    """--gpu-metrics: each a DCGM exporter's /metrics URL (http or https, a host; a URL without
    a path gets `/metrics`, where dcgm-exporter serves). Many from a repeated option, one from
    a web UI's text."""
    urls = []
    for item in value if isinstance(value, list) else [value]:
        text = str(item).strip()
        try:
            parts = urlsplit(text)
            _ = parts.port  # a port out of range raises here
        except ValueError as e:
            raise SettingsError(
                f"--gpu-metrics {text!r} is not a URL ({e}), e.g. {DCGM_EXAMPLE}"
            ) from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise SettingsError(
                f"--gpu-metrics {text!r} is not an http(s) URL: give a DCGM exporter's "
                f"/metrics, e.g. {DCGM_EXAMPLE}"
            )
        urls.append(text.rstrip("/") + "/metrics" if parts.path in ("", "/") else text)
    return urls


def hosts_argument(value: object) -> list[str]:
    """--hosts: the targets' base URLs (each as `parse_host` checks --host), comma-separated,
    from a repeated option or a web UI's text; each once, in the order given."""
    hosts: list[str] = []
    for item in value if isinstance(value, list) else [value]:
        for text in list_items("--hosts", str(item)):
            host = parse_host(text).rstrip("/")
            if host in hosts:
                raise SettingsError(f"--hosts names {host} twice: give each target once")
            hosts.append(host)
    return hosts


#: the roles of a disaggregated deployment whose /metrics --role-metrics names
ROLES = ("prefill", "decode")


def role_metrics_argument(value: object) -> dict[str, str]:
    """--role-metrics: `prefill=URL,decode=URL`, each role's server (its base URL, whose
    /metrics is scraped); from a repeated option or a web UI's text."""
    roles: dict[str, str] = {}
    for item in value if isinstance(value, list) else [value]:
        if isinstance(item, dict):
            roles.update(item)
            continue
        for text in list_items("--role-metrics", str(item)):
            role, eq, url = text.partition("=")
            role = role.strip()
            if not eq or role not in ROLES:
                raise SettingsError(
                    f"--role-metrics {text!r}: give ROLE=URL with ROLE one of "
                    f"{', '.join(ROLES)} (prefill=http://HOST:8100,decode=http://HOST:8200)"
                )
            if role in roles:
                raise SettingsError(f"--role-metrics names {role} twice: give each role once")
            roles[role] = parse_host(url.strip()).rstrip("/")
    return roles


def gpu_ids_argument(value: object) -> list[int]:
    """--gpu-ids: comma-separated GPU indices (as nvidia-smi numbers them); empty: every GPU."""
    text = str(value or "").strip()
    if not text:
        return []
    try:
        ids = [int(x) for x in list_items("--gpu-ids", text)]
    except ValueError:
        raise SettingsError(
            f"--gpu-ids must be comma-separated GPU indices, got {text!r}"
        ) from None
    if any(i < 0 for i in ids):
        raise SettingsError(f"--gpu-ids must not be negative, got {text!r}")
    return ids


def parse_share(text: str, flag: str) -> float:
    """`5%` or `0.05` as a fraction; a one-line error otherwise. A sign is the reader's: `-5%`
    (a 5 % drop) is 5 %: a worse-by threshold (`compare --fail-if-worse`, `regress
    --max-regression`) is always in the bad direction (throughput lower, latency higher)."""
    match = re.fullmatch(r"\s*[-+]?(\d+(?:\.\d*)?|\.\d+)\s*(%?)\s*", text)
    if not match:
        raise SettingsError(f"{flag} takes a share such as 5% or 0.05, got {text!r}")
    value = float(match.group(1)) / (100.0 if match.group(2) else 1.0)
    if value >= 1 and not match.group(2):
        raise SettingsError(f"{flag} {text}: write a percentage with %, e.g. {text}%")
    return value


def probability(value: object, flag: str, of_what: str, example: str) -> float:
    """A share of draws from 0 to 1 (`--cancel-share 0.1`); one line otherwise, naming what it
    is a share `of_what` and an `example` of reading it."""
    try:
        share = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        share = float("nan")
    if not 0.0 <= share <= 1.0:
        raise SettingsError(
            f"{flag} must be a share of {of_what} from 0 to 1 ({example}), got {value!r}"
        )
    return share
