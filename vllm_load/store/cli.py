"""`vllm-load store import RUN_DIR...` and `vllm-load history`, and the store's part of
`vllm-load run` (`add_store_argument`, `remember`): the results store's commands (docs/store.md).
SQLAlchemy and the analysis are imported when a command runs, never when the parser is built."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from ..user_values import SettingsError
from .location import OFF, STORE_ENV, StoreLocation, locate

STORE_HELP = (
    "an SQLite file's path, a SQLAlchemy URL (postgresql://user@host/db), or '{off}' (default: "
    "${env}, else $XDG_DATA_HOME/vllm-load/results.sqlite); a password in the URL is never "
    "printed or written"
)


def add_store_argument(
    parser: Any,  # a parser or an argument group
    what: str = "the results store the run is written to when it ends",
) -> None:
    text = STORE_HELP.format(off=OFF, env=STORE_ENV)
    parser.add_argument("--store", default=None, metavar="URL", help=f"{what}: {text}")


def configure_parser(parser: argparse.ArgumentParser, name: str) -> None:
    if name in ("history", "regress"):
        from .history import configure_history
        from .regress import configure_regress

        (configure_history if name == "history" else configure_regress)(parser)
        add_store_argument(parser, "the results store to read")
        return
    actions = parser.add_subparsers(dest="store_action", metavar="ACTION", required=True)
    imports = actions.add_parser(
        "import",
        help="store existing run directories (a run stored already is left as it is)",
        description="Store existing run directories: each one's metadata and per-level figures, "
        "as `vllm-load report` measures them. A run stored already (its run id) is left as it "
        "is. Exit status 2 when a directory could not be read (the others are stored).",
    )
    imports.add_argument(
        "runs",
        nargs="+",
        metavar="RUN_DIR",
        help="run directories, directories holding runs, or globs; a tune's or campaign's "
        "directory is stored as one, its runs linked to it",
    )
    add_store_argument(imports, "the results store to write to")


def _open(location: StoreLocation | None):
    """The store a command reads or writes: bad or unreachable, one line and exit 2."""
    from .db import StoreError, open_store

    if location is None:
        raise SettingsError(f"--store {OFF} stores nothing: name a store to use")
    try:
        return open_store(location)
    except StoreError as e:
        raise SettingsError(str(e)) from None


def import_runs(args: argparse.Namespace) -> int:
    from ..run_format.run_paths import expand_run_paths
    from .groups import group_kind

    groups = [p for p in args.runs if os.path.isdir(p) and group_kind(p)]
    others = [p for p in args.runs if p not in groups]
    try:
        paths = expand_run_paths(others) if others else []
    except ValueError as e:
        raise SettingsError(str(e)) from None
    store = _open(locate(args.store))
    try:
        refused = sum(_import_group(store, directory) for directory in groups)
        refused += sum(_import_run(store, path) for path in paths)
    finally:
        store.close()
    print(f"results store: {store.location.shown}")
    if refused:
        raise SettingsError(
            f"{refused} of {len(paths) + len(groups)} director(ies) could not be read (above)"
        )
    return 0


def _import_run(store, path: str) -> int:
    """Store one run directory; 1 when it could not be read (named), else 0."""
    from .record import stored_run

    try:
        run = stored_run(path)
    except ValueError as e:  # damaged: named, never stored
        print(f"vllm-load store: not imported: {e}", file=sys.stderr)
        return 1
    written = store.write(run)
    what = "stored" if written else "already stored"
    print(f"{what}: {run.run_id} ({run.model}, {len(run.levels)} level(s)) from {path}")
    return 0


def _import_group(store, directory: str) -> int:
    """Store a tune or campaign directory with its runs linked to it; 1 when it or one of its
    runs could not be read (named), else 0."""
    from .groups import read_group_runs, written_line

    try:
        read = read_group_runs(directory)
    except ValueError as e:
        print(f"vllm-load store: not imported: {e}", file=sys.stderr)
        return 1
    for line in read.unread:
        print(f"vllm-load store: not imported: {line}", file=sys.stderr)
    written = store.write_group(read.group, read.runs)
    print(f"{written_line(read, written)} from {directory}")
    return 1 if read.unread else 0


def main(args: argparse.Namespace) -> int:
    if args.command == "history":
        from .history import show_history

        return show_history(args, _open(locate(args.store)))
    if args.command == "regress":
        from .regress import regress

        return regress(args, _open(locate(args.store)))
    return import_runs(args)


def remember(run_dir: str, given: str | None, code: int) -> int:
    """Store the run that just ended in `run_dir` (`vllm-load run`'s last step); returns the exit
    status: `code`, or 1 where a run that would exit 0 could not be stored in a store the user
    named (`--store`, the environment). Never loses the run: where it cannot be stored, one
    line says why and how to store it later."""
    location = locate(given)
    if location is None:
        return code
    from .db import StoreError, open_store
    from .record import stored_run

    try:
        store = open_store(location)
        try:
            run = stored_run(run_dir)
            written = store.write(run)
        finally:
            store.close()
    except (StoreError, ValueError, OSError) as e:
        later = f"vllm-load store import {run_dir}" + (
            f" --store {location.shown}" if given else ""
        )
        print(
            f"vllm-load run: the run was not stored: {e}; its directory is whole: store it later "
            f"with `{later}`",
            file=sys.stderr,
            flush=True,
        )
        return 1 if code == 0 and location.explicit else code
    print(
        f"Results store: {location.shown} ({'stored' if written else 'already stored'} "
        f"{run.run_id})",
        flush=True,
    )
    return code
