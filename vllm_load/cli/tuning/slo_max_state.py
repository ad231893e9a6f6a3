"""The SLO-max search's file (`slo_max.json`): what the search is, so that only the same one
resumes, and every level measured so far, in order, with its judgement. The guided search's
file has the same shape (`write_search_file`, `read_search_file`)."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Collection

from ...analysis.decisions.slo_interval import ItemFigure
from ...analysis.decisions.slo_search import Probe
from ...run_format.files import write_atomic
from ...user_values import SettingsError

STATE_FILE = "slo_max.json"
TABLE_FILE = "slo_max.md"


@dataclass
class Level:
    """One measured level, as `slo_max.json` keeps it."""

    level: float
    run_dir: str
    items: list[dict]  # ItemFigure fields, per SLO item
    verdict: str  # holds / fails / straddles / unknown: what its intervals prove
    #: why the client was late during the level ("" on time): its TTFT and ITL then hold the
    #: load generator's own delay (`analysis.levels.client_side.late_levels`)
    late: str = ""
    #: the runs of this level that missed while the client was late and were measured again
    #: (`Search.measure_trusted`): level runs spent, not evidence
    late_runs: list[str] = field(default_factory=list)

    @property
    def runs(self) -> int:
        """The level runs this level took: its own and the late ones measured again."""
        return 1 + len(self.late_runs)

    @property
    def figures(self) -> list[ItemFigure]:
        return [ItemFigure(**i) for i in self.items]

    @property
    def probe(self) -> Probe:
        return Probe(self.level, tuple(f.ratio for f in self.figures))


# --- a resumable search's file ----------------------------------------------------------------
def write_search_file(path: str, search: dict, key: str, entries: list, result: dict) -> None:
    """A search's file: what it is, its entries (dataclasses) under `key`, its result if any."""
    data = {
        "format": 1,
        "search": search,
        key: [asdict(e) for e in entries],
        **({"result": result} if result else {}),
    }
    write_atomic(path, json.dumps(data, indent=2, default=str))


def read_search_file(
    path: str,
    search: dict,
    key: str,
    build: Callable[[dict], Any],
    may_change: Collection[str],
    what: str,
) -> list | None:
    """The entries of the search at `path` (`build` makes each), None without a file;
    SettingsError, one line, when it cannot be read or holds another search than `search` (the
    keys `may_change` aside)."""
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
        entries = [build(e) for e in data[key]]
        before = data["search"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SettingsError(f"cannot read {path} ({e}); pass --name to start another") from None
    changed = [k for k in search if k not in may_change and before.get(k) != search[k]]
    if changed:
        raise SettingsError(
            f"{os.path.dirname(path)} holds {what} with other {', '.join(changed)} (it resumes "
            "only the same search): pass --name to start another"
        )
    return entries


def _level(data: dict) -> Level:
    level = Level(**data)
    level.figures  # every item readable
    return level


@dataclass
class SearchState:
    """What `slo_max.json` holds: what the search is (it resumes only the same one) and every
    level measured so far, in order."""

    search: dict
    levels: list[Level] = field(default_factory=list)
    result: dict = field(default_factory=dict)

    def save(self, directory: str) -> None:
        path = os.path.join(directory, STATE_FILE)
        write_search_file(path, self.search, "levels", self.levels, self.result)

    @classmethod
    def load(cls, directory: str, search: dict) -> "SearchState":
        """The directory's search, or a new one; SettingsError, one line, when it holds another
        search or cannot be read."""
        path = os.path.join(directory, STATE_FILE)
        levels = read_search_file(path, search, "levels", _level, ("bounds",), "a search")
        return cls(search, levels or [])
