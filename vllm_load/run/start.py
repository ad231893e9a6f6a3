"""What the master settles before a run's first level: which of the locustfile's user classes
take part, and run.json's opening record (the target, the model, the settings, the client, the
calibrated prompts, the workload each class prepared). Raises `SettingsError` with one line on
anything that cannot run."""

from __future__ import annotations

import os
import platform
import socket
import sys

import locust
from locust.runners import MasterRunner

from .. import __version__
from ..client.prompts import PromptPlan, prompt_plan
from ..server.control import max_model_len
from ..settings import Settings
from ..user_values import SettingsError
from .recorder import redacted_argv, utc_iso


def wanted_classes(user_classes: list, settings: Settings) -> list:
    """The user classes that take part (the built-in locustfile's: --dataset picks one); with
    --rates, every one of them must send at arrivals; with --trace, every one must be the
    built-in test's (it sends the trace's lengths)."""
    wanted = [cls for cls in user_classes if getattr(cls, "wanted", lambda _s: True)(settings)]
    closed = [c.__name__ for c in wanted if not getattr(c, "open_loop", False)]
    if settings.rates and closed:
        raise SettingsError(
            f"--rates needs user classes that send at arrivals (the built-in test's); "
            f"{', '.join(closed)} send(s) back to back: use --levels"
        )
    not_replaying = [c.__name__ for c in wanted if not getattr(c, "exact_prompts", False)]
    if settings.trace and not_replaying:
        raise SettingsError(
            f"--trace sends each trace request's own prompt and output lengths, which the "
            f"built-in test's users do; {', '.join(not_replaying)} send(s) prompts of their own"
        )
    return wanted


def exact_prompts_plan(
    settings: Settings, host: str, target: dict, model: str, user_classes: list
) -> PromptPlan | None:
    """The calibrated exact-length prompts, if a user class sends them (checked first against the
    model's context); None otherwise."""
    if not any(getattr(cls, "exact_prompts", False) for cls in user_classes):
        return None
    settings.check_fits(max_model_len(target.get("models"), model))
    return prompt_plan(host, model, settings)


def run_header(
    runner,
    settings: Settings,
    host: str,
    target: dict,
    model: str,
    user_classes: list,
    run_dir: str,
    plan: PromptPlan | None,
) -> dict:
    """run.json as the run starts, with the prompts' `plan` (`exact_prompts_plan`); each class's
    `prepare_run` checks its workload once here (a dataset's filters), before any load."""
    workload = {
        cls.__name__: info
        for cls in user_classes
        if (prepare := getattr(cls, "prepare_run", None)) is not None
        and (info := prepare(settings, host, model)) is not None
    }
    master = isinstance(runner, MasterRunner)
    return {
        "format": 1,
        "run_id": os.path.basename(run_dir.rstrip("/")),
        "vllm_load_version": __version__,
        "locust_version": locust.__version__,
        "target": target,
        "model": model,
        "settings": settings.public(),
        "meta": settings.meta,
        "client": {
            "hostname": socket.gethostname(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "mode": "master" if master else "local",
            "workers": runner.worker_count if master else 1,
            "command": " ".join(redacted_argv(sys.argv, settings.api_key)),
        },
        "prompts": plan.to_json() if plan is not None else None,
        "user_classes": {cls.__name__: cls.weight for cls in user_classes},
        "workload": workload,
        "started_at": utc_iso(),
        "workers_lost": [],
    }
