"""--role-metrics: a disaggregated deployment's prefill and decode servers, whose /metrics a run
scrapes beside the tested proxy's. Bad input is one clear line; nothing is started."""

from __future__ import annotations

import pytest

from vllm_load.cli.main import build_parser
from vllm_load.settings import Settings, option_argv
from vllm_load.user_values import SettingsError, role_metrics_argument


def test_the_roles_are_parsed_into_base_urls_and_passed_on():
    roles = role_metrics_argument("prefill=http://127.0.0.1:8001/, decode=http://127.0.0.1:8002")
    assert roles == {"prefill": "http://127.0.0.1:8001", "decode": "http://127.0.0.1:8002"}
    args = build_parser().parse_args(
        ["run", "--role-metrics", "prefill=http://127.0.0.1:8001", "--host", "http://h:1"]
    )
    assert Settings.from_options(args).role_metrics == {"prefill": "http://127.0.0.1:8001"}
    assert "--role-metrics" in option_argv(args)  # to the Locust process that scrapes
    assert Settings().role_metrics == {}


@pytest.mark.parametrize(
    "text, message",
    [
        ("http://127.0.0.1:8001", "give ROLE=URL with ROLE one of prefill, decode"),
        ("router=http://127.0.0.1:8001", "give ROLE=URL with ROLE one of prefill, decode"),
        ("prefill=http://a:1,prefill=http://b:2", "names prefill twice"),
        ("decode=ftp://a:1", "give an http:// or https:// base URL"),
    ],
)
def test_bad_roles_are_refused_with_what_to_give(text, message):
    with pytest.raises(SettingsError, match=message):
        role_metrics_argument(text)
