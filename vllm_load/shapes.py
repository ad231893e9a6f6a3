"""The stepped load shape: Locust's `LoadTestShape` driving `vllm_load.steps.StepController`.

It runs on the master (or the single local process). Each tick asks the run session how many
requests of the current level have finished, and reports level changes back to it.
"""

from __future__ import annotations

import time

from locust import LoadTestShape

from .prompts import CalibrationError
from .settings import SettingsError
from .steps import LevelPlan, StepController


class SteppedShape(LoadTestShape):
    """Locust shape for the stepped test; the levels and counts come from vllm-load's options."""

    use_common_options = False

    def __init__(self) -> None:
        super().__init__()
        self.controller: StepController | None = None

    def reset_time(self) -> None:
        super().reset_time()
        self.controller = None  # a new test (e.g. started again from the web UI) starts from level 0

    def tick(self):
        from .session import RunSession, fail  # the session module imports the users; import at call time

        try:
            session = RunSession.ensure(self.runner.environment)
        except (SettingsError, CalibrationError) as e:
            fail(self.runner.environment, str(e))
            return None
        if self.controller is None:
            settings = session.settings
            self.controller = StepController(
                LevelPlan(
                    tuple(settings.levels),
                    settings.warmup_requests,
                    settings.requests_per_level,
                    settings.level_time_cap,
                    settings.cooldown,
                )
            )
        users = self.controller.tick(time.time(), session.recorder.finished_in_level)
        for change in self.controller.take_changes():
            session.level_changed(change)
        if users is None:
            return None
        return users, session.settings.spawn_rate_per_level
