"""Where the report's compiled templates are kept between reports (`render.template_env`)."""

from __future__ import annotations

import os

import jinja2

from .. import __version__


class _Cache(jinja2.FileSystemBytecodeCache):
    """The templates compiled once per user, not once per report: compiling them was a twelfth
    of a small report's CPU. A template is compiled again when its text changes (jinja keys
    each file by its source's checksum); a cache that cannot be written is only skipped."""

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            super().dump_bytecode(bucket)
        except OSError:
            pass


def template_cache() -> jinja2.BytecodeCache | None:
    """The compiled templates' cache in the user's cache folder ($XDG_CACHE_HOME, else
    ~/.cache), or none where that folder cannot be made."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    folder = os.path.join(root, "vllm-load", f"templates-{__version__}")
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
    except OSError:
        return None
    return _Cache(folder)
