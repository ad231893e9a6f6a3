"""The one option model: every run option is a `Settings` field, and every parser, the Locust
command line `vllm-load run` builds and run.json's settings come from those declarations."""

import argparse
from dataclasses import fields

import pytest

from vllm_load.option_spec import META_FILE, dest_of, flag_of
from vllm_load.settings import Settings, add_arguments, option_argv, settings_options
from vllm_load.user_values import SettingsError


def parse(argv: list[str], **kwargs) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser, **kwargs)
    return parser.parse_args(argv)


class LocustLikeParser:
    """Records add_argument calls the way Locust's parser takes them (web-UI keywords)."""

    args_included_in_web_ui: dict = {}

    def __init__(self) -> None:
        self.calls: dict[str, dict] = {}

    def add_argument(self, flag, **kwargs):
        self.calls[flag] = kwargs


def test_every_field_is_an_option_with_help():
    names = [f.name for f in fields(Settings)]
    assert [f.name for f, _spec in settings_options()] == names
    for f, spec in settings_options():
        assert spec.help.strip(), f.name
        assert flag_of(f, spec).startswith("--")


def test_defaults_of_the_parser_are_the_settings_defaults():
    assert Settings.from_options(parse([])) == Settings()


def test_command_line_round_trip_through_option_argv():
    argv = ["--levels", "1,2", "--input-tokens", "7", "--no-stream", "--level-cooldown", "2.5",
            "--endpoint", "completions", "--meta", "gpu=H100", "--meta", "n=8", "--temperature",
            "0.3", "--approximate-prompts", "--run-dir", "/tmp/x", "--slo", "ttft <= 2s",
            "--slo", "e2e_p99<=20s,attainment>=90%"]  # fmt: skip
    first = parse(argv)
    again = parse(option_argv(first))
    assert Settings.from_options(again) == Settings.from_options(first)
    settings = Settings.from_options(first)
    assert settings.levels == [1, 2] and settings.input_tokens == 7 and not settings.stream
    assert settings.level_cooldown == 2.5 and settings.meta == {"gpu": "H100", "n": "8"}
    assert settings.temperature == 0.3 and settings.approximate_prompts
    assert settings.slo == ["ttft<=2s", "e2e_p99<=20s", "attainment>=90%"]
    assert option_argv(parse([])) == []  # only what differs from the defaults


def test_the_api_key_never_goes_on_a_command_line():
    assert "--api-key" not in option_argv(parse(["--api-key", "sk-secret"]))
    assert Settings.from_options(parse(["--api-key", "sk-secret"])).api_key == "sk-secret"
    assert "api_key" not in Settings(api_key="x").public()
    assert "sk-secret" not in repr(Settings(api_key="sk-secret"))


def test_locust_parser_gets_web_ui_and_secret_keywords():
    parser = LocustLikeParser()
    add_arguments(parser)
    assert parser.calls["--input-tokens"]["include_in_web_ui"] is True
    assert parser.calls["--run-dir"]["include_in_web_ui"] is False
    # Locust's page shows a shown option's value: the key is not shown, an empty field stands in
    assert parser.calls["--api-key"]["include_in_web_ui"] is False
    assert parser.calls["--form-api-key"]["is_secret"] is True
    assert parser.calls["--form-api-key"]["default"] == ""
    assert parser.calls["--no-stream"]["action"] == "store_true"
    assert parser.calls["--no-stream"]["dest"] == "no_stream"
    assert META_FILE.flag in parser.calls


def test_text_from_the_web_ui_is_typed_and_checked():
    class WebUi:  # Locust's web UI sends every custom parameter back as text
        input_tokens = "128"
        level_time_cap = "30"
        temperature = ""  # an option whose default is "not set": empty is that
        rates = ""
        endpoint = "completions"
        no_stream = "true"

    settings = Settings.from_options(WebUi())
    assert settings.input_tokens == 128 and settings.level_time_cap == 30.0
    assert settings.temperature is None and settings.rates == []
    assert settings.endpoint == "completions" and not settings.stream


