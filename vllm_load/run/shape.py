"""The stepped load shape: Locust's `LoadTestShape` driving `vllm_load.run.steps.StepController`.

It runs on the master (or the single local process). Each tick asks the run session how many
requests of the current level have finished, and reports level changes back to it.
"""

from __future__ import annotations

import time

from locust import LoadTestShape

from ..client.prompts import CalibrationError
from ..user_values import SettingsError
from .session import RunSession, fail


class SteppedShape(LoadTestShape):
    """Locust shape for the stepped test; the levels and counts come from vllm-load's options.

    The level controller lives in the run session, not here: Locust resets a shape's clock
    more than once per test (and once per test started from the web UI).
    """

    use_common_options = False

    def tick(self):
        environment = self.runner.environment
        try:
            session = RunSession.ensure(environment)
        except (SettingsError, CalibrationError) as e:
            fail(environment, str(e))
            return None
        users = session.tick(time.time())
        if users is None:
            return None
        if session.all_classes_wanted:
            return users, session.settings.spawn_rate_per_level
        return users, session.settings.spawn_rate_per_level, session.user_classes
