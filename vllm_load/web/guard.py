"""What the web UI refuses, whoever asks: other sites' requests, and forms that would send the
configured API key elsewhere or choose files.

Locust's UI has no CSRF protection and allows every origin (flask-cors); its start form
(`/swarm`) sets any of the process's options it is sent. Checked here, before any route runs:

- **Another origin**: a request whose `Origin` is not the UI's own (the `Host` it was sent to)
  gets 403, whatever its method: a web page elsewhere can neither start, stop or reset a test
  nor read the UI's answers. Browsers send `Origin` with every cross-origin POST and every
  CORS read; a script that sends none (curl, requests) is the operator's.
- **Another name** (DNS rebinding): without `--web-login`, a request must name the UI by an IP
  address or `localhost`; a page whose own name resolves to this UI's address is refused.
- **The start form** (`/swarm`) may set only the fields the form shows: Locust's (users, spawn
  rate, host, run time, ...) and the options shown in it. Paths (`--out`, `--dataset`,
  `--tokenizer`, Locust's CSV/HTML/log files) and every other process option are given on the
  command line only.
- **The API key goes only to the configured host**: with a key configured (`--api-key` or
  `$OPENAI_API_KEY`), a form (or `/user`, Locust's user-class settings) whose host is not the
  `--host` the UI was started with is refused, unless it carries a key of its own for that host
  (`form_api_key`: the configured key is never in the form, nor in any page).
"""

from __future__ import annotations

import ipaddress
import json
import os
from dataclasses import dataclass
from urllib.parse import urlsplit

from flask import Response, jsonify, request
from flask_login import current_user

from ..option_spec import FORM_API_KEY
from .bind import is_loopback

#: the fields of Locust's start form (its React form, names in snake case) besides the options
#: the form shows (`extra_options`)
LOCUST_FORM_FIELDS = frozenset(
    {"user_count", "spawn_rate", "host", "run_time", "user_classes", "shape_class", "profile"}
)
STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
CROSS_ORIGIN = "cross-origin request refused: the web UI takes requests only from its own pages"
DEFAULT_PORTS = {"http": 80, "https": 443}


def _host_port(netloc: str, scheme: str) -> tuple[str, int | None] | None:
    """(lower-case name, port) of a `host[:port]`, the scheme's port when none; None when bad."""
    try:
        parts = urlsplit("//" + netloc)
        port = parts.port
    except ValueError:
        return None
    if not parts.hostname:
        return None
    return parts.hostname.lower(), port or DEFAULT_PORTS.get(scheme)


def same_origin(origin: str, host_header: str) -> bool:
    """Whether an `Origin` header names the site at `host_header` (name and port; a port left
    out is the origin's scheme's, so a TLS proxy that passes `Host` on keeps working)."""
    try:
        parts = urlsplit(origin)
    except ValueError:
        return False
    if parts.scheme not in DEFAULT_PORTS or not parts.netloc:
        return False  # "null" (a sandboxed frame, a file, a redirect) included
    ours = _host_port(host_header, parts.scheme)
    return ours is not None and _host_port(parts.netloc, parts.scheme) == ours


def named_by_address(host_header: str) -> bool:
    """Whether a `Host` header names the UI by an IP address or `localhost` (not a DNS name
    that someone else controls)."""
    found = _host_port(host_header, "http")
    if found is None:
        return False
    if is_loopback(found[0]):
        return True
    try:
        ipaddress.ip_address(found[0])
    except ValueError:
        return False
    return True


def same_target(a: str, b: str) -> bool:
    """Whether two --host URLs name the same server (case, default port, a trailing / aside)."""

    def key(url: str):
        try:
            parts = urlsplit(str(url).strip())
            port = parts.port or DEFAULT_PORTS.get(parts.scheme.lower())
        except ValueError:
            return ("bad", url)
        return (parts.scheme.lower(), (parts.hostname or "").lower(), port, parts.path.rstrip("/"))

    return key(a) == key(b)


@dataclass(frozen=True)
class KeyRule:
    """The API key the UI was started with and the host it may go to."""

    host: str
    api_key: str

    @classmethod
    def of(cls, environment) -> "KeyRule":
        options = environment.parsed_options
        given = getattr(options, "api_key", "") or ""
        return cls(environment.host or "", given or os.environ.get("OPENAI_API_KEY", ""))

    def refusal(self, host: str, form_key: str) -> str | None:
        """Why a test against `host` with `form_key` (the key the form holds, "" for none) may
        not start, or None. The configured key is sent when the form has none of its own."""
        sends_configured = self.api_key and (not form_key or form_key == self.api_key)
        if not sends_configured or same_target(host, self.host):
            return None
        where = self.host or "no --host"
        return (
            f"refused: the API key given at start goes only to {where}, not to {host}. Keep the "
            f"host, or give that server's own key in the form's {FORM_API_KEY.dest} field, or start "
            "vllm-load with --host for it"
        )


def form_refusal(form, allowed: set[str], options: dict) -> str | None:
    """Why a start form sets what the UI may not, or None: any key that is one of the process's
    options but not a field the form shows."""
    refused = sorted(k for k in form.keys() if k in options and k not in allowed)
    if not refused:
        return None
    return (
        f"refused: the web UI cannot set {', '.join(refused)}; paths (output directory, "
        "dataset, tokenizer, Locust's files) and the process's own options are given on the "
        "command line only"
    )


def forbidden(message: str) -> Response:
    return Response(message + "\n", status=403, mimetype="text/plain")


def install_guards(environment, web_ui, base_path: str = "") -> None:
    """The checks above, in front of every route of `web_ui` (Locust's and vllm-load's)."""
    app = web_ui.app
    rule = KeyRule.of(environment)

    def check_form():
        options = vars(environment.parsed_options) if environment.parsed_options else {}
        allowed = set(LOCUST_FORM_FIELDS) | set(web_ui.template_args.get("extra_options") or {})
        why = form_refusal(request.form, allowed, options)
        if why is None:
            host = request.form.get("host", environment.host or "")
            form_key = request.form.get(FORM_API_KEY.dest, options.get(FORM_API_KEY.dest) or "")
            why = rule.refusal(host.replace("<", "").replace(">", ""), form_key)
        return None if why is None else jsonify({"success": False, "message": why})

    def check_user_settings():
        try:
            settings = json.loads(request.get_data(as_text=True) or "{}")
        except ValueError:
            return forbidden("refused: the user settings are not JSON")
        if not isinstance(settings, dict):
            return forbidden("refused: the user settings are not a JSON object")
        if "host" not in settings:
            return None
        options = environment.parsed_options
        why = rule.refusal(str(settings["host"]), getattr(options, FORM_API_KEY.dest, "") or "")
        return None if why is None else forbidden(why)

    @app.before_request
    def guard():
        origin = request.headers.get("Origin")
        host_header = request.headers.get("Host", "")
        if origin is not None and not same_origin(origin, host_header):
            return forbidden(CROSS_ORIGIN)
        if not web_ui.web_login and not named_by_address(host_header):
            return forbidden(
                f"refused: this web UI has no login, so it answers only when named by its "
                f"address (http://127.0.0.1:PORT), not {host_header!r}"
            )
        if request.method not in STATE_CHANGING:
            return None
        if web_ui.web_login and not current_user.is_authenticated:
            return None  # the route's login comes first: nothing is said to a stranger
        path = request.path[len(base_path) :] if request.path.startswith(base_path) else ""
        if path == "/swarm":
            return check_form()
        if path == "/user":
            return check_user_settings()
        return None
