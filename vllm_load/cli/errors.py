"""How a subcommand says it failed: `cli.main` prints the one line and chooses the exit status.

A bad option or an unusable target is a `values.SettingsError` (exit 2); work that was started
and could not be done (a server that would not start, a failed echo run) is a `CommandFailed`
(exit 1)."""


class CommandFailed(Exception):
    """The command's work failed; the message is one line saying what happened."""