@pytest.mark.parametrize(
    "attrs, message",
    [
        ({"input_tokens": "many"}, "--input-tokens must be a whole number, got 'many'"),
        ({"input_tokens": 0}, "--input-tokens must be at least 1, got 0"),
        ({"warmup_requests": -1}, "--warmup-requests must not be negative, got -1"),
        ({"stall_timeout": 0.0}, "--stall-timeout must be positive, got 0.0"),
        ({"level_cooldown": -2.0}, "--level-cooldown must not be negative, got -2.0"),
        ({"endpoint": "embeddings"}, "--endpoint must be one of chat, completions"),
        ({"levels": "1,x"}, "--levels must be comma-separated whole numbers"),
        # an unset variable (`--levels "$LEVELS"`) or a cleared field is not the default ladder
        ({"levels": ""}, "--levels is empty: give a value, or leave the option out"),
        ({"levels": " "}, "--levels is empty"),
        ({"levels": "2,,4"}, "--levels has an empty item in '2,,4'"),
        ({"levels": "2,4,"}, "--levels has an empty item"),
        ({"rates": "1,,2"}, "--rates has an empty item"),
        ({"endpoint": ""}, "--endpoint is empty"),
        ({"think_time": ""}, "--think-time is empty"),
        ({"out": ""}, "--out is empty"),
        ({"rates": "2", "levels": "4,8"}, "--rates and --levels are two ways to step the load"),
        ({"input_lengths": "gauss:3,4"}, "--input-lengths 'gauss:3,4': unknown kind 'gauss'"),
        ({"output_lengths": "uniform:9,2"}, "--output-lengths 'uniform:9,2'"),
        ({"dataset": "/nowhere/x.jsonl"}, "--dataset /nowhere/x.jsonl: no such file"),
        ({"think_time": "1,x"}, "--think-time must be seconds S or MIN,MAX"),
        ({"think_time": "3,1"}, "--think-time MIN,MAX must have MIN <= MAX"),
        ({"think_time": "-1"}, "--think-time must be seconds"),
        ({"slo": ["ttft<2s"]}, "--slo 'ttft<2s' is not an SLO"),
        ({"slo": "ttft<=2h"}, "--slo 'ttft<=2h' is not an SLO"),
        ({"images": -1}, "--images must not be negative, got -1"),
        ({"images": "two"}, "--images must be a whole number, got 'two'"),
        ({"image_size": "512"}, "--image-size must be WIDTHxHEIGHT in pixels"),
        ({"image_size": "8x8"}, "--image-size sides must be from 32 to 8192 pixels"),
        ({"image_format": "gif"}, "--image-format must be one of jpeg, png, got 'gif'"),
        (
            {"images": 2, "endpoint": "completions"},
            "--images sends images as chat content parts: use --endpoint chat",
        ),
        ({"images": 1, "dataset": "sample"}, "--images adds generated images to the built-in"),
    ],
)
def test_a_bad_value_is_one_line_naming_its_option(attrs, message):
    with pytest.raises(SettingsError) as caught:
        Settings.from_options(argparse.Namespace(**attrs))
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_a_subcommand_chooses_its_options_defaults_and_help():
    parser = argparse.ArgumentParser()
    add_arguments(
        parser,
        only=("levels", "input_tokens", "stream", "out", "run_dir"),
        defaults={"levels": "2,4", "input_tokens": 64},
        helps={"out": "where the runs go"},
        hidden={"run_dir"},
    )
    text = parser.format_help()
    assert "--input-tokens" in text and "(default 64)" in text and "(default 2,4)" in text
    assert "where the runs go" in text and "--run-dir" not in text and "--model" not in text
    args = parser.parse_args(["--run-dir", "/tmp/r"])  # hidden, still accepted
    assert args.run_dir == "/tmp/r" and args.levels == "2,4" and args.input_tokens == 64
    assert not hasattr(args, "model")


def test_dest_is_the_flag_name():
    by_name = {f.name: (f, spec) for f, spec in settings_options()}
    assert dest_of(*by_name["stream"]) == "no_stream"
    assert dest_of(*by_name["level_cooldown"]) == "level_cooldown"


@pytest.mark.parametrize("command", ["run", "master", "campaign", "tune", "report"])
def test_every_subcommand_s_help_formats(command):
    # a help with a bare percent sign (`99%`) breaks argparse's %-formatting of --help
    from vllm_load.cli.main import build_parser
    from vllm_load.compat.argparse import subcommand_parsers

    parser = build_parser()
    sub = subcommand_parsers(parser)[command]
    text = sub.format_help()
    assert "--slo SLO" in text


def test_help_shows_a_zero_default_but_not_a_flag_s_false():
    from vllm_load.cli.main import build_parser
    from vllm_load.compat.argparse import subcommand_parsers

    text = " ".join(subcommand_parsers(build_parser())["run"].format_help().split())
    # 0 == False in Python: a zero default was hidden as if it were a flag's
    assert "(0: a single process) (default: 0)" in text
    assert "--no-stream" in text and "(default: False)" not in text


def test_every_option_fits_on_locusts_own_parser():
    """Locust's parser takes every option with no flag of its own taken (a `--otel` of ours
    collided with Locust's, which instruments Locust itself, and no test could start). In a
    process of its own: importing Locust monkey-patches ssl, which this one has imported."""
    import subprocess
    import sys

    from support import ROOT

    code = (
        "from locust.argument_parser import get_empty_argument_parser, setup_parser_arguments\n"
        "from vllm_load.settings import Settings, add_arguments\n"
        "parser = get_empty_argument_parser()\n"
        "setup_parser_arguments(parser)\n"
        "add_arguments(parser)\n"
        "argv = ['--traceparent', '--cancel-share', '0.5', '--cancel-after', '2s']\n"
        "s = Settings.from_options(parser.parse_args(argv))\n"
        "print(s.traceparent, s.cancel_share, s.cancel_after)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["True", "0.5", "2s"]
