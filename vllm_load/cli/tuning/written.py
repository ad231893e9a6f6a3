"""Whether a tuning's report or page would be written as it already is, so it is not rebuilt.

`tune` writes its report (every completed run measured and drawn) and its search page on every
call, also on a resume that ran nothing: 4-6 s of CPU for the same bytes. Each output is
remembered by a fingerprint of what it shows (the run directories and their files, the options,
vllm-load's version); an output whose fingerprint is unchanged and whose files are all still
there is not rebuilt.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any, Sequence

from ... import __version__
from ...run_format.files import write_atomic

#: the fingerprints of a tuning directory's outputs, by output name
WRITTEN_FILE = "written.json"


def fingerprint(*parts: Any) -> str:
    """A digest of `parts` (JSON-able, else their repr) and of vllm-load's version."""
    text = json.dumps([__version__, *parts], sort_keys=True, default=repr)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def run_files(run_dirs: Sequence[str]) -> list[list[Any]]:
    """Each run directory as its absolute path and its files' names, sizes and times: a run
    re-measured or rewritten reads as changed."""
    listed = []
    for run_dir in run_dirs:
        path = os.path.abspath(run_dir)
        with os.scandir(path) as entries:
            files = sorted(
                [e.name, e.stat().st_size, e.stat().st_mtime_ns] for e in entries if e.is_file()
            )
        listed.append([path, files])
    return listed


def _load(directory: str) -> dict[str, str]:
    try:
        with open(os.path.join(directory, WRITTEN_FILE), encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):  # none yet, or damaged: everything is rebuilt
        return {}
    return data if isinstance(data, dict) else {}


def unchanged(directory: str, name: str, key: str, outputs: Sequence[str]) -> bool:
    """Whether output `name` was last written from `key` and its files are all still there."""
    return _load(directory).get(name) == key and all(os.path.isfile(p) for p in outputs)


def remember(directory: str, name: str, key: str) -> None:
    """Output `name` has just been written from `key`."""
    data = _load(directory)
    data[name] = key
    write_atomic(os.path.join(directory, WRITTEN_FILE), json.dumps(data, indent=2))
