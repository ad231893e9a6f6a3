"""What a format's reader hands on: the requests of a file in file order, times in the file's own
unit (so rebasing them loses nothing), and the rows it left out by reason."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass
class Rows:
    """Parallel lists, one entry per request, in file order. `units_per_second`: the times'
    unit (1000 for milliseconds); `lines`: how many lines the file has."""

    units_per_second: float
    times: list[float] = field(default_factory=list)
    prompts: list[int] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)
    hash_ids: list[tuple[int, ...]] = field(default_factory=list)
    skip_reasons: Counter[str] = field(default_factory=Counter)
    lines: int = 0

    def add(self, time: float, prompt: int, output: int, hash_ids: tuple[int, ...] = ()) -> None:
        self.times.append(time)
        self.prompts.append(prompt)
        self.outputs.append(output)
        self.hash_ids.append(hash_ids)
