"""Lengths in tokens (of a prompt or an output) drawn from a distribution written as one string.

The spec is `KIND:ARGS` with optional clipping after it, e.g. `512`, `uniform:128,1024`,
`normal:256,64,max=1024`, `lognormal:300,200,min=16,max=4096`; the syntax is in docs/workload.md.
`parse_length` reads it (a bad spec is a `SettingsError` of one line), `LengthDistribution.sample`
draws from it with the caller's `random.Random`, so a seeded run draws the same lengths.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Callable

from ..user_values import SettingsError

KINDS = ("fixed", "uniform", "normal", "lognormal")

FORMS = (
    "give N, fixed:N, uniform:LO,HI, normal:MEAN,SD or lognormal:MEAN,SD, "
    "optionally followed by ,min=N,max=N (e.g. normal:512,128,max=2048)"
)


@dataclass(frozen=True)
class LengthDistribution:
    """A distribution of lengths in whole tokens, clipped to [clip_min, clip_max].

    `a` and `b` are the kind's two numbers: for `fixed` the length (both), for `uniform` LO and
    HI (inclusive), for `normal` and `lognormal` the mean and standard deviation of the lengths
    themselves (for `lognormal` they are converted to the log-space parameters when sampling;
    see `log_params`). A draw is rounded to a whole number, then clipped (clamped: a draw below
    clip_min becomes clip_min, not drawn again).
    """

    kind: str
    a: float
    b: float
    clip_min: int = 1
    clip_max: int | None = None

    def sample(self, rng: random.Random) -> int:
        """One length: a whole number >= 1, within the clip."""
        if self.kind == "fixed":
            value = int(self.a)
        elif self.kind == "uniform":
            value = rng.randint(int(self.a), int(self.b))
        elif self.kind == "normal":
            value = math.floor(rng.gauss(self.a, self.b) + 0.5)
        else:
            mu, sigma = self.log_params
            value = math.floor(rng.lognormvariate(mu, sigma) + 0.5)
        return self._clip(value)

    def _clip(self, value: int) -> int:
        if value < self.clip_min:
            return self.clip_min
        if self.clip_max is not None and value > self.clip_max:
            return self.clip_max
        return value

    @property
    def log_params(self) -> tuple[float, float]:
        """(mu, sigma) of the underlying normal of a `lognormal` whose lengths have mean `a` and
        standard deviation `b`: sigma^2 = ln(1 + b^2/a^2), mu = ln(a) - sigma^2/2."""
        sigma2 = math.log1p((self.b / self.a) ** 2)
        return math.log(self.a) - sigma2 / 2, math.sqrt(sigma2)

    @property
    def mean(self) -> float:
        """The expected value of `sample()`, clipping included.

        Exact for `fixed` and `uniform`. For `normal` and `lognormal` the clipped continuous
        distribution's mean, each bound moved half a token inwards for the rounding: the rounding
        inside the clip is taken as unbiased, which holds to well under a token once SD > 1.
        """
        lo, hi = self.clip_min, self.clip_max
        if self.kind == "fixed":
            return float(self._clip(int(self.a)))
        if self.kind == "uniform":
            return _uniform_clipped_mean(int(self.a), int(self.b), lo, hi)
        if self.b == 0:
            return float(self._clip(math.floor(self.a + 0.5)))
        # a draw rounds to the bound (or past it) from half a token inside it
        lower = lo + 0.5
        upper = math.inf if hi is None else hi - 0.5
        if upper <= lower:  # the clip is a single length, or two adjacent ones
            upper = lower = (lo + (hi if hi is not None else lo)) / 2
        if self.kind == "normal":
            below, above, inside = _normal_parts(self.a, self.b, lower, upper)
        else:
            below, above, inside = _lognormal_parts(*self.log_params, lower, upper)
        return lo * below + (0.0 if hi is None else hi * above) + inside

    @property
    def spec(self) -> str:
        """The distribution as a spec `parse_length` reads back (for logs and run metadata)."""
        numbers = {
            "fixed": f"{int(self.a)}",
            "uniform": f"{int(self.a)},{int(self.b)}",
        }.get(self.kind, f"{self.a:g},{self.b:g}")
        text = f"{self.kind}:{numbers}"
        if self.clip_min != 1:
            text += f",min={self.clip_min}"
        if self.clip_max is not None:
            text += f",max={self.clip_max}"
        return text

    def __str__(self) -> str:
        return self.spec


def _uniform_clipped_mean(a: int, b: int, lo: int, hi: int | None) -> float:
    """Mean of clamp(X, lo, hi) for X uniform on the integers a..b."""
    top = b if hi is None else hi
    total = 0
    n = b - a + 1
    below = max(0, min(b, lo - 1) - a + 1)  # values under lo, raised to lo
    above = max(0, b - max(a, top + 1) + 1)  # values over hi, lowered to hi
    first, last = max(a, lo), min(b, top)
    if last >= first:
        total += (first + last) * (last - first + 1) // 2
    total += below * lo + above * top
    return total / n


def _phi(x: float) -> float:
    """The standard normal CDF."""
    return 0.5 * math.erfc(-x / math.sqrt(2))


def _normal_parts(mean: float, sd: float, lower: float, upper: float):
    """P(X < lower), P(X > upper) and E[X; lower <= X <= upper] for X ~ N(mean, sd)."""
    alpha = (lower - mean) / sd
    beta = (upper - mean) / sd
    p_alpha, p_beta = _phi(alpha), _phi(beta)
    density = math.exp(-(alpha**2) / 2) - (0.0 if math.isinf(beta) else math.exp(-(beta**2) / 2))
    inside = mean * (p_beta - p_alpha) + sd * density / math.sqrt(2 * math.pi)
    return p_alpha, 1 - p_beta, inside


def _lognormal_parts(mu: float, sigma: float, lower: float, upper: float):
    """P(X < lower), P(X > upper) and E[X; lower <= X <= upper] for ln X ~ N(mu, sigma)."""
    if sigma == 0:
        x = math.exp(mu)
        return float(x < lower), float(x > upper), x if lower <= x <= upper else 0.0
    z_lo = (math.log(lower) - mu) / sigma
    z_hi = math.inf if math.isinf(upper) else (math.log(upper) - mu) / sigma
    scale = math.exp(mu + sigma**2 / 2)
    inside = scale * (_phi(z_hi - sigma) - _phi(z_lo - sigma))
    return _phi(z_lo), 1 - _phi(z_hi), inside


def parse_length(spec: str, name: str = "length", forms: str = FORMS) -> LengthDistribution:
    """The `LengthDistribution` a spec describes; `name` (an option such as --output-tokens)
    starts the one-line `SettingsError` a bad spec raises, `forms` (what to give) ends it."""
    text = str(spec).replace(" ", "")

    def bad(what: str) -> SettingsError:
        return SettingsError(f"{name} {spec!r}: {what}; {forms}")

    if not text:
        raise bad("empty")
    kind, colon, rest = text.partition(":")
    if not colon:
        kind, rest = "fixed", text
    kind = kind.lower()
    if kind not in KINDS:
        raise bad(f"unknown kind {kind!r}")
    numbers: list[str] = []
    clip: dict[str, int] = {}
    for part in rest.split(","):
        key, eq, value = part.partition("=")
        if not eq:
            if clip:
                raise bad(f"{part!r} after min=/max=")
            numbers.append(part)
            continue
        if key not in ("min", "max"):
            raise bad(f"unknown setting {key!r}")
        if key in clip:
            raise bad(f"{key}= given twice")
        clip[key] = _whole(value, f"{key}= must be a whole number", bad)
    want = 1 if kind == "fixed" else 2
    if len(numbers) != want:
        raise bad(f"{kind} takes {want} number{'s' * (want > 1)}, got {len(numbers)}")
    clip_min = clip.get("min", 1)
    clip_max = clip.get("max")
    if clip_min < 1:
        raise bad(f"min= must be at least 1, got {clip_min}")
    if clip_max is not None and clip_max < clip_min:
        raise bad(f"max={clip_max} is below min={clip_min}")
    if kind == "fixed":
        n = _whole(numbers[0], "the length must be a whole number", bad)
        if n < clip_min:
            raise bad(f"the length {n} is below min={clip_min}")
        if clip_max is not None and n > clip_max:
            raise bad(f"the length {n} is above max={clip_max}")
        return LengthDistribution("fixed", n, n, clip_min, clip_max)
    if kind == "uniform":
        lo, hi = (_whole(x, "LO and HI must be whole numbers", bad) for x in numbers)
        if lo > hi:
            raise bad(f"LO {lo} is above HI {hi}")
        if hi < clip_min:
            raise bad(f"HI {hi} is below min={clip_min}: every length would be {clip_min}")
        if clip_max is not None and lo > clip_max:
            raise bad(f"LO {lo} is above max={clip_max}: every length would be {clip_max}")
        return LengthDistribution("uniform", lo, hi, clip_min, clip_max)
    mean, sd = (_number(x, "MEAN and SD", bad) for x in numbers)
    if sd < 0:
        raise bad(f"SD must not be negative, got {sd:g}")
    if kind == "lognormal" and mean <= 0:
        raise bad(f"a lognormal's MEAN must be above 0, got {mean:g}")
    return LengthDistribution(kind, mean, sd, clip_min, clip_max)


def _whole(text: str, what: str, bad) -> int:
    try:
        return int(text)
    except ValueError:
        raise bad(f"{what}, got {text!r}") from None


def _number(text: str, what: str, bad) -> float:
    try:
        value = float(text)
    except ValueError:
        raise bad(f"{what} must be numbers, got {text!r}") from None
    if not math.isfinite(value):
        raise bad(f"{what} must be finite, got {text!r}")
    return value


def length_argument(name: str) -> Callable[[str], str]:
    """A parser for an option holding a length spec: "" stays unset, anything else is checked
    and written back in its canonical form (`LengthDistribution.spec`)."""

    def parse(value: str) -> str:
        text = str(value or "").strip()
        return parse_length(text, name).spec if text else ""

    return parse


class LengthDraws:
    """The token counts one load process asks for, request by request: fixed (`input_tokens`,
    `output_tokens`), or drawn from the distributions their specs give ("" for fixed)."""

    def __init__(
        self,
        input_tokens: int,
        output_tokens: int,
        input_spec: str = "",
        output_spec: str = "",
        seed: int | None = None,
    ) -> None:
        self.input_tokens = input_tokens
        self.output_tokens = output_tokens
        self._input = parse_length(input_spec, "--input-lengths") if input_spec else None
        self._output = parse_length(output_spec, "--output-lengths") if output_spec else None
        self._rng = random.Random(seed)

    @property
    def output_varies(self) -> bool:
        return self._output is not None

    def draw_input(self, minimum: int = 1) -> int:
        """A prompt length: --input-tokens, or a draw raised to `minimum` (the shortest prompt
        the chat template and the prompt's fixed parts allow)."""
        if self._input is None:
            return self.input_tokens
        return max(minimum, self._input.sample(self._rng))

    def draw_output(self) -> int:
        """An output length: --output-tokens, or a draw."""
        return self.output_tokens if self._output is None else self._output.sample(self._rng)
