"""The guided search's decisions (`analysis/decisions/guided_search.py`) and its loop
(`cli/tuning/guided.py`'s GuidedSearch) on made-up measurements: which flag it moves, within
which bounds, when it stops, what it keeps, a server that does not start, and a resume."""

from __future__ import annotations

import math

import pytest

from vllm_load.analysis.decisions.guided_search import (
    BUDGET_SPENT,
    MEASURED,
    NO_FLAG,
    SERVER_FAILED,
    START_FAILED,
    TWO_WITHOUT_GAIN,
    Advised,
    FlagBound,
    GuidedStep,
    better,
    move_for,
    parse_bound,
)
from vllm_load.cli.errors import Interrupted
from vllm_load.cli.tuning.guided import GuidedSearch, GuidedState
from vllm_load.cli.tuning.guided_options import render, start_config


def command(config: dict[str, str]) -> str:
    return render("sim --port 1", config, "")


class World:
    """What each configuration measures: {max_num_seqs value: (SLO-max, missed at, advice)}."""

    def __init__(self, table: dict, failing: set[str] = frozenset(), levels: int = 5):
        self.table, self.failing, self.levels = table, failing, levels
        self.measured: list[dict] = []
        self.stop_at: int | None = None  # a Ctrl-C when this step starts

    def measure(self, step: GuidedStep, max_levels: int) -> None:
        if self.stop_at is not None and step.index == self.stop_at:
            raise Interrupted("run the same command again")
        self.measured.append(dict(step.config))
        key = (step.config.get("max_num_seqs"), step.config.get("max_num_batched_tokens"))
        if key[0] in self.failing:
            step.outcome, step.reason = SERVER_FAILED, "exited with code 1"
            return
        slo_max, missed, advice = self.table[key]
        step.slo_max = [slo_max]
        step.bracket = [slo_max, missed]
        step.advice = [{"flag": f, "from": None, "value": v} for f, v in advice]
        step.runs_used = min(self.levels, max_levels)


def search(world: World, bounds=None, max_runs=None, state=None) -> tuple[GuidedSearch, list]:
    said: list[str] = []
    state = state or GuidedState({})
    return (
        GuidedSearch(
            state,
            {b.name: b for b in (bounds or [])},
            command,
            world.measure,
            said.append,
            lambda: None,
            max_levels=12,
            max_runs=max_runs,
        ),
        said,
    )


SEQS = "--max-num-seqs"
TOKENS = "--max-num-batched-tokens"


def test_it_moves_the_advised_flag_and_stops_when_the_verdict_names_none():
    world = World(
        {
            ("2", None): (3, 4, [(SEQS, "8")]),
            ("8", None): (11, 12, [(SEQS, "32")]),
            ("32", None): (11, 13, []),
        }
    )
    s, _ = search(world)
    reason = s.run({"max_num_seqs": "2"})
    steps = s.state.steps
    assert [st.config["max_num_seqs"] for st in steps] == ["2", "8", "32"]
    assert [st.kept for st in steps] == [True, True, False]  # 11 is below 12, where 8 missed
    assert steps[1].change == "--max-num-seqs 2 -> 8" and steps[1].parent == 0
    assert steps[1].moved == {"flag": SEQS, "from": "2", "to": "8", "note": ""}
    assert steps[0].moved is None
    assert steps[2].parent == 1 and "--max-num-seqs 32" in steps[2].command
    # step 2 advised nothing, the best (step 1) advised 32, tried: no flag left to move
    assert reason == NO_FLAG


def test_two_steps_in_a_row_without_gain_stop_it():
    world = World(
        {
            ("2", None): (3, 4, [(SEQS, "8")]),
            ("8", None): (3, 4, [(TOKENS, "4096")]),
            ("2", "4096"): (3, 4, [(SEQS, "16")]),
            ("16", None): (30, 32, []),  # never reached
        }
    )
    s, _ = search(world)
    assert s.run({"max_num_seqs": "2"}) == TWO_WITHOUT_GAIN
    steps = s.state.steps
    # the second step applies the rejected step's advice to the best configuration
    assert steps[2].config == {"max_num_seqs": "2", "max_num_batched_tokens": "4096"}
    assert [st.kept for st in steps] == [True, False, False]


def test_a_flag_outside_its_bounds_is_never_tried():
    world = World(
        {
            ("2", None): (3, 4, [(SEQS, "512")]),
            ("64", None): (40, 42, [(SEQS, "512")]),
        }
    )
    s, _ = search(world, [FlagBound("max_num_seqs", 2, 64)])
    assert s.run({"max_num_seqs": "2"}) == NO_FLAG
    assert [c["max_num_seqs"] for c in world.measured] == ["2", "64"]
    assert "brought to its bound" in s.state.steps[1].change
    bound = FlagBound("max_num_seqs", 2, 64)
    assert move_for(Advised(SEQS, "1"), {"max_num_seqs": "2"}, {"max_num_seqs": bound}) is None
    assert move_for(Advised(SEQS, "big"), {}, {"max_num_seqs": bound}) is None


