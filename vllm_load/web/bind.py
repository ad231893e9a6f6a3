"""Where the web UI and the master's worker port listen: loopback unless the operator says otherwise.

Locust binds its web UI and the master's worker port to every interface by default; vllm-load's
commands and locustfiles bind both to 127.0.0.1 (`loopback_defaults` on Locust's parser; the
`run`/`master` flags' own defaults). A web UI on any other address needs `--web-login`, or the
loud opt-out `--web-insecure-no-login` (for a UI that only a trusted network can reach, such as
a container's port published on the host's loopback): `open_web_ui_refusal` says so in one line.

The worker port has no login of its own (Locust's protocol): the master hands every worker the
test's options, a key typed in the web form included, so it belongs on loopback or a private
interface the operator names with `--master-bind-host`.
"""

from __future__ import annotations

import ipaddress
import logging
from typing import Any

from ..compat.argparse import parser_actions

LOOPBACK = "127.0.0.1"
OPEN_WEB_FLAG = "--web-insecure-no-login"
OPEN_WEB_HELP = (
    "serve the web UI on a non-loopback --web-host without --web-login: anyone who reaches that "
    "address can start tests (with the configured API key, against --host). Only for a port "
    "that a trusted network alone can reach"
)
WEB_HOST_HELP = (
    "address the web UI listens on (default 127.0.0.1, this machine only; any other address "
    f"needs --web-login or {OPEN_WEB_FLAG})"
)
MASTER_BIND_HELP = (
    "address the master listens on for workers (default 127.0.0.1, workers on this machine "
    "only): name the interface the workers reach, e.g. 10.0.0.5, or 0.0.0.0 for all. The port "
    "has no login and carries the test's options to every worker: keep it on a private network"
)

logger = logging.getLogger("vllm_load")


def is_loopback(address: str) -> bool:
    """Whether a bind address (or a Host header's name) is this machine only: localhost or a
    loopback IP. Empty and `*` mean every interface."""
    name = (address or "").strip().strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def shown_address(address: str) -> str:
    return address if address and address != "*" else "every interface"


def open_web_ui_refusal(web_host: str, web_login: bool, insecure_no_login: bool) -> str | None:
    """Why a web UI may not listen on `web_host` as configured, or None when it may."""
    if web_login or insecure_no_login or is_loopback(web_host):
        return None
    return (
        f"the web UI would listen on {shown_address(web_host)} without a login: add --web-login "
        f"(password from $VLLM_LOAD_WEB_PASSWORD), or bind it to 127.0.0.1 with --web-host "
        f"127.0.0.1 (or, on a network only you can reach, {OPEN_WEB_FLAG})"
    )


def warn_if_open(web_host: str, web_login: bool) -> None:
    """The loud part of the opt-out: said when a UI without a login listens beyond loopback."""
    if not web_login and not is_loopback(web_host):
        logger.warning(
            "web UI on %s WITHOUT A LOGIN (%s): anyone who reaches it can start tests",
            shown_address(web_host),
            OPEN_WEB_FLAG,
        )


def add_arguments(parser: Any) -> None:
    """The opt-out flag, on a vllm-load subcommand's parser or on Locust's (kept out of its form)."""
    hidden = {"include_in_web_ui": False} if hasattr(parser, "args_included_in_web_ui") else {}
    parser.add_argument(OPEN_WEB_FLAG, action="store_true", help=OPEN_WEB_HELP, **hidden)


def loopback_defaults(parser: Any) -> None:
    """Locust's parser with the web UI and the worker port on 127.0.0.1 unless told otherwise
    (a flag, LOCUST_WEB_HOST / LOCUST_MASTER_BIND_HOST, a config file); Locust's own default
    is every interface."""
    parser.set_defaults(web_host=LOOPBACK, master_bind_host=LOOPBACK)
    helps = {"web_host": WEB_HOST_HELP, "master_bind_host": MASTER_BIND_HELP}
    for action in parser_actions(parser):
        if action.dest in helps:
            action.help = helps[action.dest]
