"""K (num_speculative_tokens) as tune sets it: the matrix slot fills the flag each server takes
(`--speculative-config`'s JSON on vLLM, none at K = 0; `--speculative-tokens` on the simulator),
the configuration table shows acceptance length beside the throughput that ranks, and
`tune --advice` carries out a speculation verdict's K."""

from __future__ import annotations

import json
import math
import shlex

import pytest

from vllm_load.cli.tuning.advice_loop import advised_configurations
from vllm_load.cli.tuning.matrix import format_table, rank, server_command
from vllm_load.cli.tuning.runs import ConfigResult
from vllm_load.cli.tuning.source import parse_diagnosis
from vllm_load.server.command_settings import (
    is_simulator,
    setting_value,
    speculative_tokens,
    with_speculative_tokens,
)
from vllm_load.user_values import SettingsError

VLLM = "vllm serve /m --max-num-seqs 8"
SIM = "python -m vllm_load sim --port 9 --verify-cost 0.001"


def spec_config(command: str) -> dict:
    words = shlex.split(command)
    return json.loads(words[words.index("--speculative-config") + 1])


def test_k_on_vllm_is_the_speculative_config_json_and_zero_is_none():
    three = with_speculative_tokens(VLLM, "3")
    assert spec_config(three) == {
        "method": "ngram",
        "prompt_lookup_max": 3,
        "prompt_lookup_min": 2,
        "num_speculative_tokens": 3,
    }
    assert speculative_tokens(three) == "3" and speculative_tokens(VLLM) == "0"
    assert with_speculative_tokens(three, "0") == VLLM  # K = 0: no --speculative-config at all
    assert with_speculative_tokens(VLLM, "0") == VLLM
    # a config the command gives keeps its other keys (a draft model, its own lookup)
    own = VLLM + """ --speculative-config='{"method": "draft_model", "model": "d"}' --port 1"""
    five = with_speculative_tokens(own, "5")
    assert spec_config(five.replace("--speculative-config=", "--speculative-config ")) == {
        "method": "draft_model",
        "model": "d",
        "num_speculative_tokens": 5,
    }
    assert five.endswith(" --port 1") and setting_value(five, "num_speculative_tokens") == "5"
    assert with_speculative_tokens(own, "0") == VLLM + " --port 1"
    for bad in ("-1", "two"):
        with pytest.raises(ValueError, match="whole number of draft tokens"):
            with_speculative_tokens(VLLM, bad)


def test_k_on_the_simulator_is_speculative_tokens():
    assert is_simulator(SIM) and is_simulator("vllm-load sim") and not is_simulator(VLLM)
    assert with_speculative_tokens(SIM, "3") == SIM + " --speculative-tokens 3"
    assert with_speculative_tokens(SIM + " --speculative-tokens 3", "0").endswith("tokens 0")
    assert speculative_tokens(SIM) == "0"


def test_the_matrix_slot_fills_k_without_a_template_field():
    fields: set[str] = set()
    assert server_command(VLLM, {"num_speculative_tokens": "0"}, fields, "") == VLLM
    assert (
        spec_config(server_command(VLLM, {"num_speculative_tokens": "1"}, fields, ""))[
            "num_speculative_tokens"
        ]
        == 1
    )
    assert server_command(SIM, {"num_speculative_tokens": "5"}, fields, "").endswith("tokens 5")
    with pytest.raises(SettingsError, match="--matrix num_speculative_tokens=x: "):
        server_command(VLLM, {"num_speculative_tokens": "x"}, fields, "")


def test_the_table_ranks_by_throughput_with_acceptance_length_beside_it():
    base = ConfigResult({"num_speculative_tokens": "0"}, ["a"], "completed", 1000.0, 16.0)
    one = ConfigResult({"num_speculative_tokens": "1"}, ["b"], "completed", 1400.0, 16.0)
    three = ConfigResult({"num_speculative_tokens": "3"}, ["c"], "completed", 1200.0, 16.0)
    one.acceptance_length, three.acceptance_length = 1.6, 2.2  # K = 3 yields more a step...
    assert rank([base, one, three])[0] is one  # ...yet K = 1 gives more throughput: it ranks
    table = format_table([base, one, three])
    assert "accept len at peak" in table.splitlines()[0]
    rows = {line.split()[0]: line for line in table.splitlines()[2:]}
    assert " 2.20 " in rows["num_speculative_tokens=3"]
    assert " 1.60 " in rows["num_speculative_tokens=1"]
    assert rows["num_speculative_tokens=1"].endswith("throughput")
    assert " - " in rows["num_speculative_tokens=0"]  # no speculation: no acceptance length
    plain = format_table([ConfigResult({"s": "4"}, ["a"], "completed", 10.0, 1.0)])
    assert "accept len" not in plain and math.isnan(base.acceptance_length)


def speculation_series(k: int = 3, to: int = 0) -> dict:
    return {
        "label": f"m (config.num_speculative_tokens={k})",
        "diagnosis": {
            "kind": "speculation",
            "value": 16.0,
            "sentence": f"Speculation with K = {k} stops paying at 16 users.",
            "advice": [
                {
                    "flag": "num_speculative_tokens",
                    "from": str(k),
                    "to": str(to),
                    "expected": "+27% output tok/s at 16 users",
                    "cost": "fewer tokens per step",
                }
            ],
            "predicted_knee": None,
            "advised_knee": None,
        },
    }


def test_the_advice_loop_restarts_the_server_with_the_advised_k():
    d = parse_diagnosis(speculation_series(), "r.json")
    assert [a.name for a in d.runnable] == ["num_speculative_tokens"]
    a, b, warnings = advised_configurations(d, SIM + " --speculative-tokens 3")
    assert a.config == {"num_speculative_tokens": "3"} and not warnings
    assert b.config == {"num_speculative_tokens": "0"}
    assert b.command == SIM + " --speculative-tokens 0"
    # on vLLM: K = 0 is the command without --speculative-config; another K its JSON
    on_vllm = with_speculative_tokens(VLLM, "3")
    a, b, _ = advised_configurations(d, on_vllm)
    assert a.command == on_vllm and b.command == VLLM
    d1 = parse_diagnosis(speculation_series(3, 1), "r.json")
    _, b, _ = advised_configurations(d1, on_vllm)
    assert spec_config(b.command)["num_speculative_tokens"] == 1
    # the command already runs the advised K: nothing to prove
    with pytest.raises(SettingsError, match="already runs with the advised values"):
        advised_configurations(d, VLLM)
