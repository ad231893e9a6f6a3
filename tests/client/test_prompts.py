"""Exact-length prompts: atom discovery, template overhead, uniqueness, refusal when impossible."""

import zlib

import pytest

from vllm_load.client.prompts import (
    LEAD,
    UNIQUE_HEAD_ATOMS,
    WORDS,
    CalibrationError,
    PromptFactory,
    approximate_plan,
    calibrate,
    find_single_token_words,
)


class FakeCounter:
    """A tokenizer where words longer than `max_len` letters cost two tokens, plus a chat template."""

    method = "fake"

    def __init__(self, max_len=4, chat_overhead=9, bos=1, additive=True):
        self.max_len, self.chat_overhead, self.bos, self.additive = (
            max_len,
            chat_overhead,
            bos,
            additive,
        )
        self.calls = 0
        self.split_letters = set()

    def count_text(self, text):
        self.calls += 1
        words = text.split()
        return sum(
            1 if len(w) <= self.max_len and not (set(w) & self.split_letters) else 2 for w in words
        )

    def count_input(self, content, endpoint):
        n = self.count_text(content)
        if not self.additive and len(content.split()) > 100:
            n -= 1  # merges across a boundary in long texts
        return n + (self.chat_overhead if endpoint == "chat" else self.bos)

    def input_ids(self, content, endpoint):
        """Ids of a template whose head is 4 tokens (chat; the BOS otherwise) and the words'."""
        ids = []
        for w in content.split():
            word_id = zlib.crc32(w.encode())
            ids += [word_id] if self.count_text(w) == 1 else [word_id, word_id + 1]
        if endpoint == "chat":
            return [-1] * 4 + ids + [-2] * (self.chat_overhead - 4)
        return [-3] * self.bos + ids


@pytest.mark.parametrize("max_len", [3, 4])
def test_single_token_words_found_by_bisection(max_len):
    counter = FakeCounter(max_len=max_len)
    words = find_single_token_words(counter, WORDS)
    assert set(words) == {w for w in set(WORDS) if len(w) <= max_len}


def test_bisection_is_cheap_when_most_words_are_single_tokens():
    counter = FakeCounter()
    counter.split_letters = {"z", "x", "q", "j", "v"}  # like real vocabularies: a few words split
    words = find_single_token_words(counter, WORDS)
    assert len(WORDS) - len(words) >= 10
    assert counter.calls < len(WORDS) // 3


@pytest.mark.parametrize("endpoint,template", [("chat", 9), ("completions", 1)])
def test_calibrated_prompts_are_exact_and_unique(endpoint, template):
    counter = FakeCounter()
    plan = calibrate(counter, endpoint, input_tokens=2048)
    assert plan.overhead == template + counter.count_text(
        LEAD
    )  # template (or BOS) plus the LEAD word
    factory = PromptFactory(plan, seed=1)
    contents = [factory.next_content() for _ in range(200)]
    assert all(counter.count_input(c, endpoint) == 2048 for c in contents)
    heads = {" ".join(c.split()[1 : 1 + UNIQUE_HEAD_ATOMS]) for c in contents}
    assert len(heads) == 200  # every prompt starts differently: no prefix-cache hits
    assert all(c.startswith(LEAD) for c in contents)


@pytest.mark.parametrize("endpoint,template_head", [("chat", 4), ("completions", 1)])
def test_calibration_finds_the_tokens_before_the_first_atom(endpoint, template_head):
    """The template's head and LEAD come before the content's first atom, the rest of the
    overhead after its last: what the prefix-cache prediction of trace prompts needs."""
    counter = FakeCounter()
    plan = calibrate(counter, endpoint, input_tokens=2048)
    head = template_head + counter.count_text(LEAD)
    assert plan.head_tokens == head
    assert plan.tail_tokens == plan.overhead - head
    assert plan.to_json()["head_tokens"] == head


def test_the_head_is_unknown_when_the_ids_disagree_with_the_overhead():
    class Shifty(FakeCounter):
        def input_ids(self, content, endpoint):
            return super().input_ids(content, endpoint) + [len(content)]  # a tail that varies

    plan = calibrate(Shifty(), "chat", input_tokens=2048)
    assert plan.head_tokens is None and plan.tail_tokens is None
    assert calibrate(FakeCounter(), "chat", 2048).overhead == plan.overhead  # exact all the same


