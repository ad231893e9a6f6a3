"""`vllm-load sim --disagg`: a prefill and a decode instance behind a proxy, the KV blocks moved
between them at a cost per block, each instance with its own /metrics (sim/disagg_deployment.py)."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.sim_http import call, listening_pid, metric_value, sse_events

from vllm_load.cli.main import build_parser
from vllm_load.sim.child import SimulatorProcess, free_port
from vllm_load.sim.cli import ConfigError, build_config
from vllm_load.sim.config import Disaggregation, EngineConfig, StepCost
from vllm_load.sim.counters import ServerStats, TransferCounts
from vllm_load.sim.disagg_deployment import KvLink, prefill_request
from vllm_load.sim.engine import Engine, Sequence
from vllm_load.sim.exposition import MetricsExporter


def sim_args(*argv: str):
    return build_parser().parse_args(["sim", *argv])


def test_the_options_build_a_deployment_and_refuse_what_cannot_be():
    config = build_config(sim_args("--disagg", "--port", "9000", "--kv-transfer-cost", "0.002"))
    assert config.disagg == Disaggregation(9001, 9002, 0.002, 2 * 1024 * 1024)
    assert build_config(sim_args()).disagg is None
    refusals = {
        ("--kv-transfer-cost", "0.01"): "--kv-transfer-cost goes with --disagg",
        ("--disagg", "--echo"): "not with --echo",
        ("--disagg", "--server-workers", "2"): "not with --server-workers",
        ("--disagg", "--port", "9000", "--decode-port", "9001"): "must differ",
        ("--disagg", "--kv-transfer-cost", "-1"): "must not be negative",
    }
    for argv, message in refusals.items():
        with pytest.raises(ConfigError, match=message):
            build_config(sim_args(*argv))


def test_a_request_whose_kv_came_from_prefill_computes_only_its_last_token():
    config = EngineConfig(cost=StepCost(0.01, 0.001, 0.0), enable_prefix_caching=False)
    engine = Engine(config, ServerStats())
    remote = Sequence(1000, 3, 0.0, remote_tokens=999)
    local = Sequence(1000, 3, 0.0)
    engine.waiting.extend([remote, local])
    plan = engine.schedule()
    # the remote one brings 1 token to the step, the local one its whole prompt (budget 8192)
    assert [(seq is remote, new) for seq, new in plan.work] == [(True, 1), (False, 1000)]
    assert remote.num_blocks == local.num_blocks == 63  # its whole prompt's blocks all the same
    engine.complete(plan, plan.duration)
    assert remote.num_generated == local.num_generated == 1


def test_the_link_queues_transfers_and_counts_them_as_nixl_does():
    counts = TransferCounts()
    link = KvLink(Disaggregation(0, 0, 0.01, 1000), 1.0, counts)

    async def two_at_once():
        await asyncio.gather(link.transfer(3), link.transfer(2))

    asyncio.run(two_at_once())
    # the second waited for the first's 30 ms: posted to done, 50 ms
    assert counts.xfer_time.count == 2
    assert counts.xfer_time.total == pytest.approx(0.03 + 0.05, abs=0.01)
    assert counts.bytes_transferred.total == 5000
    assert counts.descriptors.total == 5
    stats = ServerStats()
    stats.kv_transfer = counts
    text = MetricsExporter(stats, lambda: Engine(EngineConfig(), stats).occupancy(), "m").render()
    names = {f.name for f in text_string_to_metric_families(text[0].decode())}
    assert {
        "vllm:nixl_xfer_time_seconds",
        "vllm:nixl_bytes_transferred",
        "vllm:nixl_num_descriptors",
        "vllm:nixl_num_failed_transfers",
    } <= names
    plain = MetricsExporter(ServerStats(), lambda: Engine(EngineConfig(), stats).occupancy(), "m")
    assert "nixl" not in plain.render()[0].decode()  # no connector, no families (not zeros)


def test_the_proxy_asks_prefill_for_one_unstreamed_token_for_remote_decode():
    asked = {"prompt": "hi", "max_tokens": 50, "stream": True, "min_tokens": 10,
             "stream_options": {"include_usage": True}}  # fmt: skip
    sent = prefill_request(asked)
    assert (sent["max_tokens"], sent["stream"], "min_tokens" in sent) == (1, False, False)
    assert sent["kv_transfer_params"]["do_remote_decode"] is True
    assert asked["max_tokens"] == 50  # the decode instance gets the original


def test_a_disaggregated_simulator_serves_through_its_proxy_with_metrics_per_instance():
    prefill_port, decode_port = free_port("127.0.0.1"), free_port("127.0.0.1")
    argv = ("--disagg", "--prefill-port", str(prefill_port), "--decode-port", str(decode_port),
            "--time-scale", "0.1", "--kv-transfer-cost", "0.01", "--kv-block-bytes", "1000")  # fmt: skip
    with SimulatorProcess(*argv) as sim:
        prompt = " ".join(["word"] * 200)
        body = {"model": "sim-llama-8b", "prompt": prompt, "max_tokens": 5, "ignore_eos": True,
                "stream": True}  # fmt: skip
        status, text = call(sim.url + "/v1/completions", body)
        assert status == 200
        events = sse_events(text)
        assert events[-1] == "[DONE]" and len(events) == 6  # five tokens, then [DONE]
        prefill = call(f"http://127.0.0.1:{prefill_port}/metrics")[1]
        decode = call(f"http://127.0.0.1:{decode_port}/metrics")[1]
        assert call(sim.url + "/metrics")[0] == 404  # the proxy has none, as vLLM's has none
        assert call(sim.url + "/v1/models")[0] == 200
    prompt_tokens = metric_value(prefill, "vllm:prompt_tokens_total")
    blocks = -(-(prompt_tokens - 1) // 16)
    assert metric_value(prefill, "vllm:generation_tokens_total") == 1  # its one token
    assert "nixl" not in prefill
    assert metric_value(decode, "vllm:generation_tokens_total") == 5
    assert metric_value(decode, "vllm:nixl_xfer_time_seconds_count") == 1
    assert metric_value(decode, "vllm:nixl_bytes_transferred_sum") == blocks * 1000
    # each block 10 ms before --time-scale 0.1
    assert metric_value(decode, "vllm:nixl_xfer_time_seconds_sum") >= blocks * 0.001 * 0.9


@pytest.mark.parametrize("victim", ["prefill", "decode"])
def test_an_instance_killed_alone_is_named_by_the_proxy_with_a_502(victim):
    """Each instance is a process of its own, as a deployment's are: killed by its PID, the
    other instance and the proxy stay up, and every request the proxy cannot complete is a 502
    naming the instance (it was aiohttp's 500 and a traceback, and no instance could be killed
    alone: all three servers were one process)."""
    ports = {"prefill": free_port("127.0.0.1"), "decode": free_port("127.0.0.1")}
    argv = ("--disagg", "--prefill-port", str(ports["prefill"]), "--decode-port", str(ports["decode"]),
            "--time-scale", "0.01")  # fmt: skip
    body = {"model": "sim-llama-8b", "prompt": "a b c", "max_tokens": 3, "stream": True}
    with SimulatorProcess(*argv) as sim:
        assert call(sim.url + "/v1/completions", body)[0] == 200
        pid = listening_pid(ports[victim])
        assert pid is not None and pid != sim.proc.pid and os.getpgid(pid) == sim.proc.pid
        os.kill(pid, signal.SIGKILL)
        status, text = call(sim.url + "/v1/completions", body)
        assert status == 502, text
        assert text["error"]["message"].startswith(f"the {victim} instance did not answer"), text
        other = "decode" if victim == "prefill" else "prefill"
        assert call(f"http://127.0.0.1:{ports[other]}/metrics")[0] == 200
        assert "Traceback" not in sim.output()
