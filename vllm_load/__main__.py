"""`python -m vllm_load` and the `vllm-load` command: the stop signals are taken first, before
the imports of the command (a fifth of a second), so that one sent during them ends it in one
line too, once they are done (`stop_signals`)."""

import sys

from .stop_signals import COMMAND_STOP, EXIT_STOPPED, command_named


def main() -> int:
    try:  # (a signal during `install` itself is caught here too)
        COMMAND_STOP.install()
        COMMAND_STOP.defer()  # until the command's modules are imported (`cli.main`)
        from .cli.main import main as command

        return command()
    except KeyboardInterrupt:  # cli.main's own line, where it could not say it itself
        print(f"vllm-load {command_named(sys.argv[1:])}: interrupted", file=sys.stderr)
        return EXIT_STOPPED
    finally:
        COMMAND_STOP.done()


if __name__ == "__main__":
    sys.exit(main())