def test_shared_prefix_is_common_and_length_still_exact():
    counter = FakeCounter()
    plan = calibrate(counter, "chat", input_tokens=1000, shared_prefix_tokens=300)
    factory = PromptFactory(plan, seed=2)
    a, b = factory.next_content(), factory.next_content()
    assert a.split()[:301] == b.split()[:301]
    assert a.split()[301 : 301 + UNIQUE_HEAD_ATOMS] != b.split()[301 : 301 + UNIQUE_HEAD_ATOMS]
    assert counter.count_input(a, "chat") == counter.count_input(b, "chat") == 1000


def test_refuses_when_counts_are_not_additive():
    with pytest.raises(CalibrationError, match="approximate-prompts"):
        calibrate(FakeCounter(additive=False), "chat", input_tokens=512)


def test_refuses_too_short_input_with_a_clear_message():
    with pytest.raises(CalibrationError, match="too short"):
        calibrate(FakeCounter(chat_overhead=30), "chat", input_tokens=40)


def test_refuses_tokenizers_without_enough_single_token_words():
    with pytest.raises(CalibrationError, match="single tokens"):
        calibrate(FakeCounter(max_len=1), "chat", input_tokens=512)


def test_approximate_plan_counts_words():
    plan = approximate_plan("chat", 300)
    content = PromptFactory(plan).next_content()
    assert len(content.split()) == 300


def test_a_plan_handed_over_is_taken_only_for_its_target_and_options(monkeypatch):
    from dataclasses import replace

    from vllm_load.client.prompts import HANDED_PLAN_ENV, handed_over, handed_plan
    from vllm_load.settings import Settings

    settings = Settings(input_tokens=1000, shared_prefix_tokens=100)
    plan = calibrate(FakeCounter(), settings.endpoint, 1000, shared_prefix_tokens=100)
    env = handed_over(plan, "http://127.0.0.1:8000/", "m", settings)
    monkeypatch.setenv(HANDED_PLAN_ENV, env[HANDED_PLAN_ENV])
    # the same target (a trailing slash or not) and options: the very plan, prompts and all
    taken = handed_plan("http://127.0.0.1:8000", "m", settings)
    assert taken == plan and taken.head_tokens == plan.head_tokens == 6
    assert PromptFactory(taken, seed=1).next_content() == PromptFactory(plan, seed=1).next_content()
    # anything a calibration depends on differs: this process calibrates for itself
    assert handed_plan("http://127.0.0.1:8001", "m", settings) is None
    assert handed_plan("http://127.0.0.1:8000", "other", settings) is None
    for changed in (
        replace(settings, input_tokens=999),
        replace(settings, shared_prefix_tokens=0),
        replace(settings, tokenizer="/some/tokenizer"),
        replace(settings, endpoint="completions"),
    ):
        assert handed_plan("http://127.0.0.1:8000", "m", changed) is None
    # a value that does not parse is no plan (and no crash)
    monkeypatch.setenv(HANDED_PLAN_ENV, "{not json")
    assert handed_plan("http://127.0.0.1:8000", "m", settings) is None
    monkeypatch.delenv(HANDED_PLAN_ENV)
    assert handed_plan("http://127.0.0.1:8000", "m", settings) is None


def test_a_process_calibrates_once_per_target_and_options(monkeypatch):
    from dataclasses import replace

    from vllm_load.client import prompts
    from vllm_load.settings import Settings

    monkeypatch.setattr(prompts, "_PLANS", {})
    monkeypatch.delenv(prompts.HANDED_PLAN_ENV, raising=False)
    calls = []

    def calibrate_target(host, model, settings):
        calls.append((host, model, settings.input_tokens))
        return calibrate(FakeCounter(), settings.endpoint, settings.input_tokens)

    monkeypatch.setattr(prompts, "calibrate_target", calibrate_target)
    settings = Settings(input_tokens=1000)
    # the run session, then each user of the process: the target is asked once
    first = prompts.prompt_plan("http://h:8000/", "m", settings)
    assert prompts.prompt_plan("http://h:8000", "m", settings) is first
    assert len(calls) == 1
    # other options, another target: a calibration of their own
    prompts.prompt_plan("http://h:8000", "m", replace(settings, input_tokens=999))
    prompts.prompt_plan("http://h:8001", "m", settings)
    assert len(calls) == 3
