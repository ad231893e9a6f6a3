"""Which run directories the paths a user typed name: a run directory (recognised by its
`run.json`), a directory holding runs, or a glob of either. Without pandas: a command refuses a
path that names no run before it imports the analysis (`load` reads the runs into frames)."""

from __future__ import annotations

import glob
import os
from typing import Sequence

from .files import RUN_JSON


def is_run_dir(path: str) -> bool:
    return os.path.isdir(path) and os.path.isfile(os.path.join(path, RUN_JSON))


def _runs_below(path: str) -> list[str]:
    """Run directories one or two levels below `path` (runs/<model>/<run> or <model>/<run>)."""
    found = glob.glob(os.path.join(glob.escape(path), "*", RUN_JSON))
    found += glob.glob(os.path.join(glob.escape(path), "*", "*", RUN_JSON))
    return sorted(os.path.dirname(p) for p in found)


def expand_run_paths(patterns: Sequence[str]) -> list[str]:
    """Run directories named by `patterns`, in order and without duplicates.

    Each pattern is a run directory, a directory holding run directories (such as `runs/` or
    `runs/<model>/`), or a glob of either. Raises ValueError when a pattern matches nothing or
    names a directory that neither is nor holds a run.
    """
    out: list[str] = []
    for pattern in patterns:
        matches = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        if not matches or not any(os.path.exists(m) for m in matches):
            raise ValueError(f"{pattern}: no such run directory (nothing matches)")
        runs: list[str] = []
        for match in matches:
            if is_run_dir(match):
                runs.append(match)
            elif os.path.isdir(match):
                runs.extend(_runs_below(match))
        if not runs:
            raise ValueError(f"{pattern}: not a run directory (no {RUN_JSON}) and holds no runs")
        for run in runs:
            norm = os.path.normpath(run)
            if norm not in out:
                out.append(norm)
    return out
