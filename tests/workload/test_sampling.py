"""Length filters (with words standing in for tokens) and the sampler's order: without
replacement, reshuffled each pass, the same for a seed."""

from __future__ import annotations

from collections import Counter

import pytest

from vllm_load.user_values import SettingsError
from vllm_load.workload.datasets import Conversation, Dataset, Turn
from vllm_load.workload.sampling import DatasetSampler, filter_by_length


class WordCounter:
    """Counts words as tokens, and remembers what it was asked to count."""

    def __init__(self):
        self.asked: Counter[str] = Counter()

    def __call__(self, text: str) -> int:
        self.asked[text] += 1
        return len(text.split())


def conv(id, *turns, system=None) -> Conversation:
    return Conversation(id, system, tuple(turns))


SYSTEM = "you are a helpful assistant"  # 5 words
DATASET = Dataset(
    "d.json",
    (
        conv("short", Turn("one two", "a b c")),
        conv("mid", Turn("w " * 10, "r " * 20), Turn("next", "x " * 200)),
        conv("long", Turn("w " * 100, "r " * 7)),
        conv("system", Turn("w " * 6, None, 9), system=SYSTEM),
        conv("given", Turn("w " * 8, "r " * 50, 4)),
    ),
    {"empty user message": 2},
)


def ids(dataset: Dataset) -> list[str]:
    return [c.id for c in dataset.conversations]


def test_replies_become_output_lengths():
    out = filter_by_length(DATASET, WordCounter())
    assert ids(out) == ids(DATASET)
    by_id = {c.id: c for c in out.conversations}
    assert [t.output_tokens for t in by_id["mid"].turns] == [20, 200]
    assert by_id["short"].turns[0] == Turn("one two", "a b c", 3)
    assert by_id["given"].turns[0].output_tokens == 4  # the dataset's own length wins
    assert by_id["system"].turns[0].output_tokens == 9
    assert out.skip_reasons == {"empty user message": 2}


def test_without_reply_as_output_lengths_stay_unknown():
    out = filter_by_length(DATASET, WordCounter(), reply_as_output=False)
    assert out.conversations == DATASET.conversations
    unknown = filter_by_length(DATASET, WordCounter(), max_output=10, reply_as_output=False)
    assert ids(unknown) == ids(DATASET)  # only known lengths are filtered


def test_prompt_limits_count_system_and_first_user_message():
    out = filter_by_length(DATASET, WordCounter(), min_prompt=8, max_prompt=50)
    # system: 5 + 6 = 11 words; short: 2; long: 100
    assert ids(out) == ["mid", "system", "given"]
    assert out.skip_reasons == {
        "empty user message": 2,
        "prompt under min_prompt": 1,
        "prompt over max_prompt": 1,
    }
    assert out.skipped == 4


def test_output_limits_apply_to_every_turn():
    out = filter_by_length(DATASET, WordCounter(), min_output=4, max_output=100)
    # short's reply is 3, mid's second reply 200
    assert ids(out) == ["long", "system", "given"]
    assert out.skip_reasons["output under min_output"] == 1
    assert out.skip_reasons["output over max_output"] == 1


def test_each_string_is_counted_once():
    shared = Dataset(
        "d", tuple(conv(str(i), Turn("same prompt", "same reply"), system=SYSTEM) for i in range(5))
    )
    counter = WordCounter()
    filter_by_length(shared, counter, max_prompt=100)
    assert counter.asked == {"same prompt": 1, SYSTEM: 1, "same reply": 1}


def test_nothing_left_is_an_error():
    with pytest.raises(SettingsError) as error:
        filter_by_length(DATASET, WordCounter(), max_prompt=1, max_output=5)
    assert str(error.value) == (
        "dataset d.json: none of its 5 conversations fits max_prompt=1, max_output=5"
    )


def test_a_blank_reply_still_asks_for_a_token():
    dataset = Dataset("d", (conv("a", Turn("q", "\u200b")),))
    out = filter_by_length(dataset, lambda text: 0)
    assert out.conversations[0].turns[0].output_tokens == 1


def numbered(n: int) -> tuple[Conversation, ...]:
    return tuple(conv(str(i), Turn(f"prompt {i}")) for i in range(n))


def test_every_conversation_is_used_once_per_pass_and_each_pass_is_reshuffled():
    sampler = DatasetSampler(Dataset("d", numbered(20)), seed=1)
    assert len(sampler) == 20 and sampler.passes == 0
    passes = [[sampler.next().id for _ in range(20)] for _ in range(3)]
    assert sampler.passes == 3
    for order in passes:
        assert sorted(order, key=int) == [str(i) for i in range(20)]
    assert passes[0] != [str(i) for i in range(20)]  # shuffled
    assert passes[0] != passes[1] != passes[2]


def test_the_order_depends_on_the_seed_only():
    def first(seed, n=50):
        sampler = DatasetSampler(numbered(10), seed=seed)
        return [sampler.next().id for _ in range(n)]

    assert first(5) == first(5)
    assert first(5) != first(6)


def test_a_single_conversation_repeats():
    sampler = DatasetSampler(numbered(1), seed=0)
    assert [sampler.next().id for _ in range(3)] == ["0", "0", "0"]
    assert sampler.passes == 3


def test_an_empty_dataset_cannot_be_sampled():
    with pytest.raises(ValueError, match="at least one"):
        DatasetSampler([], seed=0)
