"""`python -m vllm_load` and the `vllm-load` command: the stop signals are taken first, before
the imports of the command (a fifth of a second), so that one sent during them ends it in one
line too (`stop_signals`)."""

import sys

from .stop_signals import COMMAND_STOP, EXIT_STOPPED, command_named


def main() -> int:
    COMMAND_STOP.install()
    try:
        return _command()
    finally:
        COMMAND_STOP.done()


def _command() -> int:
    try:
        from .cli.main import main as command
    except KeyboardInterrupt:  # (cli.main's own line, before it could be imported)
        print(f"vllm-load {command_named(sys.argv[1:])}: interrupted", file=sys.stderr)
        return EXIT_STOPPED
    return command()


if __name__ == "__main__":
    sys.exit(main())
