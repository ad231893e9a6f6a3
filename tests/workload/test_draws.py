"""Per-request token counts of a load process: fixed unless a distribution is given, and a
drawn prompt length never below what the prompt's fixed parts need."""

import statistics

from vllm_load.workload.lengths import LengthDraws


def test_fixed_without_a_distribution():
    draws = LengthDraws(2048, 512)
    assert {draws.draw_input(100) for _ in range(50)} == {2048}
    assert {draws.draw_output() for _ in range(50)} == {512}
    assert not draws.output_varies


def test_drawn_lengths_follow_their_specs_and_the_seed():
    draws = LengthDraws(2048, 512, "uniform:100,300", "normal:64,8,min=1,max=128", seed=7)
    inputs = [draws.draw_input(1) for _ in range(4000)]
    outputs = [draws.draw_output() for _ in range(4000)]
    assert min(inputs) >= 100 and max(inputs) <= 300 and abs(statistics.mean(inputs) - 200) < 5
    assert abs(statistics.mean(outputs) - 64) < 1 and all(1 <= n <= 128 for n in outputs)
    again = LengthDraws(2048, 512, "uniform:100,300", "normal:64,8,min=1,max=128", seed=7)
    assert [again.draw_input(1) for _ in range(4000)] == inputs and draws.output_varies


def test_a_draw_below_the_prompt_minimum_is_raised_to_it():
    draws = LengthDraws(2048, 512, "uniform:10,40", seed=1)
    assert min(draws.draw_input(30) for _ in range(500)) == 30
