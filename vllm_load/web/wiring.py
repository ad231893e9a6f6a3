"""vllm-load's web UI on Locust's events: its flags on Locust's parser, and its view, login and
guards on the web UI Locust starts. Wired beside the run's own listeners (`run/wiring.py`) by
whatever imports both (`vllm_load.api`): the UI reads the run, the run knows nothing of the UI."""

from __future__ import annotations

from locust import events as locust_events

from . import bind
from .auth import add_arguments as add_web_arguments
from .view import install_web_ui

_installed = False


def install(events=locust_events) -> None:
    """Register the web UI's listeners on Locust's events (once)."""
    global _installed
    if _installed:
        return
    _installed = True

    @events.init_command_line_parser.add_listener
    def _(parser, **_kw):
        add_web_arguments(parser)
        bind.add_arguments(parser)
        bind.loopback_defaults(parser)

    @events.init.add_listener
    def _(environment, web_ui=None, **_kw):
        if web_ui is not None:  # (before Locust starts serving: init fires first)
            install_web_ui(environment, web_ui)
