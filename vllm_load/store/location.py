"""Where the results store is: `--store`, else `$VLLM_LOAD_STORE`, else an SQLite file in the
user's data directory (`$XDG_DATA_HOME/vllm-load/results.sqlite`, default `~/.local/share/...`),
as the advice record (`run_format.advice_record`). A plain path is an SQLite file; a URL
(`postgresql://user@host/db`, read with psycopg 3) is given to SQLAlchemy; `none` stores nothing.

A URL's password is never printed or written: `shown` is the URL as every message names it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

STORE_ENV = "VLLM_LOAD_STORE"
OFF = "none"
#: PostgreSQL's plain URL: SQLAlchemy would take it for psycopg2; vllm-load[postgresql] is psycopg 3
_POSTGRES = re.compile(r"^postgres(?:ql)?://", re.IGNORECASE)
_SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*://", re.IGNORECASE)
#: `scheme://user:password@` -> the password
_PASSWORD = re.compile(r"^([a-z][a-z0-9+.-]*://[^/@:]*):([^/@]*)@", re.IGNORECASE)


def default_path() -> str:
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "share"
    )
    return os.path.join(base, "vllm-load", "results.sqlite")


@dataclass(frozen=True)
class StoreLocation:
    """A store's SQLAlchemy URL, whether the user named it (`--store`, the environment) or it is
    the default, and the SQLite file it is (empty for a server)."""

    url: str
    explicit: bool
    sqlite_path: str = ""

    @property
    def shown(self) -> str:
        """The URL as messages name it: its password, if any, as ***."""
        return hide_password(self.url)


def hide_password(url: str) -> str:
    return _PASSWORD.sub(r"\1:***@", url)


def locate(given: str | None) -> StoreLocation | None:
    """The store `given` (`--store`) or the environment names, else the default; None for
    `none`."""
    explicit = bool(given) or bool(os.environ.get(STORE_ENV))
    text = given or os.environ.get(STORE_ENV) or default_path()
    if text.strip().lower() == OFF:
        return None
    if _SCHEME.match(text):
        text = _POSTGRES.sub("postgresql+psycopg://", text)
        sqlite = text.startswith("sqlite:///")
        return StoreLocation(text, explicit, text[len("sqlite:///") :] if sqlite else "")
    path = os.path.abspath(os.path.expanduser(text))
    return StoreLocation(f"sqlite:///{path}", explicit, path)
