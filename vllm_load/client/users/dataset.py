"""Users that play the conversations of a dataset file (--dataset), turn by turn.

Each task takes the next conversation of the process's `DatasetSource` (every entry is used
before any repeats), sends its turns one after another with the history of the turns before
(the server's replies, or the file's with --scripted-replies), waits --think-time between turns
and between conversations, and gives up on a conversation at its first failed turn (the failure
is recorded). A one-turn entry (a file of prompts) is one request.

With --rates, conversations start at the process's arrivals (`arrival_clock.py`) instead of after
the think time: only a conversation's first turn arrives at the rate; its later turns follow
it after --think-time each, as people do, so a multi-turn dataset sends more requests per
second than the rate says.

A turn asks for the output length the file gives; else a draw from --output-lengths; else, for a
turn with a scripted reply, that reply's length in tokens (as vLLM's benchmarks take ShareGPT's
output lengths), counted once per process with --tokenizer or the server's /tokenize; else
--output-tokens. With --vllm-params (the default) the server is made to generate exactly that
many tokens, and the report checks it did.
"""

from __future__ import annotations

import logging
import random
import secrets

import gevent.lock
from locust import task

from ...settings import Settings
from ...tokenization.choose import load_tokenizer
from ...user_values import SettingsError, think_range
from ...workload.datasets import Conversation, Dataset, dataset_path, load_dataset
from ...workload.sampling import DatasetSampler, filter_by_length
from ..bodies import exact_output
from ..context import LoadContext
from ..prompts import LocalTokenCounter, ServerTokenCounter, TokenCounter
from .llm_user import LLMUser

logger = logging.getLogger(__name__)

_LOADING = gevent.lock.Semaphore()


class DatasetSource:
    """One process's dataset: read once, its missing output lengths filled in, its conversations
    handed out shuffled without replacement (a seed of the process's own, so workers differ)."""

    KEY = "dataset"  # in `LoadContext.extras`

    def __init__(self, dataset: Dataset) -> None:
        self.dataset = dataset
        self.sampler = DatasetSampler(dataset, seed=secrets.randbits(32))

    @classmethod
    def of(cls, context: LoadContext, host: str) -> DatasetSource:
        """The process's source, loaded by the first user that asks (the others wait)."""
        with _LOADING:
            source = context.extras.get(cls.KEY)
            if not isinstance(source, cls):
                source = cls(prepare_dataset(context.settings, host, context.ensure_model(host)))
                context.extras[cls.KEY] = source
                logger.info("dataset ready: %s", source.dataset.describe())
        return source

    def next(self) -> Conversation:
        return self.sampler.next()


def prepare_dataset(settings: Settings, host: str, model: str) -> Dataset:
    """The --dataset file, with scripted replies' token counts as output lengths where the file
    gives none and --output-lengths does not draw them, and the --dataset-*-prompt/-output
    filters applied (they count tokens: --tokenizer or the server's /tokenize)."""
    dataset = load_dataset(dataset_path(settings.dataset))
    filters = {
        "min_prompt": settings.dataset_min_prompt or None,
        "max_prompt": settings.dataset_max_prompt or None,
        "max_output": settings.dataset_max_output or None,
    }
    needs_counts = not settings.output_lengths and any(
        turn.output_tokens is None and turn.reply
        for conversation in dataset.conversations
        for turn in conversation.turns
    )
    if not needs_counts and not any(filters.values()):
        return dataset
    counter: TokenCounter
    if settings.tokenizer:
        try:
            counter = LocalTokenCounter(load_tokenizer(settings.tokenizer))
        except ValueError as e:  # a missing, empty or broken directory: one line
            raise SettingsError(f"--tokenizer: {e}") from None
    else:
        server = ServerTokenCounter(host, model, api_key=settings.api_key or None)
        if not server.available():
            if any(filters.values()):
                raise SettingsError(
                    f"--dataset-min-prompt/--dataset-max-prompt/--dataset-max-output count "
                    f"tokens: {host} has no /tokenize, so pass --tokenizer PATH"
                )
            logger.warning(
                "no /tokenize on %s and no --tokenizer: turns without an output length in the "
                "file ask for --output-tokens (%d)",
                host,
                settings.output_tokens,
            )
            return dataset
        counter = server
    return filter_by_length(
        dataset, counter.count_text, reply_as_output=not settings.output_lengths, **filters
    )


class DatasetUser(LLMUser):
    """Plays --dataset's conversations with --think-time between turns (module docstring)."""

    open_loop = True

    @classmethod
    def wanted(cls, settings: Settings) -> bool:
        return bool(settings.dataset)

    @classmethod
    def prepare_run(cls, settings: Settings, host: str, model: str) -> dict | None:
        dataset = prepare_dataset(settings, host, model)
        logger.info("dataset: %s", dataset.describe())
        return {
            "dataset": settings.dataset,
            "conversations": len(dataset.conversations),
            "turns": sum(len(c.turns) for c in dataset.conversations),
            "skipped": dict(dataset.skip_reasons),
        }

    def __init__(self, environment) -> None:
        super().__init__(environment)
        self._source: DatasetSource | None = None
        self._think = (0.0, 0.0)
        self._talking = False  # inside a conversation: think time, even with --rates

    def wait_time(self) -> float:
        if self.load_context.load_kind.open_loop and not self._talking:
            return 0.0  # the next conversation starts at an arrival, not after a think
        low, high = self._think
        return random.uniform(low, high) if high > low else low

    def on_start(self) -> None:
        super().on_start()
        assert self.host is not None  # FastHttpUser.__init__ refuses a user without one
        self._source = DatasetSource.of(self.load_context, self.host)
        self._think = think_range(self.load_context.settings.think_time)

    @task
    def dataset_conversation(self) -> None:
        """One conversation of the dataset, turn by turn, until it ends or a turn fails."""
        assert self._source is not None  # on_start loaded it
        context = self.load_context
        settings = context.settings
        conversation = self._source.next()
        if context.load_kind.open_loop:
            self.arrive()
        self._talking = True
        try:
            talk = self.conversation(system=conversation.system)
            for index, turn in enumerate(conversation.turns[: settings.dataset_turns or None]):
                if index:
                    self.wait()
                tokens = turn.output_tokens or context.lengths.draw_output()
                reply = talk.say(
                    turn.user,
                    max_tokens=tokens,
                    reply=turn.reply if settings.scripted_replies else None,
                    images=turn.images,
                    **(exact_output(tokens) if settings.vllm_params else {}),
                )
                if not reply.ok:
                    return
        finally:
            self._talking = False
