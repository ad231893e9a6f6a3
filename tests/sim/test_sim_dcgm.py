"""The simulator's GPU (`vllm-load sim --dcgm`, sim/dcgm_exporter.py): figures that follow the engine, in
dcgm-exporter's format, labelled as simulated."""

from __future__ import annotations

import asyncio
import time

import pytest
from support.sim_http import call

from vllm_load.cli.main import build_parser
from vllm_load.server.dcgm import ENERGY, FB_USED, GPU_UTIL, POWER, SIMULATED_MODEL, parse_dcgm
from vllm_load.sim.child import SimulatorProcess
from vllm_load.sim.cli import ConfigError, build_config
from vllm_load.sim.config import EngineConfig, GpuModel, StepCost
from vllm_load.sim.counters import ServerStats
from vllm_load.sim.dcgm_exporter import DCGM_PATH, MIN_PERIOD, SimulatedGpu
from vllm_load.sim.engine import Engine, Sequence

MODEL = GpuModel(idle_watts=100.0, max_watts=500.0, memory_mib=1000.0, weights_mib=200.0)


class _Engine:
    """Busy seconds and KV usage set by hand, on a hand-set clock."""

    def __init__(self) -> None:
        self.now = 10.0
        self.busy_s = 0.0
        self.kv = 0.0

    def gpu(self) -> SimulatedGpu:
        return SimulatedGpu(MODEL, lambda now: self.busy_s, lambda: self.kv, lambda: self.now)


def test_utilisation_power_energy_and_memory_follow_the_engine():
    engine = _Engine()
    gpu = engine.gpu()
    engine.now, engine.busy_s, engine.kv = 12.0, 1.5, 0.5  # busy 1.5 s of 2 s, half the KV
    values = gpu.read()
    assert values[GPU_UTIL] == 75.0  # whole %
    assert values[POWER] == pytest.approx(100.0 + 400.0 * 0.75)
    # energy: idle power all along plus the busy part, exactly: (100 W × 2 s + 400 W × 1.5 s)
    assert values[ENERGY] == pytest.approx(1000.0 * (100.0 * 2 + 400.0 * 1.5))
    assert values[FB_USED] == pytest.approx(200.0 + 0.5 * (0.9 * 1000.0 - 200.0))
    engine.now, engine.busy_s = 14.0, 1.5  # idle for 2 s
    values = gpu.read()
    assert values[GPU_UTIL] == 0.0 and values[POWER] == 100.0
    assert values[ENERGY] == pytest.approx(1000.0 * (100.0 * 4 + 400.0 * 1.5))
    engine.now = 14.05  # sooner than a sample period: the last reading's utilisation again
    engine.busy_s = 1.55
    assert gpu.read()[GPU_UTIL] == 0.0


def test_the_exposition_is_dcgm_exporters_and_says_it_is_simulated():
    engine = _Engine()
    gpu = engine.gpu()
    engine.now, engine.busy_s = 11.0, 0.25
    text = gpu.render().decode()
    assert (
        "# HELP DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION Total energy consumption since boot (in mJ)."
        in text
    )
    assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter" in text
    scrape = parse_dcgm(text)
    assert scrape.simulated and set(scrape.models.values()) == {SIMULATED_MODEL}
    values = {r.figure: r.value for r in scrape.readings}
    assert values[GPU_UTIL] == 25.0 and values[POWER] == 200.0
    (gpu_id,) = scrape.models
    assert gpu_id.gpu == "0" and gpu_id.uuid.startswith("GPU-") and gpu_id.hostname


def test_the_engines_busy_seconds_are_the_time_it_spent_in_steps():
    """200 steps of 2 ms: 0.4 s busy, whatever the event loop's overhead; idle after."""
    cost = StepCost(base=0.002, prefill_per_token=0.0, decode_per_seq=0.0)

    async def scenario():
        engine = Engine(EngineConfig(cost=cost), ServerStats())
        loop = asyncio.get_running_loop()
        assert engine.busy_seconds(loop.time()) == 0.0
        seq = Sequence(10, 200, loop.time())
        engine.add(seq)
        await asyncio.sleep(0.1)
        during = engine.busy_seconds(loop.time())
        await seq.wait(200)
        await asyncio.sleep(0.05)
        return during, engine.busy_seconds(loop.time())

    during, after = asyncio.run(scenario())
    assert 0.05 < during < 0.15
    assert after == pytest.approx(0.4, rel=1e-9)


def _sim_args(*argv: str):
    return build_parser().parse_args(["sim", *argv])


def test_dcgm_is_an_engine_options_and_its_watts_are_checked():
    assert build_config(_sim_args()).gpu is None
    assert build_config(_sim_args("--dcgm", "--gpu-max-watts", "1000")).gpu.max_watts == 1000.0
    with pytest.raises(ConfigError, match="--dcgm simulates the GPU from the engine"):
        build_config(_sim_args("--dcgm", "--echo"))
    with pytest.raises(ConfigError, match="--gpu-idle-watts must be between 0 and"):
        build_config(_sim_args("--dcgm", "--gpu-idle-watts", "800"))


def test_the_simulator_serves_its_gpu_only_when_asked():
    with SimulatorProcess("--dcgm", "--time-scale", "0.1") as sim:
        status, text = call(sim.url + DCGM_PATH)
        assert status == 200
        first = {r.figure: r.value for r in parse_dcgm(text).readings}
        assert first[GPU_UTIL] == 0.0 and first[POWER] == GpuModel().idle_watts
        assert first[FB_USED] == GpuModel().weights_mib  # no KV block in use
        status, _ = call(
            sim.url + "/v1/completions",
            {"model": "sim-llama-8b", "prompt": "hi", "max_tokens": 256, "ignore_eos": True},
        )
        assert status == 200
        time.sleep(MIN_PERIOD)  # a scrape sooner than that after the last repeats its reading
        later = {r.figure: r.value for r in parse_dcgm(call(sim.url + DCGM_PATH)[1]).readings}
        assert later[GPU_UTIL] > 0 and later[POWER] > first[POWER]
        assert later[ENERGY] > first[ENERGY]
    with SimulatorProcess("--time-scale", "0.1") as sim:
        assert call(sim.url + DCGM_PATH)[0] == 404
