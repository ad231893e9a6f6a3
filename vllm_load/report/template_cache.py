"""Where the report's compiled templates are kept between reports (`render.template_env`)."""

from __future__ import annotations

import os
import stat

import jinja2

from .. import __version__


class _Cache(jinja2.FileSystemBytecodeCache):
    """The templates compiled once per user, not once per report: compiling them was a twelfth
    of a small report's CPU. A template is compiled again when its text changes (jinja keys
    each file by its source's checksum); a cache that cannot be written is only skipped.

    A compiled template is marshalled code, run when loaded: one is loaded only from a file of
    the user's that no other user can write (jinja's own loader opens whatever file is there)."""

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        name = os.path.join(self.directory, self.pattern % (bucket.key,))  # as jinja names it
        try:
            fd = os.open(name, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except OSError:
            return  # not there (yet), or a link
        with os.fdopen(fd, "rb") as f:
            found = os.fstat(f.fileno())
            if stat.S_ISREG(found.st_mode) and _ours_alone(found):
                bucket.load_bytecode(f)

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            super().dump_bytecode(bucket)
        except OSError:
            pass


def template_cache() -> jinja2.BytecodeCache | None:
    """The compiled templates' cache in the user's cache folder ($XDG_CACHE_HOME, else
    ~/.cache), or none where that folder cannot be made or is not the user's alone (another
    owner, writable by group or others, a link): the templates are then compiled each time."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    folder = os.path.join(root, "vllm-load", f"templates-{__version__}")
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        found = os.lstat(folder)
    except OSError:
        return None
    if not (stat.S_ISDIR(found.st_mode) and _ours_alone(found)):
        return None
    return _Cache(folder)


def _ours_alone(found: os.stat_result) -> bool:
    """Owned by this user and writable by no other."""
    getuid = getattr(os, "getuid", None)
    return getuid is not None and found.st_uid == getuid() and not found.st_mode & 0o022
