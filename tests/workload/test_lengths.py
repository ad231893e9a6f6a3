"""Length specs: each kind parses, samples whole lengths within its clip with the statistics it
names, reports its mean, and a bad spec is one line naming what is wrong and the forms."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from vllm_load.user_values import SettingsError
from vllm_load.workload.lengths import LengthDistribution, parse_length

DRAWS = 20_000


def draws(spec: str, seed: int = 7) -> list[int]:
    dist = parse_length(spec)
    rng = random.Random(seed)
    return [dist.sample(rng) for _ in range(DRAWS)]


@pytest.mark.parametrize(
    "spec, expected",
    [
        ("512", LengthDistribution("fixed", 512, 512)),
        ("fixed:512", LengthDistribution("fixed", 512, 512)),
        (" Uniform: 10, 20 ", LengthDistribution("uniform", 10, 20)),
        ("normal:100,30", LengthDistribution("normal", 100, 30)),
        ("lognormal:300,200,min=16", LengthDistribution("lognormal", 300, 200, 16)),
        ("normal:100,30,max=150,min=50", LengthDistribution("normal", 100, 30, 50, 150)),
        ("64,max=64", LengthDistribution("fixed", 64, 64, 1, 64)),
    ],
)
def test_specs_parse(spec, expected):
    assert parse_length(spec) == expected
    assert parse_length(expected.spec) == expected  # the canonical spec reads back


def test_fixed_is_always_its_length():
    assert set(draws("fixed:512")) == {512}
    assert parse_length("512").mean == 512


def test_uniform_covers_its_inclusive_range_evenly():
    values = draws("uniform:10,20")
    assert set(values) == set(range(10, 21))
    counts = statistics.Counter(values)
    assert min(counts.values()) > DRAWS / 11 * 0.85
    assert statistics.fmean(values) == pytest.approx(15, abs=0.1)
    assert parse_length("uniform:10,20").mean == 15


@pytest.mark.parametrize("kind", ["normal", "lognormal"])
def test_mean_and_sd_are_those_of_the_lengths(kind):
    values = draws(f"{kind}:300,60")
    assert all(isinstance(v, int) for v in values)
    assert statistics.fmean(values) == pytest.approx(300, rel=0.02)
    assert statistics.pstdev(values) == pytest.approx(60, rel=0.05)
    assert parse_length(f"{kind}:300,60").mean == pytest.approx(300, rel=0.001)


def test_lognormal_is_skewed_and_converts_to_log_space():
    dist = parse_length("lognormal:300,200")
    mu, sigma = dist.log_params
    assert sigma == pytest.approx(math.sqrt(math.log(1 + (200 / 300) ** 2)))
    assert math.exp(mu + sigma**2 / 2) == pytest.approx(300)
    values = draws("lognormal:300,200")
    assert statistics.median(values) < statistics.fmean(values)  # a long right tail
    assert statistics.fmean(values) == pytest.approx(300, rel=0.03)
    assert statistics.pstdev(values) == pytest.approx(200, rel=0.1)


@pytest.mark.parametrize(
    "spec",
    [
        "normal:10,20",  # a third of the draws fall under 1 and become 1
        "normal:100,50,min=80,max=120",
        "lognormal:300,200,min=50,max=400",
        "uniform:1,100,min=20,max=50",
        "uniform:1,100,max=10",
        "normal:5,0,min=6",
        "lognormal:1000,10,max=1000",
    ],
)
def test_clipping_holds_and_the_mean_follows_it(spec):
    dist = parse_length(spec)
    values = draws(spec)
    assert min(values) >= dist.clip_min >= 1
    if dist.clip_max is not None:
        assert max(values) <= dist.clip_max
    assert dist.mean == pytest.approx(statistics.fmean(values), rel=0.02, abs=0.5)


def test_clipping_clamps_rather_than_redraws():
    values = draws("normal:100,50,min=80,max=120")
    assert values.count(80) > DRAWS * 0.3 and values.count(120) > DRAWS * 0.3


def test_a_seed_gives_the_same_lengths():
    assert draws("lognormal:300,200", seed=3) == draws("lognormal:300,200", seed=3)
    assert draws("lognormal:300,200", seed=3) != draws("lognormal:300,200", seed=4)


@pytest.mark.parametrize(
    "spec, says",
    [
        ("", "empty"),
        ("gamma:1,2", "unknown kind 'gamma'"),
        ("uniform:10", "uniform takes 2 numbers, got 1"),
        ("fixed:1,2", "fixed takes 1 number, got 2"),
        ("uniform:20,10", "LO 20 is above HI 10"),
        ("uniform:1.5,10", "LO and HI must be whole numbers, got '1.5'"),
        ("fixed:12.5", "the length must be a whole number, got '12.5'"),
        ("normal:abc,10", "MEAN and SD must be numbers, got 'abc'"),
        ("normal:nan,10", "must be finite"),
        ("normal:100,-1", "SD must not be negative"),
        ("lognormal:0,10", "MEAN must be above 0"),
        ("512,min=0", "min= must be at least 1"),
        ("normal:100,10,min=50,max=20", "max=20 is below min=50"),
        ("normal:100,10,min=x", "min= must be a whole number, got 'x'"),
        ("normal:100,10,step=2", "unknown setting 'step'"),
        ("normal:100,10,max=5,max=6", "max= given twice"),
        ("normal:100,max=200,10", "'10' after min=/max="),
        ("fixed:10,min=20", "the length 10 is below min=20"),
        ("fixed:10,max=5", "the length 10 is above max=5"),
        ("uniform:1,5,min=10", "HI 5 is below min=10"),
    ],
)
def test_a_bad_spec_is_one_line_with_the_forms(spec, says):
    with pytest.raises(SettingsError) as error:
        parse_length(spec, name="--output-tokens")
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith(f"--output-tokens {spec!r}: ")
    assert says in message
    assert "uniform:LO,HI" in message and "lognormal:MEAN,SD" in message and "min=N" in message
