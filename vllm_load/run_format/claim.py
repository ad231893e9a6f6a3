"""Claiming a run directory, so that one run writes in it however many start at once.

`vllm-load run --run-dir DIR` checked that DIR held no run, then started Locust, whose files
came seconds later: two runs started at once both passed the check, one Locust found the other's
files and stopped, and its command then closed the other's live run as `interrupted`. The command
now claims DIR before it starts Locust, in one atomic step: it creates run.json exclusively,
holding only the claim (outcome `claimed`, a token). A second claim fails there, before it has
changed anything. The Locust it starts is given the token (`CLAIM_ENV`) and writes the real
run.json over its claim; a writer started without one (the web UI's tests, `locust -f`) claims
the directory itself. A claim Locust never took over (it did not start) is given back.
"""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass

from ..user_values import SettingsError
from .files import RUN_JSON

CLAIM_ENV = "VLLM_LOAD_RUN_CLAIM"
CLAIMED = "claimed"  # run.json's outcome while the directory is only claimed


@dataclass(frozen=True)
class Claim:
    run_dir: str
    token: str
    made_dir: bool  # the claim created the directory (given back, it is removed if empty)

    def held(self) -> bool:
        """Whether run.json is still this claim (no writer has taken it over)."""
        return claim_token(self.run_dir) == self.token

    def give_back(self) -> None:
        """Remove the claim if no writer took it over (and the directory it made, if empty)."""
        if not self.held():
            return
        os.remove(os.path.join(self.run_dir, RUN_JSON))
        if self.made_dir and not os.listdir(self.run_dir):
            os.rmdir(self.run_dir)


def claim(run_dir: str) -> Claim:
    """Claim `run_dir` (made if missing) for one run; SettingsError, changing nothing in it,
    when it holds a run or another run has claimed it."""
    made = not os.path.isdir(run_dir)
    os.makedirs(run_dir, exist_ok=True)
    token = secrets.token_hex(8)
    try:
        fd = os.open(os.path.join(run_dir, RUN_JSON), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        raise SettingsError(
            f"--run-dir {run_dir} already holds a run, or another run started at the same time "
            "writes there: name a new directory, or leave --run-dir out (each run then gets its "
            "own under --out)"
        ) from None
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump({"outcome": CLAIMED, "claim": token, "pid": os.getpid()}, fh)
        fh.write("\n")
    return Claim(run_dir, token, made)


def claim_token(run_dir: str) -> str:
    """The token of the claim run.json holds ("" when it holds none, or a run)."""
    try:
        with open(os.path.join(run_dir, RUN_JSON), encoding="utf-8") as fh:
            run = json.load(fh)
    except (OSError, ValueError):
        return ""
    if not isinstance(run, dict) or run.get("outcome") != CLAIMED:
        return ""
    return str(run.get("claim") or "")


def claimed_for_us(run_dir: str) -> bool:
    """Whether `run_dir` was claimed for this process by the command that started it."""
    token = os.environ.get(CLAIM_ENV, "")
    return bool(token) and claim_token(run_dir) == token