def test_advice_with_flags_to_set_together_moves_them_in_one_step_within_their_bounds():
    # a cap the KV cache holds no more than: raised alone or the blocks alone gains nothing
    blocks = "--num-gpu-blocks-override"
    world = World({("2", None): (3, 4, []), ("16", None): (20, 21, [])})
    s, _ = search(world, [FlagBound("num_gpu_blocks_override", 64, 1024)])

    def measure(step: GuidedStep, max_levels: int) -> None:
        world.measure(step, max_levels)
        if step.index == 0:
            also = [{"flag": blocks, "from": "64", "value": "4096"}]
            step.advice = [{"flag": SEQS, "from": "2", "value": "16", "also": also}]

    s.measure = measure
    s.run({"max_num_seqs": "2", "num_gpu_blocks_override": "64"})
    step = s.state.steps[1]
    assert step.config == {"max_num_seqs": "16", "num_gpu_blocks_override": "1024"}
    assert step.change.startswith(f"{SEQS} 2 -> 16, {blocks} 64 -> 1024")
    assert "brought to its bound" in step.change
    assert step.moved["also"] == [{"flag": blocks, "from": "64", "to": "1024"}]
    assert f"{blocks} 1024" in step.command and step.kept
    # a flag of `also` already where advised: the advice's own flag still moves alone
    move = move_for(
        Advised(SEQS, "16", "2", (Advised(blocks, "1024", "1024"),)),
        {"max_num_seqs": "2", "num_gpu_blocks_override": "1024"},
        {},
    )
    assert move is not None and move.values == {"max_num_seqs": "16"}


def test_a_server_that_does_not_start_is_recorded_and_skipped():
    world = World(
        {
            ("2", None): (3, 4, [(SEQS, "8"), (TOKENS, "4096")]),
            ("2", "4096"): (6, 7, []),
        },
        failing={"8"},
    )
    s, said = search(world)
    assert s.run({"max_num_seqs": "2"}) == NO_FLAG
    steps = s.state.steps
    assert steps[1].outcome == SERVER_FAILED and not steps[1].kept
    assert "exited with code 1" in steps[1].why
    # the search went on with the verdict's next flag, from the best configuration
    assert steps[2].config == {"max_num_seqs": "2", "max_num_batched_tokens": "4096"}
    assert steps[2].kept


def test_ctrl_c_keeps_the_finished_steps_and_the_same_search_resumes(tmp_path):
    world = World(
        {
            ("2", None): (3, 4, [(SEQS, "8")]),
            ("8", None): (11, 12, [(SEQS, "32")]),
            ("32", None): (40, 41, []),
        }
    )
    world.stop_at = 2
    state = GuidedState({"slo": ["e2e_p99<=1s"]})
    s, _ = search(world, state=state)
    s.save = lambda: state.save(str(tmp_path))
    with pytest.raises(Interrupted):
        s.run({"max_num_seqs": "2"})
    assert len(GuidedState.load(str(tmp_path), state.search).steps) == 2
    world.stop_at, world.measured = None, []
    again = GuidedState.load(str(tmp_path), state.search)
    s, said = search(world, state=again)
    assert s.run({"max_num_seqs": "2"}) == NO_FLAG
    assert world.measured == [{"max_num_seqs": "32"}]  # no finished step measured again
    assert said[0] == "resuming: 2 steps already done"
    assert [st.index for st in again.steps] == [0, 1, 2]


def test_the_budget_of_runs_stops_it():
    world = World({("2", None): (3, 4, [(SEQS, "8")]), ("8", None): (11, 12, [(SEQS, "32")])})
    s, _ = search(world, max_runs=11)  # 5 levels a search: the third could get 1
    assert s.run({"max_num_seqs": "2"}) == BUDGET_SPENT
    assert len(s.state.steps) == 2


def test_a_start_without_an_slo_max_stops_at_once():
    world = World({("2", None): (None, 1, [(SEQS, "8")])})
    s, _ = search(world)
    assert s.run({"max_num_seqs": "2"}) == START_FAILED
    assert len(world.measured) == 1


def _step(values, high=None) -> GuidedStep:
    return GuidedStep(0, {}, "c", "start", None, MEASURED, "", list(values), [values[0], high])


def test_with_several_runs_a_change_is_kept_only_where_welch_says_better():
    a = _step([10.0, 11.0, 10.0])
    assert better(a, _step([20.0, 21.0, 20.0]))[0]
    kept, why = better(a, _step([10.0, 12.0, 11.0]))
    assert not kept and "no significant difference" in why
    # one run a side: kept only at or above where the best missed the SLO
    assert better(_step([10.0], high=11.0), _step([11.0]))[0]
    assert not better(_step([10.0], high=11.0), _step([10.0]))[0]
    assert not better(_step([10.0], high=None), _step([30.0]))[0]


def test_bounds_and_starts_are_checked():
    assert parse_bound("--max-num-seqs=2..256") == FlagBound("max_num_seqs", 2, 256)
    assert parse_bound("max_num_seqs=..64").low == -math.inf
    for bad in ("max_num_seqs", "max_num_seqs=2-8", "max_num_seqs=8..2", "x=a..b"):
        with pytest.raises(ValueError):
            parse_bound(bad)
    bounds = {"max_num_seqs": FlagBound("max_num_seqs", 4, 64)}
    with pytest.raises(Exception, match="outside --bound"):
        start_config("sim --max-num-seqs 2", {}, bounds, "")
    assert start_config("sim --max-num-seqs 8", {}, bounds, "") == {"max_num_seqs": "8"}
    assert render("sim {max_num_seqs}", {"max_num_seqs": "4", "block_size": "8"}, "") == (
        "sim 4 --block-size 8"
    )
