"""`python -m vllm_load.locust_main ARGS`: Locust's own command (`python -m locust ARGS`), the
Locust child of `vllm-load run`, `master` and `worker` (`cli.locust_process`).

The one difference: a stop signal that comes while Locust imports and starts is noted, not a
traceback or a silent death (`stop_signals.hold`); the wiring acts on it once Locust's
environment exists (`run.wiring`)."""

from __future__ import annotations

import sys


def main() -> None:
    from .stop_signals import hold

    hold()
    sys.argv[0] = "locust"
    from locust.main import main as locust

    locust()


if __name__ == "__main__":
    main()
