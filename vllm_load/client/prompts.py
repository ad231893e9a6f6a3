"""Exact-length prompts for the target's tokenizer, chat template included.

Prompts are built from *atoms*: common words with a leading space that the target's tokenizer
counts as exactly one token each and that do not merge across the spaces between them.
Calibration (once per process, before any load) finds the atoms and the fixed overhead of the
chat template by asking a `TokenCounter` (the server's `/tokenize`, or a local tokenizer), then
checks sample prompts end to end. Every prompt then costs a random choice of a few atoms:

    LEAD + shared prefix (optional, the same for all) + unique head + pre-built body

The unique head at the front means no two requests share a prefix, so prefix caching cannot
inflate throughput unless a shared prefix is asked for on purpose.
"""

from __future__ import annotations

import json
import logging
import os
import random
from dataclasses import dataclass, field

from ..settings import Settings
from ..tokenization.choose import load_tokenizer
from .token_counters import CalibrationError, LocalTokenCounter, ServerTokenCounter, TokenCounter

logger = logging.getLogger(__name__)

LEAD = "Continue"
UNIQUE_HEAD_ATOMS = 16
BODY_POOL = 32

WORDS = """the of and to in is was for that on as with by he at from his it an were are which this be
has or had first one their its new after who they two her she been other when time all during there
into school more may years over only year most would world city some where between later up such used
many can state about national out known university united then made three also but him film team part
high well like game line long back each end best year very see even old way work life home day part
man good both under just while new own show run side set how long group city name few area land war
case body book car water place word play point far low top sun sea sky red blue green king road hand
head eye face door room tree fish bird dog cat horse rock fire rain snow wind star moon gold iron
wood salt milk rice bread cake tea corn oil gas art law act age air arm bed box boy cup dry ear egg
fat few fun gun hat ice job key kid lab leg lip map mix mud net nut pan pen pet pie pig pin pot ray
row rug sad sit ski sky son sum tax tip toe toy van web wet win yes zoo ball bank bear bell bill
boat bone cell chip city coat code cold cook cool cost crew dark deal deep desk dish door down draw
drop dust duty easy edge face fact fair fall farm fast fear feel file fill find fine foot form free
full gain gate gift girl give glad goal gray grow hair half hall hard hear heat help hide hill hold
hole hope hour huge idea join jump keep kind kiss knee lack lady lake last late lead left lift list
live load lock loss love luck mail main mark mass meal meet mind miss mode moon move must near neck
need news next nice nose note open page pain pair park past path peak pick pile plan plus pool poor
post pull pure push race rare rate read real rest rich ride ring rise risk role roof rule safe sail
sale save seat seed sell send ship shop shot sick sign sing size skin slow soft soil song sort spot
step stop suit sure tail take talk tall task tell term test text thin tour town trip true turn type
unit user vast view vote wait walk wall want warm wash wave weak wear week west wide wild wine wire
wise wish wood yard zone""".split()
# Words of up to four letters are whole tokens (with their leading space) in every common BPE
# vocabulary, which keeps calibration to a handful of /tokenize calls.
WORDS = sorted({w for w in WORDS if len(w) <= 4})


def atom_text(words: list[str]) -> str:
    """Words as running text, each with its leading space (one join: this is per request)."""
    return " " + " ".join(words) if words else ""


