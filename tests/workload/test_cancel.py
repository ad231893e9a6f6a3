"""--cancel-share and --cancel-after: what they accept, what they refuse in one line, and the
per-request choice (`workload.cancel`)."""

from __future__ import annotations

import pytest

from vllm_load.settings import Settings
from vllm_load.user_values import SettingsError
from vllm_load.workload.cancel import (
    CancelDraws,
    CancelPoint,
    parse_cancel_after,
    share_argument,
)


@pytest.mark.parametrize(
    "given, tokens, low, high",
    [
        ("32tok", True, 32, 32),
        ("uniform:16,64tok", True, 16, 64),
        ("2s", False, 2000, 2000),
        ("500ms", False, 500, 500),
        ("uniform:0.5,1.5s", False, 500, 1500),
        ("normal:1,0.2,min=0.5,max=2s", False, 500, 2000),
        (" 1.5 S ", False, 1500, 1500),
    ],
)
def test_a_time_or_a_number_of_tokens_in_the_length_syntax(given, tokens, low, high):
    import random

    after = parse_cancel_after(given)
    assert after.tokens is tokens
    rng = random.Random(1)
    points = [after.sample(rng) for _ in range(200)]
    if tokens:
        values = [p.tokens for p in points]
        assert all(p.seconds is None for p in points)
    else:
        values = [round(p.seconds * 1000) for p in points]
        assert all(p.tokens is None for p in points)
    assert min(values) >= low and max(values) <= high


@pytest.mark.parametrize(
    "given, words",
    [
        ("32", "no unit"),
        ("tok", "no unit"),
        ("uniform:64,16tok", "LO 64 is above HI 16"),
        ("2toks", "whole number"),
        ("0s", "below min=1"),
        ("fast", "no unit"),
        ("uniform:3,1s", "in ms 'uniform:3000,1000': LO 3000 is above HI 1000"),
    ],
)
def test_a_bad_cancel_after_is_one_line_that_says_what_to_give(given, words):
    with pytest.raises(SettingsError) as caught:
        parse_cancel_after(given)
    message = str(caught.value)
    assert "\n" not in message and words in message and "--cancel-after" in message
    assert "32tok" in message and "2s" in message  # what to give


@pytest.mark.parametrize("given", ["-0.1", "1.5", "nan", "half", "", "inf"])
def test_a_share_outside_0_to_1_or_not_a_number_is_refused(given):
    with pytest.raises(SettingsError, match=r"--cancel-share must be a share of requests from 0"):
        share_argument(given)


def test_the_settings_refuse_half_a_pair_and_tokens_without_streams():
    class Options:
        cancel_share = "0.2"
        cancel_after = ""

    with pytest.raises(SettingsError, match="--cancel-share needs --cancel-after"):
        Settings.from_options(Options())
    Options.cancel_share, Options.cancel_after = "0", "2s"
    with pytest.raises(SettingsError, match="--cancel-share is 0"):
        Settings.from_options(Options())
    Options.cancel_share, Options.cancel_after = "0.2", "8tok"
    Options.no_stream = True
    with pytest.raises(SettingsError, match="--no-stream streams none"):
        Settings.from_options(Options())
    Options.cancel_after = "uniform:1,2s"
    settings = Settings.from_options(Options())
    assert (settings.cancel_share, settings.cancel_after) == (0.2, "uniform:1,2s")


def test_the_choice_takes_the_share_and_repeats_with_its_seed():
    after = parse_cancel_after("uniform:4,8tok")
    draws = [CancelDraws(0.3, after, seed=7).draw() for _ in range(1)]
    first = CancelDraws(0.3, after, seed=7)
    again = CancelDraws(0.3, after, seed=7)
    a = [first.draw() for _ in range(5000)]
    assert a == [again.draw() for _ in range(5000)]
    chosen = [p for p in a if p is not None]
    assert 0.27 < len(chosen) / len(a) < 0.33
    assert all(isinstance(p, CancelPoint) and 4 <= p.tokens <= 8 for p in chosen)
    assert draws[0] == a[0]
    assert all(CancelDraws(0.0, after, seed=1).draw() is None for _ in range(1000))
    assert all(CancelDraws(1.0, after, seed=1).draw() is not None for _ in range(1000))


def test_a_point_names_itself_in_the_record():
    assert CancelPoint(None, 32).label == "32tok"
    assert CancelPoint(1.5, None).label == "1.500s"
