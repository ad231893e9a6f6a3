"""Small things the command line said wrong (issue 46 item 5): `--hosts URL,URL` alone is
docs/running.md's way to test several replicas and was refused with "--host required"; a
replay's summary gave replay seconds as trace seconds and its log named --input-tokens'
prompts; an --image-size without --images was ignored; the simulator took --time-scale 0 and
printed a traceback for --port 70000. Each is in-process: nothing is started."""

from __future__ import annotations

import logging

import pytest

from vllm_load.analysis.replay.plan import TraceRecord
from vllm_load.cli import run as run_command
from vllm_load.cli.main import build_parser
from vllm_load.client import prompts
from vllm_load.client.prompts import PromptPlan, prompt_plan
from vllm_load.settings import Settings
from vllm_load.sim.cli import ConfigError, build_config
from vllm_load.user_values import SettingsError

#: nothing listens there: a command that took it as its target fails on it
NO_TARGET = "http://127.0.0.1:9"


def parse(*argv: str):
    return build_parser().parse_args(list(argv))


def test_hosts_alone_names_the_targets(tmp_path):
    args = parse("run", "--hosts", f"{NO_TARGET},http://127.0.0.1:10", "--out", str(tmp_path))
    with pytest.raises(SettingsError, match=f"cannot use the target {NO_TARGET}: GET /v1/models"):
        run_command.prepare(args)  # the first of --hosts is the one checked first
    with pytest.raises(SettingsError, match="--host is required"):
        run_command.prepare(parse("run", "--out", str(tmp_path)))


def test_the_replay_summary_gives_the_window_in_trace_seconds():
    """--trace-duration 10 at --trace-speed 2, the last request 9.41 s into the trace: the
    record's duration (4.705) is replay seconds."""
    trace = {"path": "t.jsonl", "format": "mooncake", "start": 0, "duration": 4.705, "speed": 2}
    windowed = TraceRecord.of({"trace": trace, "settings": {"trace_duration": 10}})
    assert windowed.describe() == "t.jsonl (mooncake), trace seconds 0–10 at 2× speed"
    to_the_end = TraceRecord.of({"trace": trace, "settings": {"trace_duration": 0}})
    assert to_the_end.describe() == "t.jsonl (mooncake), trace seconds 0–9.41 at 2× speed"


def test_a_trace_runs_log_does_not_name_input_tokens_prompts(monkeypatch, caplog):
    plan = PromptPlan("chat", 2048, ("a",), 10, "server")
    monkeypatch.setattr(prompts, "handed_plan", lambda *_a: plan)
    with caplog.at_level(logging.INFO, logger=prompts.__name__):
        for settings in (Settings(trace="sample:mooncake_60s"), Settings()):
            monkeypatch.setattr(prompts, "_PLANS", {})
            prompt_plan("http://h", "m", settings)
    trace_line, plain_line = caplog.messages
    assert "2048-token" not in trace_line and "the trace's lengths" in trace_line, trace_line
    assert plain_line.startswith("2048-token prompts for m on http://h")


@pytest.mark.parametrize("flag, value", [("--image-size", "256x256"), ("--image-format", "png")])
def test_what_shapes_images_is_refused_without_images(flag, value):
    with pytest.raises(SettingsError, match=f"^{flag} shapes the images of --images"):
        Settings.from_options(parse("run", "--host", NO_TARGET, flag, value))
    with_images = parse("run", "--host", NO_TARGET, "--images", "1", flag, value)
    assert Settings.from_options(with_images).images == 1


def test_the_simulator_refuses_time_scale_0():
    with pytest.raises(ConfigError, match="--time-scale must be above 0, got 0"):
        build_config(parse("sim", "--time-scale", "0"))
    assert build_config(parse("sim", "--time-scale", "0.01")).engine.time_scale == 0.01


def test_the_simulators_port_is_one_line(capsys):
    with pytest.raises(SystemExit) as caught:
        parse("sim", "--port", "70000")
    err = capsys.readouterr().err.strip()
    assert caught.value.code == 2 and "\n" not in err and "Traceback" not in err
    assert err.startswith("vllm-load sim: error: argument --port: a port is a whole number")


@pytest.mark.parametrize(
    "argv, words",
    [
        (("--tool-choice", "fly"), "^--tool-choice must be auto, required, none or a tool's name"),
        (("--dataset", "sample"), "^--agentic sends its own sessions: give it without --dataset"),
        (("--endpoint", "completions"), "^--agentic offers tools in chat requests"),
        (("--tool-latency-ms", "normal:5"), "^--tool-latency-ms 'normal:5': normal takes 2"),
        (("--agentic-turns", "0"), "^--agentic-turns must be at least 1"),
        (("--fan-out", "17"), "^--fan-out must be a whole number of subagents from 0"),
        (("--fan-out", "2", "--fan-out-share", "2"), "^--fan-out-share must be a share of turns"),
    ],
)
def test_agentic_options_are_refused_in_one_line(argv, words):
    with pytest.raises(SettingsError, match=words):
        Settings.from_options(parse("run", "--host", NO_TARGET, "--agentic", *argv))


def test_fan_out_without_agentic_sessions_is_refused():
    with pytest.raises(SettingsError, match="^--fan-out fans out agentic sessions"):
        Settings.from_options(parse("run", "--host", NO_TARGET, "--fan-out", "2"))


def test_the_simulator_refuses_a_tool_call_share_outside_0_1():
    with pytest.raises(ConfigError, match="--tool-call-share must be between 0 and 1"):
        build_config(parse("sim", "--tool-call-share", "1.5"))
