"""Where speculation stops paying, and K per range of loads (`decisions.speculation_k`): ranked
by output throughput with acceptance length beside it, never by the draft acceptance rate; and
the simulator's cost model, whose crossover the verdict is about, measured offline."""

from __future__ import annotations

import numpy as np
import pandas as pd

from vllm_load.analysis.decisions.speculation_k import (
    draft_tokens,
    level_choices,
    speculation_k_findings,
    stops_paying,
)
from vllm_load.figures import spec_position_key
from vllm_load.sim.config import EngineConfig, Speculation
from vllm_load.sim.counters import ServerStats
from vllm_load.sim.engine import Engine, Sequence

VALUES = [1.0, 8.0, 64.0, 256.0]


def run(k: int, tok_per_s, length=None, rate=None) -> tuple[str, pd.DataFrame]:
    frame = pd.DataFrame({"value": VALUES, "output_tok_per_s": tok_per_s, "server_batch": 1.0})
    if k:
        frame["spec_acceptance_length"] = length
        frame["spec_draft_acceptance_rate"] = rate
        for p in range(k):
            frame[spec_position_key(p)] = 0.5
    return f"k{k}", frame


def test_k_is_the_servers_draft_positions_and_unknown_without_server_figures():
    assert draft_tokens(run(3, 1.0, 2.0, 0.3)[1]) == 3
    assert draft_tokens(run(0, 1.0)[1]) == 0
    assert draft_tokens(pd.DataFrame({"value": VALUES, "output_tok_per_s": 1.0})) is None


def test_throughput_ranks_and_the_verdict_names_where_a_larger_k_stops_paying():
    # K = 3 wins at low load (its rate is the lowest everywhere: the rate never ranks), K = 1 in
    # the middle, and at 256 users speculation loses to none at all
    runs = [
        run(0, [100, 700, 3000, 9000]),
        run(1, [170, 1150, 3600, 8000], 1.7, 0.7),
        run(3, [240, 1600, 3500, 6000], 2.4, 0.47),
    ]
    choices = level_choices(runs)
    assert [c.best for c in choices] == [3, 3, 1, 0]
    assert choices[3].stops_paying() == (3, 0)
    verdict, advice = speculation_k_findings(runs)
    assert verdict.startswith(
        "Speculation stops paying at 64 users: K = 3 3,500 output tok/s, acceptance length "
        "2.40, draft acceptance 47%; K = 1 3,600 output tok/s, acceptance length 1.70, draft "
        "acceptance 70%: verifying"
    )
    assert advice == (
        "Draft tokens by load (most output tok/s; within 2%, the smaller K): K = 3 from 1 to 8 "
        "users; K = 1 at 64 users; no speculation at 256 users."
    )


def test_a_tie_goes_to_the_smaller_k_and_one_k_alone_gives_no_advice():
    runs = [run(1, [100, 200, 300, 400], 1.5, 0.5), run(2, [101, 201, 301, 401], 1.9, 0.45)]
    assert [c.best for c in level_choices(runs)] == [1, 1, 1, 1]
    assert speculation_k_findings(runs)[0].startswith("Draft tokens by load")  # no verdict
    assert speculation_k_findings([runs[0]]) == []


def test_ranking_by_the_acceptance_rate_would_pick_the_wrong_k():
    # the rate falls as K rises (more positions, each less likely reached): K = 1's 80 % beats
    # K = 5's 35 %, yet K = 5 yields 2.75 tokens a step against 1.8 and the most output tok/s
    runs = [
        run(0, [100, 700, 3000, 9000]),
        run(1, [175, 1200, 3500, 8000], 1.8, 0.8),
        run(5, [260, 1700, 3000, 5000], 2.75, 0.35),
    ]
    low = level_choices(runs)[0]
    by_rate = max((k for k in low.rate if k), key=lambda k: low.rate[k])
    assert by_rate == 1 and low.rate == {0: low.rate[0], 1: 0.8, 5: 0.35}
    assert low.best == 5 != by_rate
    assert low.acceptance[5] > low.acceptance[1]


def test_a_series_k_stops_paying_where_a_smaller_k_beats_it():
    runs = [
        run(0, [100, 700, 3000, 9000]),
        run(1, [170, 1150, 3600, 8000], 1.7, 0.7),
        run(3, [240, 1600, 3500, 6000], 2.4, 0.47),
    ]
    choices = level_choices(runs)
    three, one = stops_paying(choices, 3), stops_paying(choices, 1)
    assert three is not None and (three.value, three.advised) == (64.0, 1)
    assert one is not None and (one.value, one.advised) == (256.0, 0)
    assert stops_paying(choices, 0) is None  # no speculation cannot stop paying
    assert three.sentence("users") == (
        "Speculation with K = 3 stops paying at 64 users: K = 3 3,500 output tok/s, acceptance "
        "length 2.40, draft acceptance 47%, against K = 1 3,600 output tok/s, acceptance length "
        "1.70, draft acceptance 70%: verifying 3 draft tokens per sequence costs more than the "
        "tokens they add at this batch"
    )


def offline_tok_per_s(k: int, batch: int, p: float = 0.6, steps: int = 60) -> float:
    """The simulated engine's generated tokens per modelled second with `batch` sequences in
    steady decode (no clock: steps applied as fast as they are planned)."""
    spec = Speculation(k, (p,)) if k else Speculation()
    engine = Engine(EngineConfig(max_num_seqs=batch, speculation=spec), ServerStats())
    engine.waiting.extend(Sequence(16, 100_000, 0.0) for _ in range(batch))
    engine.complete(engine.schedule(), 0.0)  # the prefills, not timed
    start, now = engine.stats.generation_tokens, 0.0
    for _ in range(steps):
        plan = engine.schedule()
        now += plan.duration
        engine.complete(plan, now)
    return (engine.stats.generation_tokens - start) / now


def test_the_simulators_speculation_pays_at_a_small_batch_and_stops_at_a_large_one():
    # the default costs, K = 3, P = 0.6: docs/simulator.md puts the crossover near 129 sequences
    small = [offline_tok_per_s(k, 8) for k in (0, 3)]
    large = [offline_tok_per_s(k, 256) for k in (0, 3)]
    assert small[1] > 1.5 * small[0]
    assert large[1] < 0.95 * large[0]
    assert np.isfinite(small + large).all()