def find_single_token_words(counter: TokenCounter, words: list[str]) -> list[str]:
    """The words that cost exactly one token each in running text, found by group testing.

    Every word costs at least one token and pre-tokenizers split at spaces, so a group's
    *excess* (tokens minus words) says how many extra tokens its words cost: a group with no
    excess is all single-token words. Counting one half of a group gives the other half's
    excess by difference, so a split costs one call, and calibration a few dozen.
    """
    keep: list[str] = []
    unique = sorted(set(words))
    pending = [(unique, counter.count_text(atom_text(unique)) - len(unique))]
    while pending:
        group, excess = pending.pop()
        if excess <= 0:
            keep.extend(group)
        elif len(group) > 1:
            half = group[: len(group) // 2]
            half_excess = counter.count_text(atom_text(half)) - len(half)
            pending += [(half, half_excess), (group[len(half) :], excess - half_excess)]
    return sorted(keep)


@dataclass(frozen=True)
class PromptPlan:
    """What calibration found: how to reach an exact prompt length on this target."""

    endpoint: str
    input_tokens: int
    atoms: tuple[str, ...]
    overhead: int  # tokens the template, special tokens and LEAD add to the atoms
    method: str
    shared_prefix_tokens: int = 0
    #: of the overhead, the prompt tokens before the first atom (the template's head, special
    #: tokens, LEAD; the rest is the template's tail); None when calibration could not tell
    head_tokens: int | None = None

    @property
    def body_atoms(self) -> int:
        return self.input_tokens - self.overhead - self.shared_prefix_tokens - UNIQUE_HEAD_ATOMS

    @property
    def tail_tokens(self) -> int | None:
        """The prompt tokens after the last atom (the template's tail), when the head is known."""
        return None if self.head_tokens is None else self.overhead - self.head_tokens

    def to_json(self) -> dict:
        return {
            "method": self.method,
            "endpoint": self.endpoint,
            "input_tokens": self.input_tokens,
            "overhead_tokens": self.overhead,
            "head_tokens": self.head_tokens,
            "atoms": len(self.atoms),
            "shared_prefix_tokens": self.shared_prefix_tokens,
        }


def find_head_tokens(
    counter: TokenCounter, endpoint: str, atoms: tuple[str, ...], overhead: int
) -> int | None:
    """The prompt tokens before the first atom: where the token ids of two prompts first differ,
    whose atoms differ from the first on. None when the counter gives no ids, or ids that do not
    agree with `overhead` (the same tail after both contents, one token per atom)."""
    first = list(atoms[:8])
    second = first[1:] + first[:1]
    ids_a = counter.input_ids(LEAD + atom_text(first), endpoint)
    ids_b = counter.input_ids(LEAD + atom_text(second), endpoint)
    if ids_a is None or ids_b is None:
        return None
    head = next((i for i, (a, b) in enumerate(zip(ids_a, ids_b)) if a != b), len(ids_a))
    tail = overhead - head
    size = overhead + len(first)
    if (
        tail < 0
        or len(ids_a) != size
        or len(ids_b) != size
        or ids_a[head + 8 :] != ids_b[head + 8 :]
    ):
        return None
    return head


def calibrate(
    counter: TokenCounter,
    endpoint: str,
    input_tokens: int,
    shared_prefix_tokens: int = 0,
    seed: int = 0,
) -> PromptPlan:
    """Find atoms and template overhead with `counter`, and check them end to end."""
    atoms = find_single_token_words(counter, WORDS)
    if len(atoms) < 50:
        raise CalibrationError(
            f"only {len(atoms)} common words are single tokens for this tokenizer; "
            "exact prompts need at least 50 (use --approximate-prompts to send approximate lengths)"
        )
    rng = random.Random(seed)
    overheads = set()
    for k in (7, 61, 203):
        overheads.add(counter.count_input(LEAD + atom_text(rng.choices(atoms, k=k)), endpoint) - k)
    if len(overheads) != 1:
        raise CalibrationError(
            f"this tokenizer does not count the prompt atoms additively (template overheads {sorted(overheads)}); "
            "use --approximate-prompts"
        )
    overhead = overheads.pop()
    head = find_head_tokens(counter, endpoint, tuple(atoms), overhead)
    if head is None:
        logger.warning(
            "the token ids do not say where the chat template's head ends: the prefix-cache hits "
            "of trace prompts cannot be predicted on this target"
        )
    plan = PromptPlan(
        endpoint,
        input_tokens,
        tuple(atoms),
        overhead,
        counter.method,
        shared_prefix_tokens,
        head_tokens=head,
    )
    if plan.body_atoms < 0:
        raise CalibrationError(
            f"--input-tokens {input_tokens} is too short: the chat template and a unique head alone take "
            f"{plan.overhead + UNIQUE_HEAD_ATOMS + shared_prefix_tokens} tokens on this target"
        )
    factory = PromptFactory(plan, seed=seed, pool=2)
    for _ in range(2):
        content = factory.next_content()
        got = counter.count_input(content, endpoint)
        if got != input_tokens:
            raise CalibrationError(
                f"a calibrated prompt counts {got} tokens instead of {input_tokens} on this target; "
                "use --approximate-prompts"
            )
    return plan


def approximate_plan(endpoint: str, input_tokens: int, shared_prefix_tokens: int = 0) -> PromptPlan:
    """A plan that assumes one token per atom and no template overhead (no tokenizer at hand)."""
    overhead = 1  # LEAD
    if input_tokens < overhead + UNIQUE_HEAD_ATOMS + shared_prefix_tokens:
        raise CalibrationError(f"--input-tokens {input_tokens} is too short for a unique prompt")
    return PromptPlan(
        endpoint, input_tokens, tuple(WORDS), overhead, "approximate", shared_prefix_tokens
    )


@dataclass
class PromptFactory:
    """Hands out prompt texts of the plan's exact length, each with a unique head."""

    plan: PromptPlan
    seed: int = 0
    pool: int = BODY_POOL
    _rng: random.Random = field(init=False, repr=False)
    _prefix: str = field(init=False, repr=False)
    _bodies: list[str] = field(init=False, repr=False)
    _next: int = field(init=False, default=0, repr=False)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        atoms = list(self.plan.atoms)
        shared = random.Random(0x5EED).choices(atoms, k=self.plan.shared_prefix_tokens)
        self._prefix = LEAD + atom_text(shared)
        self._bodies = [
            atom_text(self._rng.choices(atoms, k=self.plan.body_atoms)) for _ in range(self.pool)
        ]

    @property
    def min_tokens(self) -> int:
        """The shortest prompt this plan builds: template, lead, shared prefix and unique head."""
        return self.plan.input_tokens - self.plan.body_atoms

    def next_content(self, input_tokens: int | None = None) -> str:
        """A prompt of the plan's length, or of `input_tokens` (at least `min_tokens`): every
        atom is one token that merges with none, so any number of them is exact."""
        head = atom_text(self._rng.choices(self.plan.atoms, k=UNIQUE_HEAD_ATOMS))
        if input_tokens is None or input_tokens == self.plan.input_tokens:
            body = self._bodies[self._next]
            self._next = (self._next + 1) % len(self._bodies)
        else:
            body = self._body_of(input_tokens - self.min_tokens)
        return self._prefix + head + body

    def words(self, tokens: int) -> str:
        """Running text of `tokens` atoms: that many tokens where the plan was calibrated (each
        atom one token that merges with none), about as many with an approximate plan."""
        return atom_text(self._rng.choices(self.plan.atoms, k=tokens))

    def _body_of(self, atoms: int) -> str:
        if atoms < 0:
            raise ValueError(f"a prompt needs at least {self.min_tokens} tokens here")
        words = self._rng.choices(self.plan.atoms, k=atoms)
        return atom_text(words) if words else ""


#: The environment variable by which `vllm-load run` hands the calibration it made before Locust
#: started to the load processes it starts, so that they do not ask the target again.
HANDED_PLAN_ENV = "VLLM_LOAD_PROMPT_PLAN"


def _plan_key(host: str, model: str, settings: Settings) -> dict:
    """What a calibration depends on: the target, and the options that shape the prompts."""
    return {
        "host": host.rstrip("/"),
        "model": model,
        "endpoint": settings.endpoint,
        "input_tokens": settings.input_tokens,
        "shared_prefix_tokens": settings.shared_prefix_tokens,
        "tokenizer": settings.tokenizer or "",
        "approximate_prompts": settings.approximate_prompts,
    }


def handed_over(plan: PromptPlan, host: str, model: str, settings: Settings) -> dict[str, str]:
    """The environment that hands `plan` (calibrated for `host`, `model` and `settings`) over to a
    child process (`HANDED_PLAN_ENV`)."""
    data = {
        "key": _plan_key(host, model, settings),
        "atoms": list(plan.atoms),
        "overhead": plan.overhead,
        "head_tokens": plan.head_tokens,
        "method": plan.method,
    }
    return {HANDED_PLAN_ENV: json.dumps(data)}


def handed_plan(host: str, model: str, settings: Settings) -> PromptPlan | None:
    """The plan the launching command handed over, if it was made for this target and these
    options (None otherwise, or when it does not parse: then this process calibrates)."""
    text = os.environ.get(HANDED_PLAN_ENV)
    if not text:
        return None
    try:
        data = json.loads(text)
        if data["key"] != _plan_key(host, model, settings):
            return None
        atoms = tuple(str(a) for a in data["atoms"])
        overhead, method = int(data["overhead"]), str(data["method"])
        head = None if data["head_tokens"] is None else int(data["head_tokens"])
    except (ValueError, KeyError, TypeError):
        return None
    return PromptPlan(
        settings.endpoint,
        settings.input_tokens,
        atoms,
        overhead,
        method,
        settings.shared_prefix_tokens,
        head_tokens=head,
    )


#: this process's plans, by what a calibration depends on (`_plan_key`): a run session and its
#: users, or the tests of one web UI, ask the target once
_PLANS: dict[str, PromptPlan] = {}


def prompt_plan(host: str, model: str, settings: Settings) -> PromptPlan:
    """This process's plan for `host`, `model` and `settings`, made once: the one the launching
    command handed over (`handed_plan`), or a calibration (`calibrate_target`)."""
    key = json.dumps(_plan_key(host, model, settings), sort_keys=True)
    plan = _PLANS.get(key)
    if plan is None:
        plan = handed_plan(host, model, settings)
        if plan is not None:
            logger.info(
                "%s for %s on %s: calibrated before the start", _said(settings), model, host
            )
        else:
            plan = calibrate_target(host, model, settings)
        _PLANS[key] = plan
    return plan


def _said(settings: Settings) -> str:
    """The prompts a log line names: a trace's requests have lengths of their own (the plan's
    atoms and template serve them all), other runs --input-tokens."""
    if settings.trace:
        return "exact prompts of the trace's lengths"
    return f"{settings.input_tokens}-token prompts"


def calibrate_target(host: str, model: str, settings: Settings) -> PromptPlan:
    """Calibrate exact prompts: server /tokenize, else --tokenizer, else approximate if allowed."""
    args = (settings.endpoint, settings.input_tokens, settings.shared_prefix_tokens)
    logger.info("calibrating %s for %s on %s", _said(settings), model, host)
    if settings.tokenizer:
        try:
            tokenizer = load_tokenizer(settings.tokenizer)
        except ValueError as e:  # a missing, empty or broken directory: one line
            raise CalibrationError(f"--tokenizer: {e}") from None
        return calibrate(LocalTokenCounter(tokenizer), *args)
    server = ServerTokenCounter(host, model, api_key=settings.api_key or None)
    if server.available():
        return calibrate(server, *args)
    if settings.approximate_prompts:
        logger.warning(
            "no /tokenize on %s and no --tokenizer: prompt lengths are approximate", host
        )
        return approximate_plan(*args)
    raise CalibrationError(
        f"{host} has no /tokenize endpoint, so exact {settings.input_tokens}-token prompts cannot be built; "
        "pass --tokenizer PATH (the model's tokenizer directory) or --approximate-prompts"
    )
