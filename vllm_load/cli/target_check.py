"""The target(s) checked before any load: each answers, serves the model, and (for the built-in
test's exact prompts) counts prompt tokens as the calibration does; one line on a problem."""

from __future__ import annotations

import dataclasses

from ..client.prompts import CalibrationError, PromptPlan, prompt_plan
from ..client.replay_share import check_trace_fits
from ..client.target_picker import target_list
from ..server.control import HttpError, max_model_len, model_ids, request_json
from ..settings import Settings
from ..user_values import SettingsError
from ..workload.traces import Trace


def unusable_target(host: str, error: HttpError) -> str:
    """One line for a target whose /v1/models did not answer: what happened and what to do."""
    if error.status in (401, 403):
        hint = "pass the server's key with --api-key (or $OPENAI_API_KEY)"
    elif error.status == 404:
        hint = "is --host the base URL of an OpenAI-compatible server?"
    elif error.status:
        hint = "check the server's log"
    else:
        hint = "is the server running, and is --host its address?"
    detail = " ".join(str(error).split(": ", 1)[-1].split())[
        :200
    ]  # one line, whatever the server sent
    return f"cannot use the target {host}: GET /v1/models failed ({detail}); {hint}"


def check_target(
    host: str, settings: Settings, exact_prompts: bool = True, trace: Trace | None = None
) -> tuple[str, PromptPlan | None]:
    """Resolve the model and prove the target answers, before any load; a `trace`'s requests
    must fit the model's context. Returns the model id, and the exact prompts' calibration when
    it was made here."""
    try:
        models = request_json(
            host.rstrip("/") + "/v1/models", api_key=settings.api_key or None, timeout=15
        )
    except HttpError as e:
        raise SettingsError(unusable_target(host, e)) from None
    ids = model_ids(models)
    if settings.model:
        if ids and settings.model not in ids:
            raise SettingsError(
                f"--model {settings.model!r} is not served by {host} (it serves: {', '.join(ids)})"
            )
        model = settings.model
    elif not ids:
        raise SettingsError(f"{host}/v1/models lists no model; pass --model")
    else:
        model = ids[0]
    if trace is not None:
        check_trace_fits(trace, max_model_len(models, model))
    plan = None
    if exact_prompts:  # (a locustfile of one's own sends what it sends)
        settings.check_fits(max_model_len(models, model))
        if not settings.approximate_prompts:  # (that falls back with a warning, said by Locust)
            plan = check_prompts(host, model, settings)
    return model, plan


def check_other_targets(host: str, model: str, plan: PromptPlan | None, settings: Settings) -> None:
    """With several targets (--hosts), each after the first is checked as the first was: it
    answers, serves the same model, and counts the exact prompts' tokens as the first does (the
    load processes calibrate on the first, so a replica with another tokenizer or template would
    get prompts of other lengths)."""
    same = dataclasses.replace(settings, model=model)
    for other in target_list(host, settings.hosts)[1:]:
        check_target(other, same, exact_prompts=False)
        if plan is not None:
            theirs = check_prompts(other, model, settings)
            if (theirs.overhead, theirs.head_tokens) != (plan.overhead, plan.head_tokens):
                raise SettingsError(
                    f"{other} counts prompt tokens otherwise than {host} (its chat template and "
                    f"lead take {theirs.overhead} tokens, {host}'s {plan.overhead}): the targets "
                    "of one test must serve the same model, tokenizer and template"
                )


def check_prompts(host: str, model: str, settings: Settings) -> PromptPlan:
    """Calibrate the exact prompts here, so that a prompt too short for the chat template, or a
    target that cannot count tokens, is one line before Locust starts; the load processes this
    command starts take the calibration over (`Launch.env`)."""
    try:
        return prompt_plan(host, model, settings)
    except CalibrationError as e:
        raise SettingsError(str(e)) from None
    except HttpError as e:
        raise SettingsError(f"counting prompt tokens on {host} failed: {e}") from None
