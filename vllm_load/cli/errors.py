"""How a subcommand says it failed: `cli.main` prints the one line and chooses the exit status.

A bad option or an unusable target is a `user_values.SettingsError` (exit 2); work that was started
and could not be done (a server that could not be started, restarted or reached, a failed echo
run, a test that did not start) is a `CommandFailed` (exit 1); Ctrl-C is a `KeyboardInterrupt`
(exit 130), an `Interrupted` when the command can say how to carry on. A subcommand prints
none of these lines itself: it raises, and cleans up in `finally`."""

import os


class CommandFailed(Exception):
    """The command's work failed; the message is one line saying what happened and what to do."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a command that can be resumed; the message says how."""


def server_log(where: str | None) -> str:
    """`; the server's output is in PATH` for a server vllm-load started, whose output goes to
    `server.log` in the directory `where`; empty when there is no such file."""
    path = os.path.join(where, "server.log") if where else ""
    return f"; the server's output is in {path}" if path and os.path.exists(path) else ""
